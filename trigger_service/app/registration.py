"""A registration request on its way in: as parsed (``RegisterRequest``: shapes only), then
planned (``NewTrigger``: its first fire time and schedule). No HTTP here, no I/O."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from trigger_service.app.schedules import TimeRequest, plan
from trigger_service.config.settings import ApiSettings
from trigger_service.core.deadlines import check_expiry
from trigger_service.core.errors import InvalidRequest
from trigger_service.core.flow import FlowControl
from trigger_service.core.notify.plan import DeliveryPlan
from trigger_service.core.tags import Labels
from trigger_service.core.time.occurrence import Occurrence
from trigger_service.core.time.recurrence import Recurrence

# The time fields read again for a recipient (issue 26): in its zone (None: the request's
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
    recipient: str | None = None  # the recipient profile it is for (issue 26)
    recipient_zone: bool = False  # its schedule floats with the profile's zone
    expires_at_ms: int | None = None  # deadlines (``core.deadlines``); None: none
    max_lateness_s: int | None = None
    flow_control: FlowControl | None = None  # issue 27: its own key and bounds


@dataclass(frozen=True, slots=True)
class RegisterRequest:
    """A registration (or an edit's, a snooze's) as the HTTP layer parsed it: every field's
    shape checked, nothing resolved or planned yet (``TriggerService.accept`` does both)."""

    callback_url: str  # normalised and under the caller's prefixes; "" with channels alone
    payload_json: str
    time: TimeRequest
    received_at_ms: int  # the one "now" of this request
    plan: DeliveryPlan | None = None
    jitter_s: int = 0  # jitterSeconds: >= 0 (its bound is a setting: ``plan_request``)
    tags: tuple[str, ...] = ()
    labels: Labels = ()
    recipient: str | None = None  # a recipient profile's id (issue 26)
    # With a recipient and ``"timeZone": "recipient"`` or ``when``: the time fields read
    # again in the recipient's zone (``floats``; what ``time`` holds until then was read in
    # UTC, for their shape only) and with its locale.
    retime: Retime | None = field(default=None, compare=False)
    floats: bool = False  # ``"timeZone": "recipient"``
    expires_at_ms: int | None = None  # expiresAt (not before the first fire time: planned)
    max_lateness_s: int | None = None  # maxLatenessSeconds (>= 1)
    flow_control: FlowControl | None = None  # ``flowControl`` (``core.flow``): checked


def plan_request(req: RegisterRequest, api: ApiSettings) -> NewTrigger:
    """The trigger ``req`` describes: its first fire time (a past one is now) and schedule.
    Pure. Raises ``InvalidRequest``, ``FireAtOutOfRange``, ``NonexistentLocalTime`` or
    ``ExpiresBeforeFire``."""
    if req.jitter_s > api.max_jitter_s:
        raise InvalidRequest(f"jitterSeconds: 0 to {api.max_jitter_s} "
                             "(TRIGGER_API_MAX_JITTER_S)", field="jitterSeconds")
    planned = plan(req.time, now_ms=req.received_at_ms, horizon_days=api.max_fire_ahead_days,
                   min_interval_s=api.min_recurrence_interval_s)
    check_expiry(req.expires_at_ms, planned.fire_at_ms)
    return NewTrigger(req.callback_url, req.payload_json, planned.fire_at_ms,
                      req.received_at_ms, planned.schedule, planned.occurrence, req.plan,
                      req.jitter_s, req.tags, req.labels, req.recipient,
                      req.floats and planned.schedule is not None, req.expires_at_ms,
                      req.max_lateness_s, req.flow_control)
