"""``/v1/recipients``: a caller's recipient profiles: put (create or replace),
get, delete, list. Every route is caller-scoped: another caller's recipient of the same id is
a different person."""

from __future__ import annotations

from aiohttp import web

from trigger_service.core.errors import InvalidRequest, NotFound
from trigger_service.core.ports.recipient import MAX_RECIPIENT_LIST
from trigger_service.core.recipient_profiles import is_recipient_id, profile_view
from trigger_service.http import parsing
from trigger_service.http.auth import caller_of, require_ops
from trigger_service.http.keys import RECIPIENTS_KEY

_LIST_PARAMS = frozenset({"limit", "after"})


def _id(request: web.Request) -> str:
    recipient_id = request.match_info["id"]
    if not is_recipient_id(recipient_id):
        raise InvalidRequest("recipientId: 1 to 200 characters of letters, digits and _.:@+-",
                             field="recipientId")
    return recipient_id


async def put_recipient(request: web.Request) -> web.Response:
    caller = caller_of(request)
    body = parsing.parse_json_body(await request.read())
    profile, created = await request.app[RECIPIENTS_KEY].put(caller, _id(request), body)
    return web.json_response(profile_view(profile), status=201 if created else 200)


async def get_recipient(request: web.Request) -> web.Response:
    profile = await request.app[RECIPIENTS_KEY].get(caller_of(request).name, _id(request))
    return web.json_response(profile_view(profile))


async def delete_recipient(request: web.Request) -> web.Response:
    recipient_id = _id(request)
    failed = await request.app[RECIPIENTS_KEY].delete(caller_of(request).name, recipient_id)
    return web.json_response({"recipientId": recipient_id, "deleted": True,
                              "triggersFailed": failed})


async def list_recipients(request: web.Request) -> web.Response:
    query = dict(request.query)
    extra = sorted(set(query) - _LIST_PARAMS)
    if extra:
        raise InvalidRequest(f"{extra[0]}: unknown query parameter")
    limit = min(parsing.parse_limit(query, 50), MAX_RECIPIENT_LIST)
    after = query.get("after")
    if after is not None and not is_recipient_id(after):
        raise InvalidRequest("after: a recipient id (the last of the previous page)")
    items = await request.app[RECIPIENTS_KEY].list_profiles(caller_of(request).name,
                                                            after or "", limit)
    return web.json_response({
        "items": [profile_view(p) for p in items],
        "nextAfter": items[-1].recipient_id if len(items) == limit else None})


async def ops_recipients(request: web.Request) -> web.Response:
    """Operators and viewers (the ops console's panel): a caller's recipient count and,
    with ``id``, that recipient's profile (null if it has none)."""
    require_ops(request)
    query = dict(request.query)
    extra = sorted(set(query) - {"caller", "id"})
    if extra:
        raise InvalidRequest(f"{extra[0]}: unknown query parameter")
    caller = query.get("caller", "")
    if not caller or len(caller) > 200:
        raise InvalidRequest("caller: a caller's name", field="caller")
    recipient_id = query.get("id") or None
    if recipient_id is not None and not is_recipient_id(recipient_id):
        raise InvalidRequest("id: a recipient id", field="id")
    service = request.app[RECIPIENTS_KEY]
    found = None
    if recipient_id is not None:
        try:
            found = profile_view(await service.get(caller, recipient_id))
        except NotFound:
            found = None  # shown as "no such recipient"
    return web.json_response({"caller": caller, "count": await service.count(caller),
                              "recipient": found})


def add_routes(app: web.Application) -> None:
    app.router.add_get("/v1/ops/recipients", ops_recipients)
    app.router.add_put("/v1/recipients/{id}", put_recipient)
    app.router.add_get("/v1/recipients/{id}", get_recipient)
    app.router.add_delete("/v1/recipients/{id}", delete_recipient)
    app.router.add_get("/v1/recipients", list_recipients)
