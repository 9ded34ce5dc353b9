"""How an occurrence reaches a person: the channels, the escalation ladder, quiet
hours, and each channel's state for the current occurrence. Pure: no I/O, no clock.

- Without ``escalation`` every channel is due at the fire time. With it, step k sends channel
  ``steps[k].channel`` at the fire time + ``afterSeconds`` unless the occurrence has been
  acknowledged (then it is ``SKIPPED``); a channel no step names is due at the fire time.
- ``quietHours`` (on the trigger, or on one channel) defers a non-HTTP channel due inside the
  window to the window's end, read in the window's zone (DST-correct: an end inside a gap
  is shifted like any wall time, the first of an overlap is taken).
- A trigger that has ``channels`` and a ``callbackUrl`` delivers the callback as one more
  channel, last, at the fire time (``type`` ``http``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from datetime import datetime, time, timedelta
from enum import StrEnum
from typing import Any

from trigger_service.core.errors import InvalidRequest
from trigger_service.core.notify.channels import ChannelSpec, parse_channels, spec_to_json
from trigger_service.core.time.zones import DstPolicy, load_zone, resolve, wall_of

MAX_ESCALATION_S = 86_400  # a step stays within the reconciler's 48 h look-back
PLAN_FIELDS = ("channels", "escalation", "quietHours", "message")  # a plan's request fields
PREFERRED = "preferred"  # ``"channels": "preferred"``: the recipient's preference
MAX_MESSAGE_TEXT = 1_600
HTTP = "http"


class ChannelStatus(StrEnum):
    PENDING = "PENDING"
    DEFERRED = "DEFERRED"  # due inside quiet hours: moved to their end
    DELIVERED = "DELIVERED"
    FAILED = "FAILED"
    SKIPPED = "SKIPPED"  # an escalation step not sent: the occurrence was acknowledged

    @property
    def done(self) -> bool:
        return self in (ChannelStatus.DELIVERED, ChannelStatus.FAILED, ChannelStatus.SKIPPED)


@dataclass(frozen=True, slots=True)
class QuietHours:
    start: time
    end: time
    time_zone: str

    def contains(self, at_ms: int) -> bool:
        t = wall_of(at_ms, load_zone(self.time_zone)).time()
        if self.start <= self.end:
            return self.start <= t < self.end
        return t >= self.start or t < self.end  # across midnight

    def defer(self, at_ms: int) -> int:
        """``at_ms``, or the end of the quiet window it falls in."""
        if not self.contains(at_ms):
            return at_ms
        tz = load_zone(self.time_zone)
        wall = wall_of(at_ms, tz)
        end = datetime.combine(wall.date(), self.end)
        if end <= wall:
            end += timedelta(days=1)
        return resolve(end, tz, DstPolicy())[0]

    def to_json(self) -> dict[str, str]:
        return {"start": self.start.strftime("%H:%M"), "end": self.end.strftime("%H:%M"),
                "timeZone": self.time_zone}


@dataclass(frozen=True, slots=True)
class EscalationStep:
    after_s: int
    channel: int


@dataclass(frozen=True, slots=True)
class DeliveryPlan:
    channels: tuple[ChannelSpec, ...]
    escalation: tuple[EscalationStep, ...] = ()
    quiet_hours: QuietHours | None = None
    channel_quiet_hours: tuple[tuple[int, QuietHours], ...] = ()
    # A recipient's plan. ``addressless``: a channel may leave its address to the
    # recipient's profile (resolved at send time); ``preferred``: one channel, its type the
    # profile's first preferred one with an address, chosen at send time.
    addressless: bool = False
    preferred: bool = False

    def offset_s(self, index: int) -> int:
        return next((s.after_s for s in self.escalation if s.channel == index), 0)

    def quiet_for(self, index: int) -> QuietHours | None:
        own = dict(self.channel_quiet_hours).get(index)
        return own or self.quiet_hours


@dataclass(frozen=True, slots=True)
class ChannelState:
    type: str
    status: ChannelStatus = ChannelStatus.PENDING
    due_at_ms: int = 0  # when it may be sent next (step time, retry time, quiet-hours end)
    attempts: int = 0
    last_error: str | None = None
    provider_code: str | None = None
    provider_message_id: str | None = None
    delivered_at_ms: int | None = None


def initial_states(plan: DeliveryPlan, fire_at_ms: int, *,
                   has_callback: bool) -> tuple[ChannelState, ...]:
    """Every channel's state at the start of an occurrence firing at ``fire_at_ms``."""
    out: list[ChannelState] = []
    for i, spec in enumerate(plan.channels):
        due = fire_at_ms + plan.offset_s(i) * 1000
        quiet = plan.quiet_for(i)
        deferred = quiet.defer(due) if quiet else due
        kind = PREFERRED if plan.preferred else spec.type.value
        out.append(ChannelState(kind, ChannelStatus.DEFERRED if deferred != due
                                else ChannelStatus.PENDING, deferred))
    if has_callback:
        out.append(ChannelState(HTTP, ChannelStatus.PENDING, fire_at_ms))
    return tuple(out)


