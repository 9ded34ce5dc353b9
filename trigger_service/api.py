"""The HTTP API (aiohttp). Every error is ``{"error": "<code>", "message": "..."}``."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from aiohttp import web

from trigger_service import validation
from trigger_service.callers import Caller, CallerRegistry
from trigger_service.errors import (
    AdapterError,
    ApiError,
    CacheError,
    QueueError,
    StoreError,
    Unauthorized,
)
from trigger_service.runtime import Runtime
from trigger_service.service import TriggerService, trigger_view

log = structlog.get_logger(__name__)

CALLER_KEY = web.RequestKey("caller", Caller)
SERVICE_KEY = web.AppKey("service", TriggerService)
RUNTIME_KEY = web.AppKey("runtime", Runtime)

_HTTP_CODES = {
    400: "invalid_request", 404: "not_found", 405: "method_not_allowed",
    413: "payload_too_large", 415: "unsupported_media_type",
}
# The body is read whole; far more than a 4 KiB payload needs, far less than harm.
MAX_BODY_BYTES = 64 * 1024

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def error_response(status: int, code: str, message: str, **extra: Any) -> web.Response:
    return web.json_response({"error": code, "message": message, **extra}, status=status)


@web.middleware
async def errors_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except ApiError as e:
        return web.json_response(e.to_json(), status=e.status)
    except AdapterError as e:
        name = {StoreError: "cassandra", QueueError: "sqs", CacheError: "redis"}.get(
            type(e), "a dependency")
        log.error("dependency_error", path=request.path, error=str(e))
        return error_response(503, "dependency_unavailable", f"{name} is unavailable: {e}")
    except web.HTTPException as e:
        if e.status < 400:
            raise
        code = _HTTP_CODES.get(e.status, "http_error")
        return error_response(e.status, code, e.reason or code)
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("unhandled_error", path=request.path)
        return error_response(500, "internal_error", "unexpected error; it has been logged")


def auth_middleware(callers: CallerRegistry) -> Callable[..., Awaitable[web.StreamResponse]]:
    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path.startswith("/v1/"):
            header = request.headers.get("Authorization", "")
            scheme, _, token = header.partition(" ")
            caller = callers.by_token(token.strip()) if scheme.lower() == "bearer" else None
            if caller is None:
                raise Unauthorized("missing or unknown bearer token")
            request[CALLER_KEY] = caller
        return await handler(request)

    return middleware


async def _read_json(request: web.Request) -> Any:
    raw = await request.read()
    return validation.parse_json_body(raw)


async def register(request: web.Request) -> web.Response:
    runtime = request.app[RUNTIME_KEY]
    caller = request[CALLER_KEY]
    s = runtime.settings
    idem_key = validation.parse_idempotency_key(request.headers.get("Idempotency-Key"))
    body = await _read_json(request)
    new = validation.parse_register(
        body, caller=caller, now_ms=runtime.clock.now_ms(),
        payload_max_bytes=s.api.payload_max_bytes,
        max_fire_ahead_days=s.api.max_fire_ahead_days,
    )
    result = await request.app[SERVICE_KEY].register(
        caller, new, idem_key, validation.request_hash(body))
    headers = {"Idempotent-Replayed": "true"} if result.replayed else {}
    return web.json_response(result.body, status=201, headers=headers)


async def get_trigger(request: web.Request) -> web.Response:
    t = await request.app[SERVICE_KEY].get(request[CALLER_KEY], request.match_info["id"])
    return web.json_response(trigger_view(t))


async def cancel_trigger(request: web.Request) -> web.Response:
    t = await request.app[SERVICE_KEY].cancel(request[CALLER_KEY], request.match_info["id"])
    return web.json_response({"triggerId": t.trigger_id, "status": t.status.value})


async def list_triggers(request: web.Request) -> web.Response:
    status, limit, cursor = validation.parse_list_query(dict(request.query))
    items, next_cursor = await request.app[SERVICE_KEY].list(
        request[CALLER_KEY], status=status, limit=limit, cursor=cursor)
    return web.json_response({
        "items": [trigger_view(t) for t in items],
        "nextCursor": validation.encode_cursor(next_cursor) if next_cursor else None,
    })


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    rt = request.app[RUNTIME_KEY]
    checks = {"cassandra": rt.store.ping(), "sqs": rt.queue.ping(), "redis": rt.cache.ping()}
    results = await asyncio.gather(
        *(asyncio.wait_for(c, timeout=3) for c in checks.values()), return_exceptions=True)
    down = [name for name, r in zip(checks, results, strict=True) if isinstance(r, BaseException)]
    if down:
        return error_response(503, "not_ready", f"unreachable: {', '.join(down)}", down=down)
    return web.json_response({"status": "ready"})


async def metrics(request: web.Request) -> web.Response:
    return web.Response(text=request.app[RUNTIME_KEY].metrics.prometheus_text(),
                        content_type="text/plain")


def build_app(runtime: Runtime, service: TriggerService) -> web.Application:
    """The aiohttp application; the caller owns ``runtime`` and ``service`` lifetimes."""
    app = web.Application(
        middlewares=[errors_middleware, auth_middleware(runtime.callers)],
        client_max_size=MAX_BODY_BYTES,
    )
    app[RUNTIME_KEY] = runtime
    app[SERVICE_KEY] = service
    app.router.add_post("/v1/triggers", register)
    app.router.add_get("/v1/triggers", list_triggers)
    app.router.add_get("/v1/triggers/{id}", get_trigger)
    app.router.add_delete("/v1/triggers/{id}", cancel_trigger)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    return app
