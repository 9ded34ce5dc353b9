"""The aiohttp application and its middleware. Every error is
``{"error": "<code>", "message": "..."}`` with the status of its ``ApiError``."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Protocol

import structlog
from aiohttp import web
from aiohttp.typedefs import Handler
from opentelemetry.trace import StatusCode

from trigger_service.app.attempts import AttemptHistory
from trigger_service.app.audit import AuditTrail
from trigger_service.app.caller_pause import CallerPauseService
from trigger_service.app.cpu_shares import CpuShares
from trigger_service.app.dead_letters import DeadLetterService
from trigger_service.app.endpoints import EndpointService
from trigger_service.app.recipient_profiles import RecipientService
from trigger_service.app.replay_jobs import ReplayJobRunner
from trigger_service.app.subscriptions import SubscriptionService
from trigger_service.app.trigger_jobs import TriggerJobRunner
from trigger_service.app.triggers import TriggerService
from trigger_service.core.errors import AdapterError, ApiError, DependencyUnavailable
from trigger_service.http.audit import audit_middleware
from trigger_service.http.auth import auth_middleware
from trigger_service.http.guards import (
    body_deadline_middleware,
    cpu_share_middleware,
    json_body_middleware,
    rate_limit_middleware,
    refusal_wait_middleware,
    request_id_middleware,
    request_id_of,
)
from trigger_service.http.keys import (
    ATTEMPTS_KEY,
    JOBS_KEY,
    LETTERS_KEY,
    RECIPIENTS_KEY,
    RUNTIME_KEY,
    SERVICE_KEY,
    TRIGGER_JOBS_KEY,
)
from trigger_service.http.routes import (
    acks,
    audit,
    batch,
    dead_letters,
    docs,
    endpoints,
    health,
    inbox,
    ops,
    ops_callers,
    ops_flow,
    ops_page,
    ops_triggers,
    recipients,
    schedules,
    signing,
    stats,
    subscriptions,
    trigger_jobs,
    triggers,
)
from trigger_service.http.server import connection_share_middleware
from trigger_service.platform.caller_events import (
    AnnouncedOpsEvents,
    CallerEvents,
    SubscriptionBook,
)
from trigger_service.platform.wiring import Runtime

log = structlog.get_logger(__name__)

# aiohttp's own errors (unknown route, wrong method, body too big) in our shape.
_HTTP_CODES = {
    400: "invalid_request", 404: "not_found", 405: "method_not_allowed",
    413: "payload_too_large", 415: "unsupported_media_type",
}
# The body is read whole; far more than a 4 KiB payload needs, far less than harm.
MAX_BODY_BYTES = 64 * 1024


def error_response(status: int, code: str, message: str) -> web.Response:
    return web.json_response({"error": code, "message": message}, status=status)


@web.middleware
async def errors_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except ApiError as e:
        return web.json_response(e.to_json(), status=e.status, headers=e.headers())
    except AdapterError as e:
        # The driver's text (nodes, addresses) goes to the log only; the body has the id.
        log.error("dependency_error", path=request.path, dependency=e.dependency, error=str(e))
        err = DependencyUnavailable.for_request(request_id_of(request))
        return web.json_response(err.to_json(), status=err.status)
    except web.HTTPException as e:
        if e.status < 400:
            raise
        code = _HTTP_CODES.get(e.status, "http_error")
        response = error_response(e.status, code, e.reason or code)
        if "Allow" in e.headers:  # a 405 must say which methods are allowed
            response.headers["Allow"] = e.headers["Allow"]
        return response
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("unhandled_error", path=request.path)
        return error_response(500, "internal_error", "unexpected error; it has been logged "
                              f"(request id {request_id_of(request)})")


def timing_middleware(runtime: Runtime) -> Callable[..., Awaitable[web.StreamResponse]]:
    """``http_request_duration_seconds`` by route pattern (never the raw path: ids would
    make a series each), method and status; outermost, so it sees the final status."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        started = time.perf_counter()
        status = 500
        try:
            response = await handler(request)
            status = response.status
            return response
        except web.HTTPException as e:
            status = e.status
            raise
        finally:
            resource = request.match_info.route.resource
            route = resource.canonical if resource is not None else "unmatched"
            runtime.metrics.observe("http_request_duration_seconds",
                                    time.perf_counter() - started, route=route,
                                    method=request.method, status=str(status))

    return middleware


