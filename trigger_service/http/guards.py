"""Middleware that protects the API from its clients: a request id on every answer, the
callers' request rates, and a deadline on reading a request's body.

Order in ``build_app``: timing → tracing → request id → errors → auth → connection share
(``http/server.py``) → refusal wait → rate limit → CPU share → body deadline → the route. The
rate limit runs after auth (it needs the caller) and before the body is read, so a caller
over its rate costs one Redis round trip and nothing else; the wait then bounds how often a
caller that ignores its ``Retry-After`` can make the API pay even that.
"""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import Awaitable, Callable, Mapping

import structlog
from aiohttp import hdrs, web
from aiohttp.typedefs import Handler

from trigger_service.app.cpu_shares import CpuShares, charging
from trigger_service.config.callers import Caller
from trigger_service.core.errors import AdapterError, RateLimited, UnsupportedMediaType
from trigger_service.core.ports import Metrics
from trigger_service.core.ports.limit import BucketRule, Decision, RateLimiter
from trigger_service.http.keys import CALLER_KEY, REQUEST_ID_KEY

log = structlog.get_logger(__name__)

Middleware = Callable[..., Awaitable[web.StreamResponse]]
REQUEST_ID_HEADER = "X-Request-Id"


def new_request_id() -> str:
    """16 hex digits, unique enough to find a request's log lines; not a secret, so not from
    the OS's entropy (``secrets`` made a system call per request: 2% of a registration's
    CPU). The ``random`` module reseeds itself in a forked child: workers do not collide."""
    return f"{random.getrandbits(64):016x}"


@web.middleware
async def request_id_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """A fresh id per request (a client's own ``X-Request-Id`` is not trusted: it would let
    one forge log lines under another's id), bound to every log line of the request and
    returned in ``X-Request-Id`` on every answer."""
    rid = new_request_id()
    request[REQUEST_ID_KEY] = rid
    with structlog.contextvars.bound_contextvars(request_id=rid):
        try:
            response = await handler(request)
        except web.HTTPException as e:  # redirects and the like, re-raised by errors
            e.headers[REQUEST_ID_HEADER] = rid
            raise
    response.headers[REQUEST_ID_HEADER] = rid
    return response


def request_id_of(request: web.Request) -> str:
    return request[REQUEST_ID_KEY] if REQUEST_ID_KEY in request else ""


def rate_limit_middleware(limiter: RateLimiter, metrics: Metrics) -> Middleware:
    """Every ``/v1/`` request of a caller with a ``rate_per_s`` takes a token from its bucket
    (shared by every API process); none left: ``429 rate_limited`` with ``Retry-After``.
    Ops users are not limited (a handful of people; the ops console must work during an
    incident). Redis unreachable: the request goes through (``rate_limit_errors_total``).

    No request is let through over the rate, a retry under an Idempotency-Key that was
    answered included: its route parses, plans and resolves the body before it can tell a
    replay from ``422``, and that work is what the rate bounds. The ``Retry-After`` retry
    gets the replay."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        caller: Caller | None = request.get(CALLER_KEY)
        if caller is not None and caller.rate_per_s is not None and caller.burst is not None:
            decision = await _take(limiter, metrics, caller.name,
                                   BucketRule(caller.rate_per_s, caller.burst))
            if not decision.allowed:
                metrics.inc("rate_limited_total", caller=caller.name)
                raise RateLimited(f"more than {caller.rate_per_s:g} requests per second "
                                  f"(burst {caller.burst}); retry after the seconds "
                                  "Retry-After gives", decision.retry_after_s)
        return await handler(request)

    return middleware


def refusal_wait_middleware(wait_s: float, sleep: Callable[[float], Awaitable[None]]
                            = asyncio.sleep) -> Middleware:
    """A caller's ``429 rate_limited`` is answered after ``min(wait_s, Retry-After)``, with
    ``Retry-After`` less the time waited: a client that waits as told loses nothing, one that
    retries at once gets at most one answer per connection per wait, instead of as many as
    the API can refuse (each refusal costs the API a request's parsing and a Redis round
    trip, CPU every other caller shares). The waiting request keeps its connection, within its
    caller's share (``http/server.py``). ``wait_s`` 0: answered at once."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except RateLimited as e:
            if wait_s <= 0 or e.frees_a_slot:
                raise
            waited_s = min(wait_s, e.retry_after_s)
            await sleep(waited_s)
            e.retry_after_s = max(0, math.ceil(e.retry_after_s - waited_s))
            raise

    return middleware


