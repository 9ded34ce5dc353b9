"""A registration request on its way in: as parsed (``RegisterRequest``: shapes only), then
timed (``NewTrigger``: its first fire time and schedule), then the trigger it makes
(``new_trigger``, ``snoozed``), and what ``TriggerService.register`` answers
(``Registration``). No HTTP here, no I/O."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from trigger_service.app.idempotency import Registered
from trigger_service.app.schedules import TimeRequest, first_fire
from trigger_service.config.callers import Caller
from trigger_service.config.settings import ApiSettings, Settings
from trigger_service.core.deadlines import check_expiry
from trigger_service.core.errors import InvalidRequest, NotEditable
from trigger_service.core.flow import FlowControl
from trigger_service.core.model import (
    Priority,
    Status,
    Trigger,
    keyed_trigger_id,
    new_trigger_id,
    route_for,
    shard_of,
)
from trigger_service.core.notify.plan import DeliveryPlan
from trigger_service.core.tags import Labels
from trigger_service.core.time.jitter import jitter_offset_ms
from trigger_service.core.time.occurrence import Occurrence
from trigger_service.core.time.recurrence import Recurrence
from trigger_service.core.time.zones import TZDATA_VERSION
from trigger_service.core.trace_context import current_traceparent

# The time fields read again for a recipient: in its zone (None: the request's
# own, the time does not float) with its locale (``when``'s date order; None: no hint).
Retime = Callable[[str | None, str | None], TimeRequest]


@dataclass(frozen=True, slots=True)
class NewTrigger:
    """A validated registration request."""

    callback_url: str
    payload_json: str
    fire_at_ms: int  # already clamped to >= received_at_ms
    received_at_ms: int  # the one "now" of this request: delays and the route derive from it
    schedule: Recurrence | None = None  # a wall time in a zone, or a recurring rule
    occurrence: Occurrence | None = None  # which of the schedule's occurrences fire_at_ms is
    plan: DeliveryPlan | None = None  # notification channels (callback_url may then be "")
    jitter_s: int = 0  # each occurrence fires up to this late (``fire_at_ms``: unjittered)
    tags: tuple[str, ...] = ()  # ``core.tags``: validated
    labels: Labels = ()
    recipient: str | None = None  # the recipient profile it is for
    recipient_zone: bool = False  # its schedule floats with the profile's zone
    expires_at_ms: int | None = None  # deadlines (``core.deadlines``); None: none
    max_lateness_s: int | None = None
    flow_control: FlowControl | None = None  # flow control: its own key and bounds
    priority: Priority = Priority.NORMAL  # among the caller's triggers due at one time


@dataclass(frozen=True, slots=True)
class RegisterRequest:
    """A registration (or an edit's, a snooze's) as the HTTP layer parsed it: every field's
    shape checked, nothing resolved or timed yet (``TriggerService.accept`` does both)."""

    callback_url: str  # normalised and under the caller's prefixes; "" with channels alone
    payload_json: str
    time: TimeRequest
    received_at_ms: int  # the one "now" of this request
    plan: DeliveryPlan | None = None
    jitter_s: int = 0  # jitterSeconds: >= 0 (its bound is a setting: ``timed_request``)
    tags: tuple[str, ...] = ()
    labels: Labels = ()
    recipient: str | None = None  # a recipient profile's id
    # With a recipient and ``"timeZone": "recipient"`` or ``when``: the time fields read
    # again in the recipient's zone (``floats``; what ``time`` holds until then was read in
    # UTC, for their shape only) and with its locale.
    retime: Retime | None = field(default=None, compare=False)
    floats: bool = False  # ``"timeZone": "recipient"``
    expires_at_ms: int | None = None  # expiresAt (not before the first fire time: timed)
    max_lateness_s: int | None = None  # maxLatenessSeconds (>= 1)
    flow_control: FlowControl | None = None  # ``flowControl`` (``core.flow``): checked
    priority: Priority = Priority.NORMAL  # ``priority``


@dataclass(frozen=True, slots=True)
class Budgets:
    """The daily send budgets a registration is admitted by (``ChannelGate.check_budgets``):
    ``caller``'s, for ``plan``'s channels."""

    caller: Caller
    plan: DeliveryPlan | None


@dataclass(frozen=True, slots=True)
class Registration:
    """What ``TriggerService.register`` made of a request: ``registered``, the trigger's id
    and first fire time (a replay's: the first request's), and ``new``, the request as
    timed (its schedule and jitter, which the answer shows)."""

    registered: Registered
    new: NewTrigger


def timed_request(req: RegisterRequest, api: ApiSettings) -> NewTrigger:
    """The trigger ``req`` describes: its first fire time (a past one is now) and schedule.
    Pure. Raises ``InvalidRequest``, ``FireAtOutOfRange``, ``NonexistentLocalTime`` or
    ``ExpiresBeforeFire``."""
    if req.jitter_s > api.max_jitter_s:
        raise InvalidRequest(f"jitterSeconds: 0 to {api.max_jitter_s} "
                             "(TRIGGER_API_MAX_JITTER_S)", field="jitterSeconds")
    first = first_fire(req.time, now_ms=req.received_at_ms,
                       horizon_days=api.max_fire_ahead_days,
                       min_interval_s=api.min_recurrence_interval_s)
    check_expiry(req.expires_at_ms, first.fire_at_ms)
    return NewTrigger(req.callback_url, req.payload_json, first.fire_at_ms,
                      req.received_at_ms, first.schedule, first.occurrence, req.plan,
                      req.jitter_s, req.tags, req.labels, req.recipient,
                      req.floats and first.schedule is not None, req.expires_at_ms,
                      req.max_lateness_s, req.flow_control, req.priority)


def new_trigger(caller: str, req: NewTrigger, idem_key: str | None, request_hash: str,
                settings: Settings, *, snoozed_from: str | None = None) -> Trigger:
    """The PENDING trigger ``req`` makes for ``caller``: its id (a keyed one's derived from
    ``idem_key``), its first occurrence jittered, its shard and route; a keyed one carries
    ``request_hash`` and the fire time its requests are answered."""
    now_ms = req.received_at_ms
    keyed = idem_key is not None
    # A keyed trigger's id is its key's: every request with the key finds the one row.
    trigger_id = (keyed_trigger_id(caller, idem_key) if idem_key is not None
                  else new_trigger_id(now_ms))
    # The first occurrence's jitter: stored, routed and answered is the jittered instant.
    fire_at_ms = req.fire_at_ms + jitter_offset_ms(f"{trigger_id}.1", req.jitter_s)
    return Trigger(
        trigger_id=trigger_id, caller=caller, callback_url=req.callback_url,
        payload_json=req.payload_json, fire_at_ms=fire_at_ms, created_at_ms=now_ms,
        shard=shard_of(trigger_id, settings.shards),
        route=route_for(fire_at_ms, now_ms, settings.direct_max_delay_s),
        idem_key=idem_key, schedule=req.schedule,
        occurrence_index=req.occurrence.index if req.occurrence else 0,
        occurrence_second=req.occurrence.second if req.occurrence else False,
        tzdata_version=TZDATA_VERSION if req.schedule else None, plan=req.plan,
        request_hash=request_hash if keyed else None,
        registered_fire_at_ms=fire_at_ms if keyed else None,
        home_at_ms=fire_at_ms, jitter_s=req.jitter_s, tags=req.tags, labels=req.labels,
        recipient=req.recipient, recipient_zone=req.recipient_zone,
        expires_at_ms=req.expires_at_ms, max_lateness_s=req.max_lateness_s,
        flow_control=req.flow_control, trace_parent=current_traceparent(),
        snoozed_from=snoozed_from, priority=req.priority,
    )


def snoozed(original: Trigger, trigger: Trigger) -> Trigger:
    """``trigger`` as a snooze of ``original``: ``original``'s callback, payload, channels,
    tags, labels and priority at ``trigger``'s time. Raises ``NotEditable`` unless ``original`` is
    pending, in flight or fired."""
    if original.status not in (Status.PENDING, Status.IN_FLIGHT, Status.FIRED):
        raise NotEditable(f"trigger {original.trigger_id} is {original.status.value}; "
                          "only a pending or fired trigger can be snoozed",
                          status=original.status.value)
    return replace(trigger, callback_url=original.callback_url,
                   payload_json=original.payload_json, plan=original.plan,
                   tags=original.tags, labels=original.labels, priority=original.priority,
                   snoozed_from=original.trigger_id)
