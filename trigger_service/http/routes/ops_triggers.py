"""Operators on one trigger of any caller (the ops console's Trigger panel):
``GET /v1/ops/triggers/{id}`` and ``GET /v1/ops/triggers/{id}/attempts`` (operators and
viewers), ``POST /v1/ops/triggers/{id}/run`` (operators). Each is the caller's own use case
(the same answers as ``GET /v1/triggers/{id}``, ``.../attempts``, ``.../run``) run for the
caller whose trigger it is (the GET names that ``caller``)."""

from __future__ import annotations

from aiohttp import web

from trigger_service.http import parsing, views
from trigger_service.http.auth import require_ops
from trigger_service.http.keys import ATTEMPTS_KEY, SERVICE_KEY
from trigger_service.http.routes.triggers import run_body


async def get_trigger(request: web.Request) -> web.Response:
    require_ops(request)
    service = request.app[SERVICE_KEY]
    trigger_id = request.match_info["id"]
    owner = await service.owner_of(trigger_id)
    t = await service.get(owner, trigger_id)
    return web.json_response({"caller": owner, "trigger": views.trigger_view(t)})


async def list_attempts(request: web.Request) -> web.Response:
    require_ops(request)
    limit, cursor = parsing.parse_attempts_query(dict(request.query))
    trigger_id = request.match_info["id"]
    owner = await request.app[SERVICE_KEY].owner_of(trigger_id)
    page = await request.app[ATTEMPTS_KEY].recent(owner, trigger_id, limit, cursor)
    return web.json_response(views.attempts_view(page))


async def run_trigger(request: web.Request) -> web.Response:
    require_ops(request, write=True)
    service = request.app[SERVICE_KEY]
    trigger_id = request.match_info["id"]
    idem_key = parsing.parse_idempotency_key(request.headers.get("Idempotency-Key"))
    run_body(await request.read())
    owner = await service.owner_of(trigger_id)
    run = await service.run(owner, trigger_id, idem_key, parsing.request_hash({"run": trigger_id}))
    headers = {"Idempotent-Replayed": "true"} if run.replayed else {}
    return web.json_response(views.run_view(run), status=202, headers=headers)


def add_routes(app: web.Application) -> None:
    app.router.add_get("/v1/ops/triggers/{id}", get_trigger)
    app.router.add_get("/v1/ops/triggers/{id}/attempts", list_attempts)
    app.router.add_post("/v1/ops/triggers/{id}/run", run_trigger)
