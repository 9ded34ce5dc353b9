"""Request bodies (pure): what ``create``, ``preview``, ``snooze`` and ``patch`` send.

Field names are the SDK's (snake_case, units in names: ``delay_s``); ``to_json`` gives the
API's camelCase body. Exactly one time field (``delay_s``, ``fire_at``, ``local_time`` with
``time_zone``, or the natural-language ``when``) is the caller's to choose; the API checks
the combination and answers ``InvalidRequest`` naming the field.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any, TypedDict

from trigger_client.models import Debounce, DstPolicy, FlowControl, Priority
from trigger_client.pausing import CatchUp

# SDK name -> API name, for every field of a trigger request.
_API_NAMES = {
    "callback_url": "callbackUrl", "payload": "payload", "delay_s": "delaySeconds",
    "fire_at": "fireAt", "local_time": "localTime", "time_zone": "timeZone", "when": "when",
    "rrule": "rrule", "cron": "cron", "dst_policy": "dstPolicy", "exdates": "exdates",
    "channels": "channels", "escalation": "escalation", "quiet_hours": "quietHours",
    "jitter_s": "jitterSeconds",
    "tags": "tags", "labels": "labels",
    "recipient": "recipient", "message": "message",
    "catch_up": "catchUp",
    "expires_at": "expiresAt", "max_lateness_s": "maxLatenessSeconds",
    "flow_control": "flowControl", "debounce": "debounce", "priority": "priority",
}


def _value(value: Any) -> Any:
    """A field's JSON value: aware datetimes as RFC 3339, naive ones as wall times."""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, DstPolicy | CatchUp | FlowControl | Debounce):
        return value.to_json()
    if isinstance(value, Priority):
        return value.value
    if isinstance(value, tuple):
        return [_value(v) for v in value]
    return value


class TriggerFields(TypedDict, total=False):
    """The keyword arguments of ``triggers.create`` and ``triggers.preview``."""

    callback_url: str
    payload: Any
    delay_s: float
    fire_at: datetime | str
    local_time: datetime | str
    time_zone: str
    when: str
    rrule: str
    cron: str
    dst_policy: DstPolicy
    exdates: Sequence[datetime | str]
    channels: Sequence[Mapping[str, Any]] | str  # "preferred": the recipient's preference
    escalation: Mapping[str, Any]
    quiet_hours: Mapping[str, Any]
    jitter_s: int
    tags: Sequence[str]
    labels: Mapping[str, str]
    recipient: str  # a recipient profile's id (time_zone "recipient" floats with its zone)
    message: Mapping[str, str]  # {"title"?, "text"}: channels given by type alone
    catch_up: CatchUp
    expires_at: datetime | str  # aware: no occurrence is sent after it
    max_lateness_s: int  # each occurrence sent at most this long after its time
    flow_control: FlowControl  # per destination
    priority: Priority | str  # "high", "normal" (the default) or "low"
    debounce: Debounce  # create only: join the key's open trigger


class PatchFields(TypedDict, total=False):
    """The keyword arguments of ``triggers.patch``: a key given as None removes the field
    (JSON merge patch); a key not given stays as it is."""

    callback_url: str | None
    payload: Any
    delay_s: float | None
    fire_at: datetime | str | None
    local_time: datetime | str | None
    time_zone: str | None
    when: str  # replaces every time field; read in the trigger's zone unless time_zone
    rrule: str | None
    cron: str | None
    dst_policy: DstPolicy | None
    exdates: Sequence[datetime | str] | None
    channels: Sequence[Mapping[str, Any]] | str | None
    escalation: Mapping[str, Any] | None
    quiet_hours: Mapping[str, Any] | None
    jitter_s: int | None
    tags: Sequence[str] | None
    labels: Mapping[str, str] | None  # replaces every label
    recipient: str | None
    message: Mapping[str, str] | None
    catch_up: CatchUp | None
    expires_at: datetime | str | None
    max_lateness_s: int | None
    flow_control: FlowControl | None  # replaces the whole object
    priority: Priority | str | None  # None: back to normal


