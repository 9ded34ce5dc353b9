"""Reminders: ``POST /v1/triggers/preview``, ``PATCH /v1/triggers/{id}`` (JSON merge patch)
and ``POST /v1/triggers/{id}/snooze``."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from trigger_service.app.cpu_shares import costly
from trigger_service.app.schedules import first_fire, preview
from trigger_service.core.errors import InvalidRequest
from trigger_service.core.model import Priority, Trigger, keyed_trigger_id
from trigger_service.core.notify.plan import PREFERRED, parse_plan, plan_to_json
from trigger_service.core.recipient_profiles import RECIPIENT_ZONE
from trigger_service.core.time.recurrence import RuleKind
from trigger_service.core.time.timing import format_rfc3339_ms, parse_rfc3339_ms
from trigger_service.http import parsing, views
from trigger_service.http.auth import caller_of
from trigger_service.http.keys import RUNTIME_KEY, SERVICE_KEY
from trigger_service.http.time_fields import INSTANT_FIELDS, TIME_FIELDS, parse_time_fields

MAX_PREVIEW = 1000
_PATCH_TYPES = ("application/json", "application/merge-patch+json")
_SNOOZE_FIELDS = frozenset({*INSTANT_FIELDS, "timeZone", "dstPolicy", "when"})
# What a snooze does not take from the original: its time (a snooze is exact: no jitter),
# and its expiresAt (a snooze is a new time; its maxLatenessSeconds, relative, is kept).
_NOT_KEPT = frozenset({*TIME_FIELDS, "jitterSeconds", "expiresAt"})


async def preview_occurrences(request: web.Request) -> web.Response:
    runtime = request.app[RUNTIME_KEY]
    api = runtime.settings.api
    body = parsing.parse_json_body(await request.read())
    if not isinstance(body, dict):
        raise InvalidRequest("body: must be a JSON object")
    body = dict(body)
    count = body.pop("count", 10)
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_PREVIEW:
        raise InvalidRequest(f"count: an integer from 1 to {MAX_PREVIEW}")
    after = body.pop("after", None)
    after_ms = None
    if after is not None:
        try:
            after_ms = parse_rfc3339_ms(after) if isinstance(after, str) else None
        except ValueError:
            after_ms = None
        if after_ms is None:
            raise InvalidRequest("after: must be an RFC 3339 instant with an offset or Z")
    extra = sorted(set(body) - parsing.ALLOWED_FIELDS)
    if extra:
        raise InvalidRequest(f"{extra[0]}: unknown field")
    parsing.check_unplanned_fields(body, api.payload_max_bytes)
    if body.get("callbackUrl") is not None:
        await request.app[SERVICE_KEY].vet_callback(caller_of(request), parsing.parse_callback(
            body, caller_of(request)))
    # Channels create would refuse are refused here too (the same 400, 422 or 429).
    await request.app[SERVICE_KEY].vet_channels(caller_of(request), parse_plan(body))
    now_ms = runtime.clock.now_ms()
    keyed_id = _keyed_id(request)  # a bad key is refused as create refuses it, used or not
    req = await costly(parse_time_fields, body, now_ms)
    jitter_s = parsing.parse_jitter(body.get("jitterSeconds"))
    if jitter_s > api.max_jitter_s:
        raise InvalidRequest(f"jitterSeconds: 0 to {api.max_jitter_s} (TRIGGER_API_MAX_JITTER_S)",
                             field="jitterSeconds")
    instants = await costly(
        preview, req, count=count, after_ms=after_ms, now_ms=now_ms,
        horizon_days=api.max_fire_ahead_days, min_interval_s=api.min_recurrence_interval_s)
    answer: dict[str, Any] = {"occurrences": [format_rfc3339_ms(t) for t in instants]}
    if "when" in body or jitter_s:  # what create would make of it (its checks too)
        first = await costly(
            first_fire, req, now_ms=now_ms, horizon_days=api.max_fire_ahead_days,
            min_interval_s=api.min_recurrence_interval_s)
        if "when" in body:
            answer["resolved"] = views.resolved_view(body, first.fire_at_ms, first.schedule)
        if jitter_s:
            answer["jittered"] = views.jittered_view(
                instants, jitter_s, keyed_id, None if after_ms is not None
                else first.fire_at_ms)
    return web.json_response(answer)


def _keyed_id(request: web.Request) -> str | None:
    """The id create would give with the request's Idempotency-Key (None without one): a
    preview can then show each occurrence's exact jittered instant."""
    key = parsing.parse_idempotency_key(request.headers.get("Idempotency-Key"))
    return keyed_trigger_id(caller_of(request).name, key) if key is not None else None