def cpu_share_middleware(shares: CpuShares) -> Middleware:
    """A caller's request is charged, in this process, the CPU its time fields cost to read
    and plan (``app/cpu_shares.py``); a caller whose share is spent is refused ``429`` before
    more of its work starts. Ops users are not charged."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        caller: Caller | None = request.get(CALLER_KEY)
        if caller is None:
            return await handler(request)
        with charging(shares, caller.name):
            return await handler(request)

    return middleware


async def take_items(limiter: RateLimiter, metrics: Metrics, caller: Caller,
                     count: int) -> int:
    """How many of ``count`` more items (a batch's, beyond the one its request's token paid
    for) ``caller``'s rate allows now: its bucket counts items, not requests. All of them
    for a caller without a rate, or when Redis fails (open, as the middleware)."""
    if count <= 0 or caller.rate_per_s is None or caller.burst is None:
        return max(0, count)
    try:
        granted = await limiter.take_up_to(caller.name, BucketRule(caller.rate_per_s,
                                                                   caller.burst), count)
    except AdapterError as e:
        metrics.inc("rate_limit_errors_total")
        log.warning("rate_limit_unavailable", caller=caller.name, error=str(e))
        return count
    if granted < count:
        metrics.inc("rate_limited_total", caller=caller.name)
    return granted


async def _take(limiter: RateLimiter, metrics: Metrics, key: str, rule: BucketRule) -> Decision:
    try:
        return await limiter.take(key, rule)
    except AdapterError as e:
        # Fail open: a limit protects fairness, and refusing everyone because Redis is down
        # would turn a Redis outage into an API outage.
        metrics.inc("rate_limit_errors_total")
        log.warning("rate_limit_unavailable", caller=key, error=str(e))
        return Decision(True)


def body_deadline_middleware(timeout_s: float, max_bytes: int,
                             large_bodies: Mapping[str, int] | None = None) -> Middleware:
    """Read the body (if any) within ``timeout_s`` before the route runs; the route's own
    ``request.read()`` then returns it from memory. Too slow: ``408 request_timeout`` and the
    connection is closed (what is left of the body cannot be skipped in time either).

    At most ``max_bytes``, or for a route pattern in ``large_bodies`` its own size (the
    batch create's thousand items; the application's ``client_max_size`` is the largest of
    them): a larger declared ``Content-Length`` is ``413 payload_too_large`` before anything
    is read, a larger chunked body as soon as what was read passes the route's size (never
    the largest route's). A request no route takes (``404``, ``405``) is answered without
    its body being read. Authentication and the rate limit run before this."""
    large = dict(large_bodies or {})

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        resource = request.match_info.route.resource
        if (resource is None or not request.body_exists
                or request.method not in ("POST", "PUT", "PATCH", "DELETE")):
            return await handler(request)
        limit = large.get(resource.canonical, max_bytes)
        if request.content_length is not None and request.content_length > limit:
            return _too_large(limit)
        # aiohttp's read() stops once the body passes client_max_size, the application's
        # (the largest route's) unless told this route's; it keeps what it read for the
        # route (and for any middleware outside this one).
        request._client_max_size = limit
        try:
            async with asyncio.timeout(timeout_s):
                await request.read()
        except web.HTTPRequestEntityTooLarge:
            return _too_large(limit)
        except TimeoutError:
            response = web.json_response(
                {"error": "request_timeout",
                 "message": f"the request body did not arrive within {timeout_s:g} s"},
                status=408)
            response.force_close()
            return response
        return await handler(request)

    return middleware


def _too_large(limit: int) -> web.Response:
    response = web.json_response(
        {"error": "payload_too_large",
         "message": f"the request body is larger than {limit} bytes"}, status=413)
    # The rest of the body is not read: it cannot be skipped on a connection kept open.
    response.force_close()
    return response


def is_json_media_type(content_type: str) -> bool:
    """``application/json`` and its ``+json`` relatives (merge patch among them)."""
    kind, _, sub = content_type.lower().partition("/")
    return kind == "application" and (sub == "json" or sub.endswith("+json"))


@web.middleware
async def json_body_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """A ``/v1`` body with a Content-Type must say JSON: a form, text or multipart body is
    ``415 unsupported_media_type`` rather than read as JSON by accident. A body without a
    Content-Type is read as JSON (what a bare HTTP client sends)."""
    if (request.path.startswith("/v1/") and request.body_exists
            and hdrs.CONTENT_TYPE in request.headers
            and not is_json_media_type(request.content_type)):
        raise UnsupportedMediaType(
            f"a body of type {request.content_type[:100]!r}: this API reads application/json")
    return await handler(request)
