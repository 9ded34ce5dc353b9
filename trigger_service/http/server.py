"""The API's listening side: aiohttp's HTTP server with deadlines for slow clients, a cap on
open connections, and its own error answers in the API's JSON shape.

- **Request head deadline** (``TRIGGER_LIMITS_HEADER_TIMEOUT_S``): a new connection that has not
  sent a whole request line and headers within it gets ``408 request_timeout`` and is closed
  (a slowloris client holds a connection for this long at most). On a kept-alive connection
  the keep-alive timeout bounds the wait for the next request, partial head included
  (aiohttp closes a connection still waiting for a whole request when it runs out).
- **Body deadline**: ``http.guards.body_deadline_middleware`` (then at most ``LINGER_S``
  more to drain what is left before the connection closes).
- **Idle keep-alive** (``TRIGGER_LIMITS_KEEPALIVE_TIMEOUT_S``, at most 75 s): aiohttp's own.
- **Connection cap** (``TRIGGER_LIMITS_MAX_CONNECTIONS``): one connection over it takes the
  slot of the kept-alive connection idle the longest (closed), or, none being idle, is
  answered ``503 too_many_connections`` at once and closed, without reading it; the kernel's
  listen backlog (1024) holds connections that arrive faster than they are accepted.
- **A caller's share** (``TRIGGER_LIMITS_CALLER_CONNECTION_SHARE``): a connection counts
  against the principal whose request it last carried; a caller's request on one more
  connection than its share is ``429 too_many_connections`` (``connection_share_middleware``).
  The policy is ``http.connections.ConnectionShares``.
- **Refusals close their connection**: a ``401``, ``429`` or ``503``, and any refusal of a
  long-lived request (an inbox stream, ``LONG_LIVED_KEY``), is answered ``Connection: close``
  and the server closes the connection, so a flood of refused requests holds no slot.
- **Anonymous idle** (``TRIGGER_LIMITS_ANONYMOUS_IDLE_S``): a kept-alive connection no
  principal has used is closed after idling this long.
- **Head sizes** (``TRIGGER_LIMITS_MAX_LINE_BYTES``, ``_FIELD_BYTES``, ``_HEADERS``): aiohttp's
  parser limits; over them the answer is ``431 headers_too_large`` (a line or a value) or
  ``400 invalid_request`` (too many headers, or anything else malformed), as JSON.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import structlog
from aiohttp import web
from aiohttp.http_exceptions import LineTooLong
from aiohttp.typedefs import Handler
from aiohttp.web_protocol import RequestHandler

from trigger_service.config.limits import LimitSettings
from trigger_service.core.errors import TooManyConnections
from trigger_service.core.ports import Clock, Metrics
from trigger_service.core.time.clock import SystemClock
from trigger_service.http.connections import ConnectionShares
from trigger_service.http.guards import REQUEST_ID_HEADER, new_request_id
from trigger_service.http.keys import LONG_LIVED_KEY, PRINCIPAL_KEY

log = structlog.get_logger(__name__)
# After answering a request whose body was not read whole (a 401, a 429, a 408), aiohttp reads
# and drops what is left for this long so the client sees the answer rather than a reset;
# aiohttp's 10 s would let every slow body hold its connection that much longer.
LINGER_S = 2.0
# Answers after which the connection is closed whatever the client asked: a refusal the
# client is to wait on (a 429, a 503) or one that says it is nobody (a 401) frees its slot.
CLOSING_STATUSES = frozenset({401, 429, 503})


def _raw_answer(status: int, reason: str, code: str, message: str) -> bytes:
    """A whole HTTP/1.1 answer for a connection that never reached the application."""
    body = json.dumps({"error": code, "message": message}).encode()
    head = (f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n"
            f"{REQUEST_ID_HEADER}: {new_request_id()}\r\n\r\n")
    return head.encode() + body


class _Handler(RequestHandler):
    """aiohttp's connection handler; its own error answers (a request head it could not
    parse, a handler that escaped every middleware) are ours: JSON, without details; and
    every answer tells ``guard`` (its server) that the connection is idle again."""

    def __init__(self, guard: GuardedServer, **kwargs: Any) -> None:
        super().__init__(guard, **kwargs)
        self.guard = guard

    async def finish_response(self, request: Any, resp: Any,
                              start_time: float | None) -> tuple[Any, bool]:
        if isinstance(resp, web.StreamResponse) and _closes(request, resp):
            resp.force_close()
        try:
            return await super().finish_response(request, resp, start_time)
        finally:
            self.guard.answered(self)

    def handle_error(self, request: Any, status: int = 500, exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        if request.writer.output_size > 0:  # what aiohttp does: the answer has begun
            raise ConnectionError("response already started")
        if isinstance(exc, LineTooLong):
            status, code, text = 431, "headers_too_large", "a request line or header is too long"
        elif 400 <= status < 500:
            code, text = "invalid_request", "malformed HTTP request"
        else:
            status, code, text = 500, "internal_error", "unexpected error; it has been logged"
        rid = new_request_id()
        # The type only: the message quotes the offending line, which may hold a credential.
        log.info("http_error", status=status, error=type(exc).__name__, request_id=rid)
        response = web.json_response({"error": code, "message": text}, status=status,
                                     headers={REQUEST_ID_HEADER: rid})
        response.force_close()
        return response


def _closes(request: web.BaseRequest, resp: web.StreamResponse) -> bool:
    return resp.status in CLOSING_STATUSES or (
        resp.status >= 400 and isinstance(request, web.Request)
        and request.get(LONG_LIVED_KEY, False))


class GuardedServer(web.Server):
    """``web.Server`` with the head deadline, the connection cap and the callers' shares
    (see the module)."""

    def __init__(self, plain: web.Server, limits: LimitSettings, metrics: Metrics,
                 clock: Clock) -> None:
        # Built from the application's own server, so the app's handler, request factory
        # and handler arguments stay exactly aiohttp's.
        super().__init__(plain.request_handler, request_factory=self._noting(plain),
                         handler_cancellation=plain.handler_cancellation,
                         loop=asyncio.get_running_loop(), **plain._kwargs)
        self._limits = limits
        self._metrics = metrics
        self._heads: set[RequestHandler] = set()  # connections that sent a whole head
        self.shares: ConnectionShares[RequestHandler] = ConnectionShares(
            limits.max_connections, limits.connections_per_caller,
            int(limits.anonymous_idle_s * 1000), clock)

    def _noting(self, plain: web.Server) -> Any:
        factory = plain.request_factory

        def make(message: Any, payload: Any, protocol: RequestHandler, writer: Any,
                 task: Any) -> Any:
            self._heads.add(protocol)
            self.shares.started(protocol)
            return factory(message, payload, protocol, writer, task)

        return make

    def __call__(self) -> RequestHandler:
        return _Handler(self, loop=self._loop, **self._kwargs)

    def connection_made(self, handler: RequestHandler, transport: asyncio.Transport) -> None:
        admission = self.shares.open(handler)
        if admission.evicted is not None:
            self._metrics.inc("http_connections_evicted_total")
            admission.evicted.force_close()
        if not admission.admitted:
            self._metrics.inc("http_connections_refused_total")
            transport.write(_raw_answer(503, "Service Unavailable", "too_many_connections",
                                        "this server has too many open connections; retry"))
            transport.close()
            return
        super().connection_made(handler, transport)
        self._loop.call_later(self._limits.header_timeout_s, self._head_deadline, handler,
                              transport)

    def connection_lost(self, handler: RequestHandler, exc: BaseException | None = None) -> None:
        self._heads.discard(handler)
        self.shares.closed(handler)
        super().connection_lost(handler, exc)

    def answered(self, handler: RequestHandler) -> None:
        """``handler``'s answer is sent: it is idle (an anonymous one for a short while)."""
        self.shares.finished(handler)
        if self.shares.owner(handler) is None:
            self._loop.call_later(self._limits.anonymous_idle_s, self._anonymous_deadline,
                                  handler)

    def claim(self, handler: RequestHandler, owner: str, *, capped: bool) -> bool:
        """``ConnectionShares.claim``, counted in ``http_caller_connections_refused_total``."""
        if self.shares.claim(handler, owner, capped=capped):
            return True
        self._metrics.inc("http_caller_connections_refused_total")
        return False

    def _anonymous_deadline(self, handler: RequestHandler) -> None:
        if self.shares.idle_expired(handler):
            self._metrics.inc("http_anonymous_idle_closed_total")
            self.shares.closed(handler)
            handler.force_close()

    def _head_deadline(self, handler: RequestHandler, transport: asyncio.Transport) -> None:
        if handler in self._heads or transport.is_closing():
            return
        self._metrics.inc("http_head_timeouts_total")
        transport.write(_raw_answer(408, "Request Timeout", "request_timeout",
                                    "the request head did not arrive in time"))
        transport.close()


