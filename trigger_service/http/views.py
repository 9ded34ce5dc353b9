"""Response shapes: how the API shows domain values as JSON."""

from __future__ import annotations

import json
from typing import Any

from trigger_service.app.idempotency import Registered
from trigger_service.app.running import Run
from trigger_service.core.dead_letters import Attempt
from trigger_service.core.model import Status, Trigger
from trigger_service.core.notify.plan import initial_states
from trigger_service.core.ports.values import ListPage
from trigger_service.core.recent_attempts import AttemptPage
from trigger_service.core.recent_attempts import encode_cursor as encode_attempts_cursor
from trigger_service.core.recipient_profiles import RECIPIENT_ZONE
from trigger_service.core.time.jitter import jitter_offset_ms
from trigger_service.core.time.recurrence import Recurrence, RuleKind
from trigger_service.core.time.timing import format_rfc3339_ms
from trigger_service.http.parsing import encode_cursor


def trigger_view(t: Trigger) -> dict[str, Any]:
    """The public JSON shape of a trigger."""
    return {
        "triggerId": t.trigger_id,
        "status": t.status.value,
        "fireAt": format_rfc3339_ms(t.fire_at_ms),
        **jitter_view(t),
        "createdAt": format_rfc3339_ms(t.created_at_ms),
        "attempts": t.attempts,
        "lastError": t.last_error,
        "firedAt": format_rfc3339_ms(t.fired_at_ms) if t.fired_at_ms is not None else None,
        "callbackUrl": t.callback_url,
        "payload": json.loads(t.payload_json),
        "recipient": t.recipient,
        **schedule_view(t),
        **channels_view(t),
        "tags": list(t.tags),
        "labels": dict(t.labels),
        **deadlines_view(t),
        "flowControl": t.flow_control.to_json() if t.flow_control else None,
        "priority": t.priority.value,
    }


def deadlines_view(t: Trigger) -> dict[str, Any]:
    """``expiresAt`` and ``maxLatenessSeconds`` (null: no such bound; ``core.deadlines``)."""
    return {"expiresAt": None if t.expires_at_ms is None else format_rfc3339_ms(t.expires_at_ms),
            "maxLatenessSeconds": t.max_lateness_s}


def jitter_view(t: Trigger) -> dict[str, Any]:
    """``jitterSeconds`` and the instant the occurrence ``fireAt`` is was scheduled for
    (``fireAt`` is that plus the occurrence's jitter)."""
    return {"jitterSeconds": t.jitter_s, "scheduledAt": format_rfc3339_ms(t.scheduled_at_ms)}


def jittered_view(scheduled_ms: list[int], jitter_s: int, trigger_id: str | None,
                  first_fire_ms: int | None) -> list[dict[str, Any]]:
    """A preview's occurrences with their jitter: each one's window (``scheduledAt`` to
    ``latestAt``) and, when the trigger's id is known (``trigger_id``) and the occurrences
    are numbered from the first one it fires (``first_fire_ms``), the exact ``fireAt``."""
    out: list[dict[str, Any]] = []
    seq = 0
    for at_ms in scheduled_ms:
        fire: str | None = None
        if trigger_id is not None and first_fire_ms is not None and at_ms >= first_fire_ms:
            seq += 1
            fire = format_rfc3339_ms(at_ms + jitter_offset_ms(f"{trigger_id}.{seq}", jitter_s))
        out.append({"scheduledAt": format_rfc3339_ms(at_ms), "fireAt": fire,
                    "latestAt": format_rfc3339_ms(at_ms + jitter_s * 1000)})
    return out


def channels_view(t: Trigger) -> dict[str, Any]:
    """Each channel's state for the current occurrence (null without channels)."""
    if t.plan is None:
        return {"channels": None, "acknowledged": None}
    states = t.channel_states or initial_states(t.plan, t.fire_at_ms,
                                                has_callback=bool(t.callback_url))
    return {"channels": [{
        "type": s.type, "status": s.status.value, "attempts": s.attempts,
        "lastError": s.last_error, "providerCode": s.provider_code,
        "providerMessageId": s.provider_message_id,
        "deliveredAt": format_rfc3339_ms(s.delivered_at_ms) if s.delivered_at_ms else None,
        "dueAt": None if s.status.done else format_rfc3339_ms(s.due_at_ms),
    } for s in states], "acknowledged": t.acked or (  # a finished one counted its occurrence
        t.status.terminal and t.acked_seq is not None and t.acked_seq == t.occurrence_seq - 1)}