def request_body_of(t: Trigger) -> dict[str, Any]:
    """The create body that describes ``t`` as it is now (what a merge patch applies to)."""
    body: dict[str, Any] = {"payload": json.loads(t.payload_json)}
    if t.callback_url:
        body["callbackUrl"] = t.callback_url
    if t.plan is not None:
        plan = json.loads(plan_to_json(t.plan))
        plan.pop("addressless", None)  # implied by the recipient
        preferred = plan.pop(PREFERRED, False)
        body |= {k: v for k, v in plan.items() if v is not None}
        if preferred:  # its one channel carries the message: the request's shape again
            first = body["channels"][0]
            body |= {"channels": PREFERRED,
                     "message": {"title": first["title"], "text": first["body"]}}
    if t.recipient is not None:
        body["recipient"] = t.recipient
    if t.jitter_s:
        body["jitterSeconds"] = t.jitter_s
    if t.tags:
        body["tags"] = list(t.tags)
    if t.labels:
        body["labels"] = dict(t.labels)
    if t.expires_at_ms is not None:
        body["expiresAt"] = format_rfc3339_ms(t.expires_at_ms)
    if t.max_lateness_s is not None:
        body["maxLatenessSeconds"] = t.max_lateness_s
    if t.flow_control is not None:
        body["flowControl"] = {k: v for k, v in t.flow_control.to_json().items()
                               if v is not None}
    if t.priority is not Priority.NORMAL:  # normal is the default: left out as it is stored
        body["priority"] = t.priority.value
    rec = t.schedule
    if rec is None:  # the scheduled instant: the jitter is added again (the same offset)
        return body | {"fireAt": format_rfc3339_ms(t.scheduled_at_ms)}
    body |= {"localTime": rec.dtstart.isoformat(),
             "timeZone": RECIPIENT_ZONE if t.recipient_zone else rec.time_zone,
             "dstPolicy": rec.dst.to_json()}
    if rec.kind is not RuleKind.ONCE:
        body |= {rec.kind.value: rec.rule, "exdates": [d.isoformat() for d in rec.exdates],
                 "catchUp": rec.catch_up.to_json()}
    return body


def merge_patch(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """RFC 7396 at the top level (null removes a field). A time field in the patch replaces
    the base's other way of giving the time, and rrule and cron replace each other."""
    out = dict(base)
    if any(f in patch for f in INSTANT_FIELDS):
        for f in INSTANT_FIELDS:
            out.pop(f, None)
    if "rrule" in patch or "cron" in patch:
        out.pop("rrule", None)
        out.pop("cron", None)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    if "catchUp" not in patch and "rrule" not in out and "cron" not in out:
        out.pop("catchUp", None)  # a series made one-time: its policy goes with its rule
    return out


async def patch_trigger(request: web.Request) -> web.Response:
    if request.content_type not in _PATCH_TYPES:
        raise web.HTTPUnsupportedMediaType(
            reason="PATCH takes application/merge-patch+json or application/json")
    runtime = request.app[RUNTIME_KEY]
    service = request.app[SERVICE_KEY]
    caller = caller_of(request)
    patch = parsing.parse_json_body(await request.read())
    if not isinstance(patch, dict):
        raise InvalidRequest("body: must be a JSON object (a JSON merge patch)")
    extra = sorted(set(patch) - parsing.ALLOWED_FIELDS)
    if extra:
        raise InvalidRequest(f"{extra[0]}: unknown field")
    current = await service.get(caller.name, request.match_info["id"])
    req = await costly(
        parsing.parse_register, merge_patch(_retimable_body(current, patch), patch),
        caller=caller, now_ms=runtime.clock.now_ms(),
        payload_max_bytes=runtime.settings.api.payload_max_bytes)
    new = await service.accept(caller, req)
    edited = await service.edit(current, new, retime=bool(set(patch) & TIME_FIELDS))
    return web.json_response(views.trigger_view(edited))


def _retimable_body(t: Trigger, patch: dict[str, Any]) -> dict[str, Any]:
    """What a patch applies to: ``t``'s body, without its time fields when the patch gives
    ``when`` (the phrase replaces them all; it is read in ``t``'s zone unless the patch
    gives ``timeZone``, and under the patch's ``dstPolicy`` alone)."""
    body = request_body_of(t)
    if "when" not in patch:
        return body
    return {k: v for k, v in body.items() if k not in TIME_FIELDS or k == "timeZone"}


def _snooze_time(original: Trigger, body: dict[str, Any]) -> dict[str, Any]:
    """A snooze's time fields: a ``when`` phrase is read in ``original``'s zone unless the
    body gives ``timeZone``."""
    if "when" in body and "timeZone" not in body and original.schedule is not None:
        return {**body, "timeZone": original.schedule.time_zone}
    return body


async def snooze(request: web.Request) -> web.Response:
    runtime = request.app[RUNTIME_KEY]
    service = request.app[SERVICE_KEY]
    caller = caller_of(request)
    idem_key = parsing.parse_idempotency_key(request.headers.get("Idempotency-Key"))
    body = parsing.parse_json_body(await request.read())
    if not isinstance(body, dict):
        raise InvalidRequest("body: must be a JSON object")
    extra = sorted(set(body) - _SNOOZE_FIELDS)
    if extra:
        raise InvalidRequest(f"{extra[0]}: not allowed when snoozing (a snooze is one time)")
    original = await service.get(caller.name, request.match_info["id"])
    kept = {k: v for k, v in request_body_of(original).items() if k not in _NOT_KEPT}
    req = await costly(
        parsing.parse_register, {**kept, **_snooze_time(original, body)}, caller=caller,
        now_ms=runtime.clock.now_ms(), payload_max_bytes=runtime.settings.api.payload_max_bytes)
    if req.time.rule_kind is not None:
        raise InvalidRequest(f"when: {body.get('when')!r} is recurring; a snooze is one time "
                             "('in 10 minutes', 'tomorrow at 9am')", field="when")
    done = await service.register(
        caller, req, idem_key, parsing.request_hash({"snooze": original.trigger_id, **body}),
        snoozes=original)
    result = done.registered
    headers = {"Idempotent-Replayed": "true"} if result.replayed else {}
    return web.json_response(views.created_view(result) | {"snoozedFrom": original.trigger_id},
                             status=201, headers=headers)


def add_routes(app: web.Application) -> None:
    app.router.add_post("/v1/triggers/preview", preview_occurrences)
    app.router.add_patch("/v1/triggers/{id}", patch_trigger)
    app.router.add_post("/v1/triggers/{id}/snooze", snooze)