def tracing_middleware(runtime: Runtime) -> Callable[..., Awaitable[web.StreamResponse]]:
    """A server span per request, named by route pattern, a child of the request's W3C
    ``traceparent`` (with export off, that context is current: ``core.trace_context``);
    outside the error middleware, so it records the final status."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        resource = request.match_info.route.resource
        route = resource.canonical if resource is not None else "unmatched"
        with runtime.tracing.serve(f"{request.method} {route}", request.headers, {
                "http.request.method": request.method, "http.route": route}) as span:
            response = await handler(request)
            span.set_attribute("http.response.status_code", response.status)
            if response.status >= 500:
                span.set_status(StatusCode.ERROR)
            return response

    return middleware


class _Routes(Protocol):
    def add_routes(self, app: web.Application) -> None: ...


# Every route module, in the order their routes are added: batch's before triggers' (the
# pattern /v1/triggers/{id} would match "batch").
ROUTES: tuple[_Routes, ...] = (
    recipients, endpoints, dead_letters, acks, inbox, schedules, signing, batch,
    trigger_jobs, triggers, stats, ops, ops_callers, ops_triggers, audit, ops_flow, health,
    ops_page, docs)


def build_app(runtime: Runtime, service: TriggerService) -> web.Application:
    """The aiohttp application; the caller owns ``runtime`` and ``service`` lifetimes."""
    # Who did what: recorded after each answer is decided (http.audit), refusals included.
    trail = AuditTrail(runtime.settings.audit, runtime.store, runtime.clock, runtime.metrics)
    app = web.Application(
        middlewares=[timing_middleware(runtime), tracing_middleware(runtime),
                     request_id_middleware, errors_middleware, auth_middleware(runtime.callers),
                     connection_share_middleware,
                     refusal_wait_middleware(runtime.settings.limits.refusal_wait_s),
                     rate_limit_middleware(runtime.limiter, runtime.metrics),
                     # Inside the rate limit: a caller's flood of refused requests costs
                     # the audit log nothing, so it cannot crowd out another's entries.
                     audit_middleware(trail),
                     cpu_share_middleware(CpuShares(runtime.settings.limits.caller_cpu_ms_per_s,
                                                    runtime.settings.limits.caller_cpu_burst_ms)),
                     body_deadline_middleware(
                         runtime.settings.limits.body_timeout_s, MAX_BODY_BYTES,
                         {batch.BATCH_PATH: batch.BATCH_MAX_BODY_BYTES}),
                     json_body_middleware],
        # The largest route's (the batch create's); each route's own: body_deadline_middleware.
        client_max_size=max(MAX_BODY_BYTES, batch.BATCH_MAX_BODY_BYTES),
    )
    app[RUNTIME_KEY] = runtime
    app[SERVICE_KEY] = service
    app[audit.AUDIT_KEY] = trail
    letters = DeadLetterService(runtime.settings, runtime.store, service, runtime.clock,
                                runtime.metrics)
    app[LETTERS_KEY] = letters
    app[ATTEMPTS_KEY] = AttemptHistory(runtime.settings, runtime.store, service)
    # Bulk replays: kicked by the POST; the API process also runs its loop (resumption).
    app[JOBS_KEY] = ReplayJobRunner(runtime.settings, letters, runtime.store, runtime.clock)
    # Jobs over triggers by filter (cancel, pause, resume): the same way.
    app[TRIGGER_JOBS_KEY] = TriggerJobRunner(runtime.settings, service, runtime.store,
                                             runtime.clock)
    if service.recipients is None:  # the profiles its triggers may name: the runtime's
        service.recipients = runtime.recipients
    app[RECIPIENTS_KEY] = RecipientService(runtime.settings, runtime.recipients, runtime.store,
                                           runtime.queue, runtime.clock, runtime.metrics)
    # Operators pause a caller; its resume is a job over its paused triggers.
    app[ops_callers.PAUSES_KEY] = CallerPauseService(runtime.store, service,
                                                     app[TRIGGER_JOBS_KEY], runtime.clock)
    app[endpoints.ENDPOINTS_KEY] = EndpointService(
        runtime.settings.endpoint_health, runtime.endpoint_health, _announced(runtime),
        runtime.store, app[TRIGGER_JOBS_KEY], letters, runtime.clock)
    for routes in ROUTES:
        routes.add_routes(app)
    # Event subscriptions: their use case is built here (the runtime's store and resolver).
    subscriptions.add_routes(app, SubscriptionService(
        runtime.settings.events, runtime.subscriptions, runtime.resolver, runtime.clock))
    return app


def _announced(runtime: Runtime) -> AnnouncedOpsEvents:
    """The operators' events, each also emitted to its caller's subscriptions (an enable's
    ``endpoint.enabled``)."""
    ev = runtime.settings.events
    return AnnouncedOpsEvents(runtime.ops_events, CallerEvents(
        SubscriptionBook(runtime.subscriptions, runtime.clock, ev.cache_s),
        runtime.event_queue, runtime.metrics, max_pending=ev.max_pending))
