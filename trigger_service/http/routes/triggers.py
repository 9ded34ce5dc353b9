"""``/v1/triggers``: register, get, cancel, list, pause, resume, run now, and a trigger's
attempts."""

from __future__ import annotations

from aiohttp import web

from trigger_service.app.cpu_shares import costly
from trigger_service.core.errors import InvalidRequest
from trigger_service.core.time.catchup import CatchUpPolicy, parse_policy
from trigger_service.core.time.jitter import jitter_offset_ms
from trigger_service.http import parsing, views
from trigger_service.http.auth import caller_of
from trigger_service.http.keys import ATTEMPTS_KEY, RUNTIME_KEY, SERVICE_KEY


async def register(request: web.Request) -> web.Response:
    runtime = request.app[RUNTIME_KEY]
    service = request.app[SERVICE_KEY]
    caller = caller_of(request)
    idem_key = parsing.parse_idempotency_key(request.headers.get("Idempotency-Key"))
    body = parsing.parse_json_body(await request.read())
    fields, debounce = body, None
    if isinstance(body, dict) and "debounce" in body:
        fields = {k: v for k, v in body.items() if k != "debounce"}
        debounce = parsing.parse_debounce(body["debounce"])
    req = await costly(parsing.parse_register, fields, caller=caller,
                       now_ms=runtime.clock.now_ms(),
                       payload_max_bytes=runtime.settings.api.payload_max_bytes)
    done = await service.register(caller, req, idem_key, parsing.request_hash(body),
                                  debounce=debounce)
    result, new = done.registered, done.new
    headers = {"Idempotent-Replayed": "true"} if result.replayed else {}
    answer = views.created_view(result)
    if debounce is not None:
        answer["debounced"] = result.debounced
    if "when" in body:  # parse_register accepted it: body is a dict
        # The first fire time is the stored trigger's (a replay's is the first request's),
        # as scheduled: what the phrase means, without the first occurrence's jitter.
        first_ms = result.fire_at_ms - jitter_offset_ms(f"{result.trigger_id}.1", new.jitter_s)
        answer["resolved"] = views.resolved_view(body, first_ms, new.schedule)
    return web.json_response(answer, status=200 if result.debounced else 201,
                             headers=headers)


async def get_trigger(request: web.Request) -> web.Response:
    t = await request.app[SERVICE_KEY].get(caller_of(request).name, request.match_info["id"])
    return web.json_response(views.trigger_view(t))


async def cancel_trigger(request: web.Request) -> web.Response:
    t = await request.app[SERVICE_KEY].cancel(caller_of(request).name, request.match_info["id"])
    return web.json_response(views.cancelled_view(t))


async def pause_trigger(request: web.Request) -> web.Response:
    t = await request.app[SERVICE_KEY].pause(caller_of(request).name, request.match_info["id"])
    return web.json_response(views.trigger_view(t))


async def resume_trigger(request: web.Request) -> web.Response:
    policy = resume_policy(await request.read())
    t = await request.app[SERVICE_KEY].resume(caller_of(request).name, request.match_info["id"],
                                              policy)
    return web.json_response(views.trigger_view(t))


async def run_trigger(request: web.Request) -> web.Response:
    trigger_id = request.match_info["id"]
    idem_key = parsing.parse_idempotency_key(request.headers.get("Idempotency-Key"))
    run_body(await request.read())
    run = await request.app[SERVICE_KEY].run(caller_of(request).name, trigger_id, idem_key,
                                             parsing.request_hash({"run": trigger_id}))
    headers = {"Idempotent-Replayed": "true"} if run.replayed else {}
    return web.json_response(views.run_view(run), status=202, headers=headers)


def run_body(raw: bytes) -> None:
    """A run's body: none, or ``{}``. Raises ``InvalidRequest``."""
    body = parsing.parse_optional_json_body(raw)
    if body is not parsing.NO_BODY and body != {}:
        raise InvalidRequest("body: none, or {} (a run takes no fields)")


def resume_policy(raw: bytes) -> CatchUpPolicy | None:
    """The policy of a resume body: none (an empty body or ``{}``: the series' own), or
    ``{"policy": "all" | "latest" | "none"}``. Raises ``InvalidRequest``."""
    body = parsing.parse_optional_json_body(raw)
    body = {} if body is parsing.NO_BODY else body
    if not isinstance(body, dict):
        raise InvalidRequest("body: must be a JSON object such as {\"policy\": \"latest\"}")
    extra = sorted(set(body) - {"policy"})
    if extra:
        raise InvalidRequest(f"{extra[0]}: unknown field", field=extra[0])
    return parse_policy(body["policy"]) if "policy" in body else None


async def list_triggers(request: web.Request) -> web.Response:
    query = dict(request.query)
    status, limit, cursor = parsing.parse_list_query(query)
    page = await request.app[SERVICE_KEY].list_triggers(
        caller_of(request).name, status=status, limit=limit, cursor=cursor,
        flt=parsing.parse_list_filter(query))
    return web.json_response(views.page_view(page))


async def list_attempts(request: web.Request) -> web.Response:
    limit, cursor = parsing.parse_attempts_query(dict(request.query))
    page = await request.app[ATTEMPTS_KEY].recent(
        caller_of(request).name, request.match_info["id"], limit, cursor)
    return web.json_response(views.attempts_view(page))


def add_routes(app: web.Application) -> None:
    app.router.add_post("/v1/triggers", register)
    app.router.add_get("/v1/triggers", list_triggers)
    app.router.add_get("/v1/triggers/{id}", get_trigger)
    app.router.add_delete("/v1/triggers/{id}", cancel_trigger)
    app.router.add_post("/v1/triggers/{id}/pause", pause_trigger)
    app.router.add_post("/v1/triggers/{id}/resume", resume_trigger)
    app.router.add_post("/v1/triggers/{id}/run", run_trigger)
    app.router.add_get("/v1/triggers/{id}/attempts", list_attempts)