@dataclass(frozen=True, slots=True)
class TriggerRequest:
    """A new trigger (or a schedule to preview). ``fire_at`` aware (or an RFC 3339 string);
    ``local_time`` naive (a wall time in ``time_zone``); ``when`` a phrase such as
    ``"tomorrow 9am"`` read in ``time_zone``; ``jitter_s`` spreads each occurrence over
    that many seconds after its time; ``expires_at`` (aware) and ``max_lateness_s`` are
    deadlines (past one, an occurrence is dead-lettered ``expired`` instead of sent). None
    means "not given"."""

    callback_url: str | None = None
    payload: Any = None
    delay_s: float | None = None
    fire_at: datetime | str | None = None
    local_time: datetime | str | None = None
    time_zone: str | None = None
    when: str | None = None
    rrule: str | None = None
    cron: str | None = None
    dst_policy: DstPolicy | None = None
    exdates: tuple[datetime | str, ...] | None = None
    channels: tuple[Mapping[str, Any], ...] | str | None = None
    escalation: Mapping[str, Any] | None = None
    quiet_hours: Mapping[str, Any] | None = None
    jitter_s: int | None = None
    tags: tuple[str, ...] | None = None  # up to 10, to find it by (``list(tag=...)``)
    labels: Mapping[str, str] | None = None  # up to 10, key -> value
    recipient: str | None = None
    message: Mapping[str, str] | None = None
    catch_up: CatchUp | None = None
    expires_at: datetime | str | None = None  # no occurrence is sent after it
    max_lateness_s: int | None = None  # each occurrence at most this late (>= 1)
    flow_control: FlowControl | None = None  # per destination
    # Among the caller's triggers due at the same time: high first, low last (None: normal).
    priority: Priority | str | None = None
    debounce: Debounce | None = None  # create only (not batch, not preview)

    @classmethod
    def of(cls, fields_: TriggerFields) -> TriggerRequest:
        """From keyword arguments (sequences become tuples)."""
        kw: dict[str, Any] = dict(fields_)
        for name in ("exdates", "channels", "tags"):
            if kw.get(name) is not None and not isinstance(kw[name], str):
                kw[name] = tuple(kw[name])
        return cls(**kw)

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> TriggerRequest:
        """From an API body (camelCase); ValueError naming an unknown field."""
        sdk_names = {api: sdk for sdk, api in _API_NAMES.items()}
        unknown = sorted(set(body) - set(sdk_names))
        if unknown:
            raise ValueError(f"unknown fields: {', '.join(unknown)}")
        kw: dict[str, Any] = {sdk_names[k]: v for k, v in body.items()}
        if isinstance(kw.get("dst_policy"), Mapping):
            kw["dst_policy"] = DstPolicy.from_json(kw["dst_policy"])
        if isinstance(kw.get("catch_up"), Mapping):
            kw["catch_up"] = CatchUp.from_json(kw["catch_up"])
        if isinstance(kw.get("flow_control"), Mapping):
            kw["flow_control"] = FlowControl.from_json(kw["flow_control"])
        if isinstance(kw.get("debounce"), Mapping):
            d = kw["debounce"]
            kw["debounce"] = Debounce(d["key"], d.get("mode", "replace"), d.get("maxWaitSeconds"))
        return cls.of(kw)  # type: ignore[arg-type]

    def to_json(self) -> dict[str, Any]:
        """The API's body: the fields given, in camelCase."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is not None:
                out[_API_NAMES[f.name]] = _value(value)
        return out


def request_from(request: TriggerRequest | None, fields: TriggerFields) -> TriggerRequest:
    """The request given, or one made of the keyword fields (TypeError for both)."""
    if request is not None and fields:
        raise TypeError("give a TriggerRequest or keyword fields, not both")
    return request if request is not None else TriggerRequest.of(fields)


def patch_body(changes: PatchFields) -> dict[str, Any]:
    """A JSON merge patch from ``changes`` (None stays null: it removes the field)."""
    unknown = set(changes) - set(_API_NAMES)
    if unknown:
        raise TypeError(f"unknown fields: {sorted(unknown)}")
    return {_API_NAMES[k]: _value(tuple(v) if isinstance(v, list) else v)
            for k, v in changes.items()}


def snooze_body(*, delay_s: float | None = None, fire_at: datetime | str | None = None,
                local_time: datetime | str | None = None, time_zone: str | None = None,
                dst_policy: DstPolicy | None = None, when: str | None = None) -> dict[str, Any]:
    """The body of a snooze: one time field (``local_time`` with ``time_zone``; ``when``, a
    one-time phrase read in the original's zone unless ``time_zone`` is given)."""
    given = {"delay_s": delay_s, "fire_at": fire_at, "local_time": local_time,
             "time_zone": time_zone, "dst_policy": dst_policy, "when": when}
    return {_API_NAMES[k]: _value(v) for k, v in given.items() if v is not None}
