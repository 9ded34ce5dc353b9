"""``/v1/event-subscriptions``: a caller's subscriptions to its own events
(``app.subscriptions``): put (create or replace), list, delete, and the events given up on
for one. Every route is caller-scoped: another caller's name is an unknown one."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from trigger_service.app.subscriptions import SubscriptionService
from trigger_service.core.caller_events import (
    EVENT_TYPES,
    NAME_PATTERN,
    EventType,
    FailedEvent,
    Subscription,
    ms,
    parse_event_types,
)
from trigger_service.core.errors import InvalidRequest
from trigger_service.http import parsing
from trigger_service.http.auth import caller_of

SUBSCRIPTIONS_KEY = web.AppKey("subscriptions", SubscriptionService)
_FIELDS = frozenset({"url", "events"})
MAX_EVENTS = 32  # names in a body (there are six types; repeats are one)


def _name(request: web.Request) -> str:
    name = request.match_info["name"]
    if not NAME_PATTERN.fullmatch(name):
        raise InvalidRequest("name: 1 to 64 characters of letters, digits and _.-",
                             field="name")
    return name


def subscription_view(s: Subscription) -> dict[str, Any]:
    return {"name": s.name, "url": s.url, "events": sorted(e.value for e in s.events)}


def failure_view(f: FailedEvent) -> dict[str, Any]:
    return {"eventId": f.event_id, "type": f.type.value, "at": ms(f.at_ms),
            "failedAt": ms(f.failed_at_ms), "attempts": f.attempts, "lastError": f.last_error,
            "data": json.loads(f.data_json)}


def parse_events(body: dict[str, Any]) -> frozenset[EventType]:
    raw = body.get("events")
    if (not isinstance(raw, list) or not raw or len(raw) > MAX_EVENTS
            or not all(isinstance(e, str) for e in raw)):
        raise InvalidRequest(f"events: a non-empty list of event types ({', '.join(EVENT_TYPES)})",
                             field="events")
    types = parse_event_types(raw)
    if isinstance(types, str):
        raise InvalidRequest(f"events: unknown event type {types[:80]!r}; known: "
                             f"{', '.join(EVENT_TYPES)}", field="events")
    return types


async def put_subscription(request: web.Request) -> web.Response:
    caller = caller_of(request)
    name = _name(request)
    body = parsing.parse_json_body(await request.read())
    if not isinstance(body, dict):
        raise InvalidRequest("body: a JSON object {\"url\", \"events\"}")
    extra = sorted(set(body) - _FIELDS)
    if extra:
        raise InvalidRequest(f"{extra[0][:80]}: unknown field", field=extra[0][:80])
    events = parse_events(body)
    url = parsing.parse_caller_url(body, "url", caller)
    sub, created = await request.app[SUBSCRIPTIONS_KEY].put(caller, name, url, events)
    return web.json_response(subscription_view(sub), status=201 if created else 200)


async def list_subscriptions(request: web.Request) -> web.Response:
    subs = await request.app[SUBSCRIPTIONS_KEY].subscriptions(caller_of(request).name)
    return web.json_response({"items": [subscription_view(s) for s in subs]})


async def delete_subscription(request: web.Request) -> web.Response:
    name = _name(request)
    await request.app[SUBSCRIPTIONS_KEY].delete(caller_of(request).name, name)
    return web.json_response({"name": name, "deleted": True})


async def list_failures(request: web.Request) -> web.Response:
    name = _name(request)
    rows = await request.app[SUBSCRIPTIONS_KEY].failures(caller_of(request).name, name)
    return web.json_response({"items": [failure_view(f) for f in rows]})


def add_routes(app: web.Application, service: SubscriptionService) -> None:
    app[SUBSCRIPTIONS_KEY] = service
    app.router.add_get("/v1/event-subscriptions", list_subscriptions)
    app.router.add_put("/v1/event-subscriptions/{name}", put_subscription)
    app.router.add_delete("/v1/event-subscriptions/{name}", delete_subscription)
    app.router.add_get("/v1/event-subscriptions/{name}/failures", list_failures)
