"""Anchors: where a series' expansion restarts instead of DTSTART, so a step costs the same
on the first day and after a year.

An :class:`Anchor` is one of the rule's wall instances (before EXDATEs are left out) and its
index (0 = the first the rule yields from DTSTART). Expanding from it yields exactly the
instances the expansion from DTSTART yields from that point: every rule part keeps its phase
because the anchor is an instance (the time of day, the weekday, the day of the month that
DTSTART implies are the anchor's too, and its period is DTSTART's plus a whole number of
INTERVALs); COUNT is reduced by the index; UNTIL and EXDATEs are wall times and stay; a cron
expression matches the same minutes from any start.

What an anchor leaves out are the wall times before it, so it may only be used for a cursor
none of them can reach: with ``lo`` the zone's smallest UTC offset
(:func:`trigger_service.core.time.zone_offsets.offset_bounds`), a wall time ``W`` resolves to at
most ``W - lo``, so every wall time before ``anchor`` resolves strictly before
``anchor - lo``. :func:`usable` checks that bound against the cursor; a series re-anchors at
each step on the latest instance that satisfies it (:class:`Tracker`).

Pure: no I/O, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

from croniter import CroniterError, croniter

from trigger_service.core.time.rule_walk import Walk
from trigger_service.core.time.timing import ms_to_datetime
from trigger_service.core.time.zone_offsets import offset_bounds

# Rules whose instances are DTSTART plus whole steps (no BY* part narrows or multiplies them):
# an anchor for any time is computed, not expanded to.
_STEP_UNITS = {"SECONDLY": timedelta(seconds=1), "MINUTELY": timedelta(minutes=1),
               "HOURLY": timedelta(hours=1), "DAILY": timedelta(days=1),
               "WEEKLY": timedelta(weeks=1)}
_NEUTRAL_PARTS = {"FREQ", "INTERVAL", "COUNT", "UNTIL", "WKST"}
NO_BOUND = -(2**62)  # before every instant: no cursor, no lower bound


@dataclass(frozen=True, slots=True)
class Anchor:
    """A wall instance of the rule (naive, in the rule's zone) and its index."""

    wall: datetime
    index: int

    def to_dict(self) -> dict[str, object]:
        return {"wall": self.wall.isoformat(), "index": self.index}

    @classmethod
    def from_dict(cls, d: Any) -> Anchor | None:
        """The anchor ``d`` describes, or None (absent or unreadable: expansion then starts
        at DTSTART, which is always right)."""
        if not isinstance(d, dict):
            return None
        try:
            return cls(datetime.fromisoformat(d["wall"]), int(d["index"]))
        except (KeyError, TypeError, ValueError):
            return None


def bound_wall(bound_ms: int) -> datetime:
    """The instant ``bound_ms`` as a naive UTC datetime (what a wall time minus an offset is
    compared with)."""
    return ms_to_datetime(bound_ms).astimezone(UTC).replace(tzinfo=None)


def usable(anchor: Anchor, zone_name: str, bound_ms: int) -> bool:
    """May expansion start at ``anchor`` when only occurrences at or after ``bound_ms`` (or
    keys after a cursor at ``bound_ms``) are wanted? Every wall time before ``anchor`` then
    resolves strictly before ``bound_ms``."""
    lo, _ = offset_bounds(zone_name)
    return anchor.wall - lo <= bound_wall(bound_ms)


def fixed_step(rule: str) -> timedelta | None:
    """The constant distance between a normalized RRULE's instances, or None when the rule
    has parts that make it vary (BYDAY, BYMONTHDAY, BYSETPOS, ...; MONTHLY, YEARLY)."""
    parts = dict(p.split("=", 1) for p in rule.split(";") if "=" in p)
    if not set(parts) <= _NEUTRAL_PARTS or parts.get("FREQ") not in _STEP_UNITS:
        return None
    try:
        interval = int(parts.get("INTERVAL", "1"))
    except ValueError:
        return None
    return _STEP_UNITS[parts["FREQ"]] * interval if interval > 0 else None


def fast_forward(rule: str, dtstart: datetime, zone_name: str, bound_ms: int) -> Anchor | None:
    """The latest instance usable for ``bound_ms`` of a fixed-step rule (DTSTART plus whole
    steps, DTSTART itself an instance), computed without expanding; None when the rule is not
    fixed-step or DTSTART is not before that time."""
    step = fixed_step(rule)
    if step is None:
        return None
    lo, _ = offset_bounds(zone_name)
    latest = bound_wall(bound_ms) + lo  # the latest wall an anchor may have
    if latest <= dtstart:
        return None
    n = (latest - dtstart) // step
    return Anchor(dtstart + n * step, n) if n > 0 else None


def cron_fast_forward(expr: str, dtstart: datetime, zone_name: str, bound_ms: int,
                      start: Anchor | None = None, walk: Walk | None = None) -> Anchor | None:
    """The latest match usable for ``bound_ms`` of a five-field cron expression, its index
    counted day by day from DTSTART or from ``start`` (an earlier anchor: the count then
    costs the days since it, not the series' age); None for expressions this cannot count
    exactly (``L``, ``#``, a day-of-month and a day-of-week both given) and for one with no
    match within croniter's 50 years before that time. Each day counted is charged to
    ``walk`` (``RuleTooCostly`` past its budget)."""
    fields = _plain_fields(expr)
    if fields is None:
        return None
    lo, _ = offset_bounds(zone_name)
    latest = bound_wall(bound_ms) + lo
    # Expansion yields the matches after origin; the first is first_index.
    origin = (start.wall if start else dtstart) - timedelta(seconds=1)
    first_index = start.index if start else 0
    if latest - origin < timedelta(days=2):
        return None
    minute_of = latest.replace(second=0, microsecond=0) + timedelta(minutes=1)
    try:
        wall: datetime = croniter(expr, minute_of).get_prev(datetime)  # the last match <= it
    except CroniterError:
        return None  # none within 50 years (an impossible date such as February 30)
    if wall <= origin:
        return None
    minutes, hours, doms, months, dows = fields
    times = sorted(h * 60 + m for h in hours or range(24) for m in minutes or range(60))

    def matches(d: date) -> bool:
        return ((not months or d.month in months) and (not doms or d.day in doms)
                and (not dows or (d.weekday() + 1) % 7 in dows))

    def later(t: datetime, *, strictly: bool) -> int:  # the matches of t's day after t
        if not matches(t.date()):
            return 0
        start = datetime.combine(t.date(), datetime.min.time())
        return sum(1 for x in times
                   if (start + timedelta(minutes=x) > t if strictly
                       else start + timedelta(minutes=x) >= t))

    # The matches after origin and before wall: origin's day, the days up to wall's, less
    # wall's day from wall on.
    first_day, last_day = origin.date(), wall.date()
    if walk is not None:
        walk.charge((last_day - first_day).days)
    index = first_index + later(origin, strictly=True) - later(wall, strictly=False)
    day = first_day + timedelta(days=1)
    while day <= last_day:
        index += len(times) if matches(day) else 0
        day += timedelta(days=1)
    return Anchor(wall, index)


def _plain_fields(expr: str) -> tuple[list[int], ...] | None:
    """croniter's expansion of ``expr`` as five lists of integers (empty: any), or None."""
    raw = expr.split()
    it = croniter(expr, datetime(2000, 1, 1))
    if len(raw) != 5 or "*" not in (raw[2], raw[4]) or it.nth_weekday_of_month:
        return None
    out: list[list[int]] = []
    for values in it.expanded[:5]:
        if values == ["*"]:
            out.append([])
        elif all(isinstance(v, int) for v in values):
            out.append([int(v) for v in values])
        else:
            return None
    return tuple(out)


class Tracker:
    """Records the instances an expansion walks and names the latest usable for the cursor
    it ends on: the series' next anchor. Only the instances that might still be it are kept
    (those after ``bound_ms``'s limit; of the earlier ones only the last)."""

    def __init__(self, zone_name: str, bound_ms: int) -> None:
        self._lo, _ = offset_bounds(zone_name)
        # Usable for every cursor at or after bound_ms (nothing is, without a bound).
        self._sure = datetime.min if bound_ms <= NO_BOUND else bound_wall(bound_ms) + self._lo
        self._best: Anchor | None = None
        self._recent: list[Anchor] = []

    def saw(self, anchor: Anchor) -> None:
        if anchor.wall <= self._sure:
            self._best = anchor
            self._recent.clear()
        else:
            self._recent.append(anchor)

    def anchor_for(self, cursor_ms: int) -> Anchor | None:
        """The latest instance seen that is usable for ``cursor_ms`` (None: none was)."""
        latest = bound_wall(cursor_ms) + self._lo
        best = self._best
        for a in self._recent:
            if a.wall > latest:
                break
            best = a
        return best
