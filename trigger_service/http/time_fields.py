"""The time fields of a request body (``delaySeconds`` | ``fireAt`` | ``localTime`` +
``timeZone``, ``rrule`` | ``cron``, ``dstPolicy``, ``exdates``; or ``when`` with ``timeZone``
and ``dstPolicy``; a series' ``catchUp`` with either) → a ``TimeRequest``, or an
``InvalidRequest`` naming the field. Shapes only: zones, rules and the horizon are checked by
``app.schedules.first_fire``; a ``when`` phrase is read into the other fields by
``core.time.when``. Pure: the current time is passed in."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from trigger_service.app.cpu_shares import metered
from trigger_service.app.schedules import TimeRequest
from trigger_service.core.errors import InvalidRequest
from trigger_service.core.time.catchup import parse_catch_up
from trigger_service.core.time.recurrence import RuleKind
from trigger_service.core.time.timing import parse_rfc3339_ms
from trigger_service.core.time.when import MAX_WHEN_LEN, resolve_when
from trigger_service.core.time.zones import DstPolicy, Gap, Overlap

INSTANT_FIELDS = ("delaySeconds", "fireAt", "localTime")
TIME_FIELDS = frozenset({*INSTANT_FIELDS, "timeZone", "rrule", "cron", "dstPolicy", "exdates",
                         "when", "catchUp"})
# The other ways of saying when: ``when`` stands alone (``timeZone`` and ``dstPolicy`` may join).
_NOT_WITH_WHEN = (*INSTANT_FIELDS, "rrule", "cron", "exdates")
MAX_EXDATES = 1000
_LOCAL_RE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d{1,6})?)?$")
_OFFSET_RE = re.compile(r"(Z|z|[+-]\d{2}:?\d{2})$")


def bad(field: str, message: str) -> InvalidRequest:
    return InvalidRequest(f"{field}: {message}", field=field)


def parse_time_fields(body: dict[str, Any], now_ms: int, *,
                      locale: str | None = None) -> TimeRequest:
    """The time fields of ``body`` read at ``now_ms``; ``locale``: ``when``'s date order.
    Metered against the request's caller's CPU share (``app/cpu_shares.py``)."""
    with metered():
        return _parse_time_fields(body, now_ms, locale)


def _parse_time_fields(body: dict[str, Any], now_ms: int, locale: str | None) -> TimeRequest:
    if "when" in body:
        return parse_when(body, now_ms, locale=locale)
    given = [f for f in INSTANT_FIELDS if f in body]
    if len(given) != 1:
        raise bad("/".join(INSTANT_FIELDS),
                  "exactly one of delaySeconds, fireAt or localTime is required"
                  + (f" (got {', '.join(given)})" if given else ""))
    if "rrule" in body and "cron" in body:
        raise bad("rrule", "give either rrule or cron, not both")
    kind = RuleKind.RRULE if "rrule" in body else RuleKind.CRON if "cron" in body else None
    time_zone = body.get("timeZone")
    if "timeZone" in body and not isinstance(time_zone, str):
        raise bad("timeZone", "must be an IANA time zone name such as 'America/New_York'")
    local = parse_local_time(body["localTime"], "localTime") if "localTime" in body else None
    if local is not None and time_zone is None:
        raise bad("timeZone", "required with localTime")
    if kind is None and local is None:
        for f in ("dstPolicy", "exdates"):
            if f in body:
                raise bad(f, "only with localTime, rrule or cron")
    for f in ("exdates", "catchUp"):
        if f in body and kind is None:
            raise bad(f, "only with rrule or cron")
    return TimeRequest(
        at_ms=_instant_ms(body, now_ms) if local is None else None, at_field=given[0],
        local_time=local,
        time_zone=time_zone, rule_kind=kind,
        rule_text=body.get(kind.value) if kind else None,
        dst=parse_dst_policy(body["dstPolicy"]) if "dstPolicy" in body else DstPolicy(),
        exdates=parse_exdates(body["exdates"]) if "exdates" in body else (),
        catch_up=parse_catch_up(body["catchUp"]) if "catchUp" in body else None)


def parse_when(body: dict[str, Any], now_ms: int, *, locale: str | None = None) -> TimeRequest:
    """``when`` (+ ``timeZone``, ``dstPolicy``) read at ``now_ms`` into the fields it stands
    for (``core.time.when``; ``locale`` a hint for a numeric date's order); errors name ``when``
    (or ``timeZone``)."""
    text = body["when"]
    if not isinstance(text, str) or not 1 <= len(text) <= MAX_WHEN_LEN:
        raise bad("when", f"must be a phrase of 1 to {MAX_WHEN_LEN} characters such as "
                  "'tomorrow at 9am' or 'every weekday at 9am'")
    if any(not c.isprintable() and not c.isspace() for c in text):
        raise bad("when", "must be printable text (no control characters)")
    others = [f for f in _NOT_WITH_WHEN if f in body]
    if others:
        raise bad("when", f"give when or {others[0]}, not both (when is a whole time: with "
                  "timeZone and optionally dstPolicy)")
    time_zone = body.get("timeZone")
    if time_zone is not None and not isinstance(time_zone, str):
        raise bad("timeZone", "must be an IANA time zone name such as 'America/New_York'")
    dst = parse_dst_policy(body["dstPolicy"]) if "dstPolicy" in body else None
    r = resolve_when(text, now_ms=now_ms, time_zone=time_zone, dst=dst, locale=locale)
    if "catchUp" in body and r.rrule is None:
        raise bad("catchUp", "only with a recurring when ('every ...') or rrule or cron")
    if dst is not None and r.at_ms is not None:
        raise bad("dstPolicy", "only with a wall-clock or recurring when ('in 2 hours' is an "
                  "instant)")
    return TimeRequest(
        at_ms=r.at_ms, at_field="when", local_time=r.local_time, time_zone=r.time_zone,
        rule_kind=RuleKind.RRULE if r.rrule else None, rule_text=r.rrule,
        dst=dst or DstPolicy(), source="when",
        catch_up=parse_catch_up(body["catchUp"]) if "catchUp" in body else None)


def _instant_ms(body: dict[str, Any], now_ms: int) -> int:
    if "delaySeconds" in body:
        delay = body["delaySeconds"]
        if isinstance(delay, bool) or not isinstance(delay, int | float):
            raise bad("delaySeconds", "must be a number")
        # Range first: an int past float's range makes isfinite() raise OverflowError.
        if delay < 0:
            raise bad("delaySeconds", "must be >= 0")
        if delay > 1e12 or not math.isfinite(delay):
            raise bad("delaySeconds", "too large")
        return now_ms + round(delay * 1000)
    text = body["fireAt"]
    if not isinstance(text, str):
        raise bad("fireAt", "must be an RFC 3339 string")
    try:
        return parse_rfc3339_ms(text)
    except (ValueError, OverflowError) as e:
        raise bad("fireAt", str(e)) from e


def parse_local_time(text: object, field: str) -> datetime:
    """An ISO 8601 wall time without an offset, e.g. ``2027-03-14T02:30:00``."""
    if not isinstance(text, str):
        raise bad(field, "must be an ISO 8601 local time such as '2027-03-14T09:00:00'")
    if _OFFSET_RE.search(text) and not _LOCAL_RE.match(text):
        raise bad(field, "a local wall time carries no offset or Z; give the zone in timeZone")
    if not _LOCAL_RE.match(text):
        raise bad(field, "must be an ISO 8601 local time such as '2027-03-14T09:00:00'")
    try:
        return datetime.fromisoformat(text)
    except ValueError as e:
        raise bad(field, str(e)) from e


def parse_dst_policy(value: object) -> DstPolicy:
    if not isinstance(value, dict):
        raise bad("dstPolicy", 'must be an object such as {"gap": "shift", "overlap": "first"}')
    extra = sorted(set(value) - {"gap", "overlap"})
    if extra:
        raise bad("dstPolicy", f"unknown key {extra[0]!r}")
    try:
        return DstPolicy(Gap(value.get("gap", Gap.SHIFT.value)),
                         Overlap(value.get("overlap", Overlap.FIRST.value)))
    except ValueError as e:
        raise bad("dstPolicy", "gap is 'shift' or 'skip'; overlap is 'first', 'second' or "
                  "'both'") from e


def parse_exdates(value: object) -> tuple[datetime, ...]:
    if not isinstance(value, list) or len(value) > MAX_EXDATES:
        raise bad("exdates", f"must be a list of at most {MAX_EXDATES} local wall times")
    return tuple(sorted({parse_local_time(v, "exdates") for v in value}))


@dataclass(frozen=True, slots=True)
class Reparse:
    """A ``Retime``: the request's time fields read again in the zone and locale a profile
    gives (zone None: the request's own). A class, not a closure, so that a request parsed
    in the costly pool's worker can come back (``app/costly_pool.py``)."""

    body: dict[str, Any]
    now_ms: int

    def __call__(self, zone: str | None, locale: str | None) -> TimeRequest:
        body = self.body if zone is None else {**self.body, "timeZone": zone}
        return parse_time_fields(body, self.now_ms, locale=locale)