# --- parsing and storage ---------------------------------------------------------------------
def _clock_time(value: object, field: str) -> time:
    try:
        if not isinstance(value, str) or len(value) != 5:
            raise ValueError(value)
        return time.fromisoformat(value)
    except ValueError as e:
        raise InvalidRequest(f"{field}: a wall time HH:MM") from e


def parse_quiet_hours(raw: object, field: str) -> QuietHours:
    if not isinstance(raw, dict) or set(raw) != {"start", "end", "timeZone"}:
        raise InvalidRequest(f"{field}: {{\"start\": \"22:00\", \"end\": \"07:00\", "
                             "\"timeZone\": \"Europe/Berlin\"}")
    load_zone(raw["timeZone"], f"{field}.timeZone")
    start = _clock_time(raw["start"], f"{field}.start")
    end = _clock_time(raw["end"], f"{field}.end")
    if start == end:
        raise InvalidRequest(f"{field}.end: differs from start")
    return QuietHours(start, end, raw["timeZone"])


def parse_escalation(raw: object, n_channels: int) -> tuple[EscalationStep, ...]:
    if not isinstance(raw, dict) or set(raw) != {"steps"} or not isinstance(raw["steps"], list) \
            or not 1 <= len(raw["steps"]) <= n_channels:
        raise InvalidRequest(f"escalation: {{\"steps\": [...]}}, 1 to {n_channels} steps")
    steps: list[EscalationStep] = []
    for k, s in enumerate(raw["steps"]):
        where = f"escalation.steps[{k}]"
        if not isinstance(s, dict) or set(s) != {"afterSeconds", "channel"}:
            raise InvalidRequest(f"{where}: {{\"afterSeconds\", \"channel\"}}")
        after, ch = s["afterSeconds"], s["channel"]
        if type(after) is not int or not 0 <= after <= MAX_ESCALATION_S:
            raise InvalidRequest(f"{where}.afterSeconds: 0 to {MAX_ESCALATION_S}")
        if type(ch) is not int or not 0 <= ch < n_channels or any(x.channel == ch for x in steps):
            raise InvalidRequest(f"{where}.channel: the index of a channel, each once")
        if steps and after < steps[-1].after_s:
            raise InvalidRequest(f"{where}.afterSeconds: steps in time order")
        steps.append(EscalationStep(after, ch))
    return tuple(steps)