def schedule_view(t: Trigger) -> dict[str, Any]:
    """The wall-clock and recurrence fields (null for a plain one-time trigger)."""
    rec = t.schedule
    kind = rec.kind if rec else None
    return {
        "timeZone": (RECIPIENT_ZONE if t.recipient_zone else rec.time_zone) if rec else None,
        # The zone the current occurrence was resolved in (a floating one: the recipient's).
        "resolvedTimeZone": rec.time_zone if rec else None,
        "localTime": rec.dtstart.isoformat() if kind is RuleKind.ONCE and rec else None,
        "rrule": rec.rule if kind is RuleKind.RRULE and rec else None,
        "cron": rec.rule if kind is RuleKind.CRON and rec else None,
        "dstPolicy": rec.dst.to_json() if rec else None,
        "exdates": [d.isoformat() for d in rec.exdates] if rec and rec.recurring else None,
        "catchUp": rec.catch_up.to_json() if rec and rec.recurring else None,
        "nextFireAt": None if t.status.terminal else format_rfc3339_ms(t.fire_at_ms),
        "occurrencesFired": t.occurrences_fired,
        "snoozedFrom": t.snoozed_from,
    }


def created_view(r: Registered) -> dict[str, Any]:
    """The 201 body of a registration (a replay shows the first request's trigger)."""
    return {**created_fields(r), "status": Status.PENDING.value}


def created_fields(r: Registered) -> dict[str, Any]:
    """A registration's trigger id and first fire time (also a batch item's answer)."""
    at = format_rfc3339_ms(r.fire_at_ms)
    return {"triggerId": r.trigger_id, "fireAt": at, "nextFireAt": at}


def resolved_view(body: dict[str, Any], fire_at_ms: int,
                  schedule: Recurrence | None) -> dict[str, Any]:
    """What a ``when`` phrase was read as: its first fire time, its rule, the zone."""
    rule = schedule.rule if schedule is not None and schedule.kind is RuleKind.RRULE else None
    time_zone = body.get("timeZone")
    return {"when": body["when"], "fireAt": format_rfc3339_ms(fire_at_ms), "rrule": rule,
            "timeZone": time_zone if isinstance(time_zone, str) else None}


def run_view(run: Run) -> dict[str, Any]:
    """The 202 body of a run now (``app.running``): ``runTriggerId`` is the trigger that
    fires the occurrence (the one asked, or its one-time copy)."""
    return {"triggerId": run.trigger_id, "occurrenceId": run.occurrence_id,
            "fireAt": format_rfc3339_ms(run.fire_at_ms), "runTriggerId": run.run_trigger_id}


def cancelled_view(t: Trigger) -> dict[str, Any]:
    return {"triggerId": t.trigger_id, "status": t.status.value}


def page_view(page: ListPage) -> dict[str, Any]:
    return {
        "items": [trigger_view(t) for t in page.triggers],
        "nextCursor": encode_cursor(page.next_cursor) if page.next_cursor else None,
    }


def attempts_view(p: AttemptPage) -> dict[str, Any]:
    """A page of a trigger's attempts (``GET /v1/triggers/{id}/attempts``)."""
    return {"items": [attempt_view(a) for a in p.items],
            "nextCursor": encode_attempts_cursor(p.next_cursor) if p.next_cursor else None}


def attempt_view(a: Attempt) -> dict[str, Any]:
    return {"occurrenceId": a.occurrence_id, "attempt": a.attempt, "channel": a.channel,
            "startedAt": format_rfc3339_ms(a.started_at_ms), "durationMs": a.duration_ms,
            "outcome": a.outcome.value if a.outcome else None,
            "statusCode": a.status_code, "error": a.error}
