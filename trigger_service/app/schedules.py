"""When a new (or edited) trigger fires: a plain instant, a wall time in a zone, or the first
occurrence of a recurring rule. No HTTP here; the request's fields arrive parsed.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime

from trigger_service.app.cpu_shares import metered
from trigger_service.core.errors import FireAtOutOfRange, InvalidRequest, NonexistentLocalTime
from trigger_service.core.time.catchup import CatchUp
from trigger_service.core.time.occurrence import Occurrence
from trigger_service.core.time.recurrence import (
    Recurrence,
    RuleKind,
    occurrences,
    parse_rule,
    shortest_interval_s,
)
from trigger_service.core.time.series import first_occurrence, first_step, search_limit
from trigger_service.core.time.timing import DAY_MS, WALL_MAX_MS, WALL_MIN_MS, datetime_to_ms
from trigger_service.core.time.zones import (
    MAX_UTC_OFFSET,
    UTC_ZONE,
    DstPolicy,
    Gap,
    load_zone,
    wall_of,
)

MAX_UTC_OFFSET_MS = int(MAX_UTC_OFFSET.total_seconds() * 1000)


@dataclass(frozen=True, slots=True)
class TimeRequest:
    """The time fields of a request, each checked for shape only."""

    at_ms: int | None = None  # from delaySeconds or fireAt
    at_field: str = "fireAt"  # which of the two (errors name it)
    local_time: datetime | None = None  # naive wall time (localTime)
    time_zone: str | None = None
    rule_kind: RuleKind | None = None
    rule_text: object = None
    dst: DstPolicy = field(default_factory=DstPolicy)
    exdates: tuple[datetime, ...] = ()
    # The field the others were read from (``when``), or None: errors then name it.
    source: str | None = None
    catch_up: CatchUp | None = None  # a recurring rule's (None: the default)


@dataclass(frozen=True, slots=True)
class FirstFire:
    """A request's first fire time, with its schedule and first occurrence (None: a
    plain instant)."""

    fire_at_ms: int
    schedule: Recurrence | None = None
    occurrence: Occurrence | None = None


def schedule_of(req: TimeRequest) -> Recurrence | None:
    """The schedule a request describes (None: a plain instant). Raises ``InvalidRequest``
    or ``FireAtOutOfRange``."""
    if req.rule_kind is None and req.local_time is None:
        return None
    zone_name = req.time_zone or UTC_ZONE
    tz = load_zone(zone_name)
    if req.rule_kind is None:
        assert req.local_time is not None
        return Recurrence(RuleKind.ONCE, "", zone_name, req.local_time, req.dst)
    if req.local_time is not None:
        dtstart = req.local_time
    else:
        assert req.at_ms is not None
        if not WALL_MIN_MS <= req.at_ms <= WALL_MAX_MS:  # no wall time to start a rule at
            raise FireAtOutOfRange(f"{req.at_field}: outside the years 1 to 9999",
                                   field=req.at_field)
        dtstart = wall_of(req.at_ms, tz)
    rule = parse_rule(req.rule_kind, req.rule_text, tz, dtstart)
    return Recurrence(req.rule_kind, rule, zone_name, dtstart, req.dst, req.exdates,
                      req.catch_up or CatchUp())


def first_fire(req: TimeRequest, *, now_ms: int, horizon_days: int,
               min_interval_s: int) -> FirstFire:
    """The first fire time of a request received at ``now_ms``. Raises ``InvalidRequest``,
    ``FireAtOutOfRange`` or ``NonexistentLocalTime``. Metered against the request's caller's
    CPU share (``app/cpu_shares.py``)."""
    with metered(), _naming(req.source), _in_range(req):
        return _first_fire(req, now_ms=now_ms, horizon_days=horizon_days,
                           min_interval_s=min_interval_s)


@contextmanager
def _naming(source: str | None) -> Iterator[None]:
    """Errors about fields read from ``source`` (``when``) name ``source``: the caller never
    sent the field the check is about."""
    try:
        yield
    except (InvalidRequest, FireAtOutOfRange, NonexistentLocalTime) as e:
        if source is None or e.extra.get("field") == source:
            raise
        raise type(e)(f"{source}: read as {e.message}", field=source) from e


@contextmanager
def _in_range(req: TimeRequest) -> Iterator[None]:
    """A wall time near the year 9999 plus the search horizon is past ``datetime.max``: a
    400 naming the field, never a 500."""
    try:
        yield
    except OverflowError as e:
        name = "localTime" if req.local_time is not None else req.at_field
        raise InvalidRequest(f"{name}: too far ahead, beyond the range of supported times "
                             "(years 1 to 9999)", field=name) from e


def _first_fire(req: TimeRequest, *, now_ms: int, horizon_days: int,
                min_interval_s: int) -> FirstFire:
    rec = schedule_of(req)
    if rec is None:
        assert req.at_ms is not None
        _within_horizon(req.at_ms, now_ms, horizon_days, req.at_field)
        return FirstFire(max(req.at_ms, now_ms))
    if rec.kind is RuleKind.ONCE:
        return _first_fire_once(rec, now_ms, horizon_days)
    return _first_fire_series(rec, now_ms, horizon_days, min_interval_s)


def preview(req: TimeRequest, *, count: int, after_ms: int | None, now_ms: int,
            horizon_days: int, min_interval_s: int) -> list[int]:
    """The first ``count`` fire instants from DTSTART (or strictly after ``after_ms``), after
    the DST policy, within the horizon from there. Validates the rule like
    :func:`first_fire`; a rule never depends on ``now_ms`` (only ``delaySeconds`` and
    ``when`` do); a single instant is refused past the horizon from now as registration
    refuses it (a huge ``delaySeconds`` is no date to show). Metered like
    :func:`first_fire`."""
    with metered(), _naming(req.source), _in_range(req):
        return _preview(req, count=count, after_ms=after_ms, now_ms=now_ms,
                        horizon_days=horizon_days, min_interval_s=min_interval_s)


def _preview(req: TimeRequest, *, count: int, after_ms: int | None, now_ms: int,
             horizon_days: int, min_interval_s: int) -> list[int]:
    rec = schedule_of(req)
    if rec is None:
        assert req.at_ms is not None
        _within_horizon(req.at_ms, now_ms, horizon_days, req.at_field)
        return [req.at_ms] if after_ms is None or req.at_ms > after_ms else []
    start_ms = datetime_to_ms(rec.dtstart.replace(tzinfo=UTC)) - MAX_UTC_OFFSET_MS
    limit = search_limit(rec, max(start_ms, after_ms or start_ms), horizon_days)
    if rec.kind is RuleKind.ONCE:
        _first_fire_once(rec, start_ms, horizon_days)  # a gap under "skip" is refused here too
    out: list[int] = []
    # From the first instant after ``after_ms``: a fixed-step rule starts there, not at DTSTART.
    for occ in occurrences(rec, limit=limit,
                           not_before_ms=None if after_ms is None else after_ms + 1):
        out.append(occ.at_ms)
        if len(out) >= count:
            break
    # After the expansion: a rule with no instance from DTSTART has no interval to check, and
    # one that never matches is walked once, not twice.
    if rec.kind is not RuleKind.ONCE and (out or after_ms is not None):
        _check_interval(rec, limit, min_interval_s)
    return out


def _first_fire_once(rec: Recurrence, now_ms: int, horizon_days: int) -> FirstFire:
    occ = first_occurrence(rec, not_before_ms=-(2**62), horizon_days=horizon_days)
    if occ is None:
        assert rec.dst.gap is Gap.SKIP
        raise NonexistentLocalTime(
            f"localTime: {rec.dtstart.isoformat()} does not exist in {rec.time_zone} (a DST "
            "gap) and dstPolicy.gap is 'skip'", field="localTime")
    _within_horizon(occ.at_ms, now_ms, horizon_days, "localTime")
    # A wall time in the past fires now, like a past fireAt.
    return FirstFire(max(occ.at_ms, now_ms), rec, occ)


def _first_fire_series(rec: Recurrence, now_ms: int, horizon_days: int,
                       min_interval_s: int) -> FirstFire:
    field_name = rec.kind.value
    # Whole seconds: an occurrence in the second the request arrived still fires. The
    # schedule is stored anchored: a DTSTART far back is not expanded from again. Looked for
    # before the interval is checked: a rule that never matches is walked once, not twice.
    first = first_step(rec, not_before_ms=now_ms - now_ms % 1000, horizon_days=horizon_days)
    occ = first.occurrence
    if occ is None:
        raise InvalidRequest(f"{field_name}: no occurrence within {horizon_days} days "
                             "(TRIGGER_API_MAX_FIRE_AHEAD_DAYS)", field=field_name)
    _check_interval(rec, search_limit(rec, now_ms, horizon_days), min_interval_s)
    rec = first.schedule
    _within_horizon(occ.at_ms, now_ms, horizon_days, field_name)
    return FirstFire(occ.at_ms, rec, occ)


def _check_interval(rec: Recurrence, limit: datetime, min_interval_s: int) -> None:
    shortest = shortest_interval_s(rec, limit)
    if shortest is not None and shortest < min_interval_s:
        raise InvalidRequest(
            f"{rec.kind.value}: occurrences {shortest:g} s apart; at least {min_interval_s} s "
            "(TRIGGER_API_MIN_RECURRENCE_INTERVAL_S) is required", field=rec.kind.value)


def _within_horizon(at_ms: int, now_ms: int, horizon_days: int, field_name: str) -> None:
    if at_ms - now_ms > horizon_days * DAY_MS:
        raise FireAtOutOfRange(f"{field_name}: at most {horizon_days} days ahead is accepted",
                               field=field_name)