class GuardedAppRunner(web.AppRunner):
    """``web.AppRunner`` whose server is a ``GuardedServer`` with ``limits``' handler
    arguments (keep-alive, head sizes); ``clock``: its monotonic time (the system's
    unless given). Start it with ``web.TCPSite`` as usual."""

    def __init__(self, app: web.Application, limits: LimitSettings, metrics: Metrics, *,
                 clock: Clock | None = None, **kwargs: Any) -> None:
        super().__init__(app, keepalive_timeout=limits.keepalive_timeout_s,
                         max_line_size=limits.max_line_bytes,
                         max_field_size=limits.max_field_bytes,
                         max_headers=limits.max_headers, lingering_time=LINGER_S, **kwargs)
        self._limits = limits
        self._metrics = metrics
        self._clock = clock or SystemClock()

    async def _make_server(self) -> web.Server:
        return GuardedServer(await super()._make_server(), self._limits, self._metrics,
                             self._clock)


@web.middleware
async def connection_share_middleware(request: web.Request,
                                      handler: Handler) -> web.StreamResponse:
    """After authentication: the request's connection now counts against its principal; a
    caller holding its share of the process's connections elsewhere gets ``429
    too_many_connections`` (and the connection is closed). Ops users are counted, never
    refused (the ops console must work during an incident). Outside a ``GuardedServer``
    (aiohttp's own test server): nothing."""
    principal = request.get(PRINCIPAL_KEY)
    protocol = request.protocol
    if principal is not None and isinstance(protocol, _Handler):
        owner = f"ops:{principal.name}" if principal.is_ops else principal.name
        if not protocol.guard.claim(protocol, owner, capped=not principal.is_ops):
            raise TooManyConnections(
                f"this caller holds {protocol.guard.shares.per_caller} connections to this "
                "API process, its share; send on those, or close some", 1)
    return await handler(request)
