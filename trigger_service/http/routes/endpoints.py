"""Endpoint health (``app.endpoints``): ``/v1/endpoints`` for a caller's own endpoints,
``/v1/ops/endpoints`` for operators (viewers read)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from trigger_service.app.endpoints import Enabled, EndpointService
from trigger_service.core.endpoint_health import EndpointHealth, parse_origin
from trigger_service.core.errors import InvalidRequest, NotFound
from trigger_service.core.time.timing import format_rfc3339_ms, parse_rfc3339_ms
from trigger_service.http import parsing
from trigger_service.http.auth import caller_of, require_ops
from trigger_service.http.keys import JOBS_KEY, RUNTIME_KEY

ENDPOINTS_KEY = web.AppKey("endpoints", EndpointService)
ORIGIN_MAX_CHARS = 300  # as the document says


def _time(ms: int | None) -> str | None:
    return None if ms is None else format_rfc3339_ms(ms)


def health_view(h: EndpointHealth) -> dict[str, Any]:
    return {"caller": h.caller, "origin": h.origin, "state": h.state.value,
            "failingSince": format_rfc3339_ms(h.first_failure_at_ms),
            "lastFailureAt": format_rfc3339_ms(h.last_failure_at_ms),
            "failures": h.failures, "lastError": h.last_error,
            "disabledAt": _time(h.disabled_at_ms)}


def enabled_view(e: Enabled) -> dict[str, Any]:
    return {"caller": e.caller, "origin": e.origin, "state": "healthy",
            "previousState": e.cleared.state.value if e.cleared else None,
            "replay": {"triggerJobId": e.trigger_job.job_id if e.trigger_job else None,
                       "deadLetterJobId": (e.dead_letter_job.job_id
                                           if e.dead_letter_job else None)}}


def parse_enable(raw: bytes) -> tuple[str, int | None]:
    """``{"origin": "https://host[:port]", "replaySince"?: RFC 3339}``. Raises
    ``InvalidRequest``."""
    body = parsing.parse_optional_json_body(raw)
    if not isinstance(body, dict):
        raise InvalidRequest("body: must be a JSON object such as {\"origin\": "
                             "\"https://hooks.example.com\"}")
    extra = sorted(set(body) - {"origin", "replaySince"})
    if extra:
        raise InvalidRequest(f"{extra[0]}: unknown field", field=extra[0])
    raw_origin = body.get("origin")
    origin = (parse_origin(raw_origin)
              if isinstance(raw_origin, str) and len(raw_origin) <= ORIGIN_MAX_CHARS else None)
    if origin is None:
        raise InvalidRequest("origin: an origin such as https://hooks.example.com:8443",
                             field="origin")
    since = body.get("replaySince")
    if since is None:
        return origin, None
    try:
        if isinstance(since, str):
            return origin, parse_rfc3339_ms(since)
    except ValueError:
        pass
    raise InvalidRequest("replaySince: an RFC 3339 time with a zone", field="replaySince")


async def _enable(request: web.Request, caller: str, by: str) -> web.Response:
    origin, since_ms = parse_enable(await request.read())
    done = await request.app[ENDPOINTS_KEY].enable(caller, origin, since_ms, by)
    if done.dead_letter_job is not None:
        request.app[JOBS_KEY].kick(done.dead_letter_job.job_id)
    return web.json_response(enabled_view(done))


async def list_mine(request: web.Request) -> web.Response:
    rows = await request.app[ENDPOINTS_KEY].endpoints(caller_of(request).name)
    return web.json_response({"items": [health_view(h) for h in rows]})


async def enable_mine(request: web.Request) -> web.Response:
    caller = caller_of(request).name
    return await _enable(request, caller, f"caller:{caller}")


async def list_all(request: web.Request) -> web.Response:
    require_ops(request)
    rows = await request.app[ENDPOINTS_KEY].endpoints(None)
    return web.json_response({"items": [health_view(h) for h in rows]})


async def enable_for(request: web.Request) -> web.Response:
    who = require_ops(request, write=True)
    name = request.match_info["caller"]
    if request.app[RUNTIME_KEY].callers.by_name(name) is None:
        raise NotFound(f"no caller {name}")
    return await _enable(request, name, f"operator:{who.name}")


def add_routes(app: web.Application) -> None:
    app.router.add_get("/v1/endpoints", list_mine)
    app.router.add_post("/v1/endpoints/enable", enable_mine)
    app.router.add_get("/v1/ops/endpoints", list_all)
    app.router.add_post("/v1/ops/endpoints/{caller}/enable", enable_for)