def parse_message(body: dict[str, Any]) -> dict[str, str] | None:
    """A recipient trigger's ``message`` ({"title"?, "text"}): the content of its channels
    given by type alone."""
    raw = body.get("message")
    if raw is None:
        return None
    if not isinstance(raw, dict) or not set(raw) <= {"title", "text"} or not all(
            isinstance(v, str) and v.strip() and len(v) <= MAX_MESSAGE_TEXT
            for v in raw.values()) or "text" not in raw:
        raise InvalidRequest(f"message: {{\"title\"?, \"text\"}}, non-empty strings of at "
                             f"most {MAX_MESSAGE_TEXT} characters", field="message")
    if not isinstance(body.get("recipient"), str) and not body.get("addressless"):
        raise InvalidRequest("message: only with a recipient", field="message")
    return raw


def parse_plan(body: dict[str, Any]) -> DeliveryPlan | None:
    """``channels``, ``escalation``, ``quietHours`` and ``message`` of a request (None: no
    channels); with a ``recipient``, channels by type alone or ``"preferred"``."""
    if "channels" not in body:
        for key in ("escalation", "quietHours", "message"):
            if key in body:
                raise InvalidRequest(f"{key}: only with channels")
        return None
    addressless = isinstance(body.get("recipient"), str) or bool(body.get("addressless"))
    message = parse_message(body)
    raw = body["channels"]
    preferred = raw == PREFERRED or bool(body.get(PREFERRED))
    if raw == PREFERRED:
        if not addressless or message is None:
            raise InvalidRequest("channels: \"preferred\" needs a recipient and a message",
                                 field="channels")
        raw = [{"type": "inbox"}]  # the content's carrier; its type is chosen at send time
    own: list[tuple[int, QuietHours]] = []
    if isinstance(raw, list):
        stripped = []
        for i, c in enumerate(raw):
            if isinstance(c, dict) and "quietHours" in c:
                own.append((i, parse_quiet_hours(c["quietHours"], f"channels[{i}].quietHours")))
                c = {k: v for k, v in c.items() if k != "quietHours"}
            stripped.append(c)
        raw = stripped
    channels = parse_channels(raw, addressless=addressless, message=message)
    if preferred and len(channels) != 1:
        raise InvalidRequest("channels: \"preferred\" is one channel", field="channels")
    escalation = (parse_escalation(body["escalation"], len(channels))
                  if body.get("escalation") is not None else ())
    quiet = (parse_quiet_hours(body["quietHours"], "quietHours")
             if body.get("quietHours") is not None else None)
    return DeliveryPlan(channels, escalation, quiet, tuple(own), addressless, preferred)


def plan_to_json(plan: DeliveryPlan) -> str:
    own = dict(plan.channel_quiet_hours)
    channels = [{**spec_to_json(c), **({"quietHours": own[i].to_json()} if i in own else {})}
                for i, c in enumerate(plan.channels)]
    return json.dumps({
        "channels": channels,
        "escalation": {"steps": [{"afterSeconds": s.after_s, "channel": s.channel}
                                 for s in plan.escalation]} if plan.escalation else None,
        "quietHours": plan.quiet_hours.to_json() if plan.quiet_hours else None,
        **({"addressless": True} if plan.addressless else {}),
        **({PREFERRED: True} if plan.preferred else {}),
    }, separators=(",", ":"))


def plan_from_json(text: str) -> DeliveryPlan:
    plan = parse_plan(json.loads(text))
    assert plan is not None
    return plan


def states_to_json(states: tuple[ChannelState, ...]) -> str:
    return json.dumps([[s.type, s.status.value, s.due_at_ms, s.attempts, s.last_error,
                        s.provider_code, s.provider_message_id, s.delivered_at_ms]
                       for s in states], separators=(",", ":"))


def states_from_json(text: str) -> tuple[ChannelState, ...]:
    return tuple(ChannelState(r[0], ChannelStatus(r[1]), *r[2:]) for r in json.loads(text))


def with_state(states: tuple[ChannelState, ...], index: int,
               **changes: Any) -> tuple[ChannelState, ...]:
    return tuple(replace(s, **changes) if i == index else s for i, s in enumerate(states))
