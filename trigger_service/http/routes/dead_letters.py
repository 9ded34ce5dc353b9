"""``/v1/dead-letters``: list, detail, replay, purge, bulk replay and its progress.

A caller sees its own dead letters; operators every caller's (viewers read only)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from trigger_service.core.errors import InvalidRequest
from trigger_service.core.time.timing import format_rfc3339_ms, parse_rfc3339_ms
from trigger_service.http import dead_letter_views as views
from trigger_service.http.auth import scope_of
from trigger_service.http.keys import JOBS_KEY, LETTERS_KEY, RUNTIME_KEY
from trigger_service.http.parsing import NO_BODY, parse_optional_json_body


async def list_letters(request: web.Request) -> web.Response:
    filters, cursor, limit = views.parse_list_query(dict(request.query),
                                                    scope=scope_of(request))
    letters = request.app[LETTERS_KEY]
    page = await letters.list_letters(letters.query(filters), cursor, limit)
    return web.json_response({
        "items": [views.letter_view(d) for d in page.items],
        "nextCursor": views.encode_cursor(page.next_cursor) if page.next_cursor else None})


async def get_letter(request: web.Request) -> web.Response:
    d, t, attempts = await request.app[LETTERS_KEY].detail(
        scope_of(request), request.match_info["id"])
    return web.json_response(views.detail_view(d, t, attempts))


async def _optional_body(request: web.Request) -> dict[str, Any]:
    body = parse_optional_json_body(await request.read())
    if body is NO_BODY:
        return {}
    if not isinstance(body, dict):
        raise InvalidRequest("body: a JSON object")
    return body


async def replay_letter(request: web.Request) -> web.Response:
    scope = scope_of(request, write=True)
    body = await _optional_body(request)
    extra = sorted(set(body) - {"fireAt"})
    if extra:
        raise InvalidRequest(f"{extra[0]}: unknown field")
    fire_at_ms = None
    if body.get("fireAt") is not None:
        if not isinstance(body["fireAt"], str):
            raise InvalidRequest("fireAt: an RFC 3339 time with an offset")
        try:
            fire_at_ms = parse_rfc3339_ms(body["fireAt"])
        except (ValueError, OverflowError) as e:
            raise InvalidRequest("fireAt: an RFC 3339 time with an offset") from e
        runtime = request.app[RUNTIME_KEY]
        ahead_ms = runtime.settings.api.max_fire_ahead_days * 86_400_000
        if fire_at_ms > runtime.clock.now_ms() + ahead_ms:
            raise InvalidRequest("fireAt: too far ahead")
    t = await request.app[LETTERS_KEY].replay(scope, request.match_info["id"], fire_at_ms)
    return web.json_response({"id": request.match_info["id"], "triggerId": t.trigger_id,
                              "status": t.status.value,
                              "fireAt": format_rfc3339_ms(t.fire_at_ms)}, status=202)


async def purge_letter(request: web.Request) -> web.Response:
    d = await request.app[LETTERS_KEY].purge(scope_of(request, write=True),
                                             request.match_info["id"])
    return web.json_response({"id": d.id, "purged": True})


async def start_bulk(request: web.Request) -> web.Response:
    scope = scope_of(request, write=True)
    body = await _optional_body(request)
    extra = sorted(set(body) - set(views.FILTERS))
    if extra:
        raise InvalidRequest(f"{extra[0]}: unknown field")
    letters = request.app[LETTERS_KEY]
    job = await letters.start_bulk(letters.query(views.parse_filters(body, scope=scope)))
    request.app[JOBS_KEY].kick(job.job_id)
    return web.json_response(views.job_view(job), status=202)


async def get_job(request: web.Request) -> web.Response:
    job = await request.app[LETTERS_KEY].job(scope_of(request), request.match_info["job"])
    return web.json_response(views.job_view(job))


def add_routes(app: web.Application) -> None:
    app.router.add_get("/v1/dead-letters", list_letters)
    app.router.add_post("/v1/dead-letters/replay", start_bulk)
    app.router.add_get("/v1/dead-letters/replay/{job}", get_job)
    app.router.add_get("/v1/dead-letters/{id}", get_letter)
    app.router.add_post("/v1/dead-letters/{id}/replay", replay_letter)
    app.router.add_delete("/v1/dead-letters/{id}", purge_letter)
