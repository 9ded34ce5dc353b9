"""A bound on the work of expanding one rule: every expansion (a *walk*) carries a budget of
steps, and stops at its limit even when the rule yields nothing on the way.

python-dateutil checks an RRULE's UNTIL only against the instances it yields: a rule that
never matches (``FREQ=DAILY;BYMONTH=2;BYMONTHDAY=30``) walks its periods to the year 9999,
seconds to a minute of CPU. :class:`_CountingIterinfo` (installed once, as dateutil's period
helper) sees each period dateutil is about to look at, for the rules a :class:`Walk` is
attached to (:func:`attach`; others are untouched):

- a period starting after the walk's last day ends the walk, as UNTIL would have;
- each period costs a step plus a step per day it filters, and each wall time a sub-daily rule
  advances between candidate times (the search for the next valid minute or second) a step;
  the walk's own loop adds a step per instance it yields.

A walk over ``max_steps`` raises :class:`~trigger_service.core.errors.RuleTooCostly` naming the
rule's field: a rule that yields nothing soon enough, or that is expanded from a start too far
back, is refused (a request) or its series ends (a step after a fire), never an unbounded loop.
Cron expressions are walked by croniter, which gives up after 50 years without a match; their
walks charge ten steps per instance and one per day between instances.

Pure: no I/O, no clock; the counts are deterministic.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import date, datetime
from typing import Any

import dateutil.rrule as _dateutil

from trigger_service.core.errors import RuleTooCostly

# Budgets, in steps (a step is about a microsecond of CPU here). A request's walk stays well
# under this for any rule that matches within the 3660-day horizon (a never-matching daily
# rule: 2 steps a day); a series' step after a fire gets more room, so that a schedule stored
# without an anchor, expanded from a start long ago once, is not ended by the bound.
REQUEST_STEPS = 20_000
SERIES_STEPS = 2_000_000
_CRON_INSTANCE_STEPS = 10  # a preview of 1,000 cron instances stays within REQUEST_STEPS
_WALK_ATTR = "_trigger_service_walk"


class Walk:
    """The budget of one expansion: ``max_steps`` in all, and no period after ``last_day``
    (None: no such stop). ``field`` (``rrule`` or ``cron``) is what an error names."""

    __slots__ = ("field", "last_day", "max_steps", "used")

    def __init__(self, field: str, max_steps: int, last_day: date | None = None) -> None:
        self.field = field
        self.max_steps = max_steps
        self.last_day = last_day
        self.used = 0

    def charge(self, steps: int) -> None:
        """Spend ``steps``; raises ``RuleTooCostly`` once more than ``max_steps`` are spent."""
        self.used += steps
        if self.used > self.max_steps:
            raise RuleTooCostly(
                f"{self.field}: expanding the rule took more than {self.max_steps:,} steps "
                "(periods, days and instances looked at) before reaching the time wanted: it "
                "matches too rarely, or starts too far back; give a start nearer to now or a "
                "rule that matches more often", field=self.field)


class PastLastDay(Exception):
    """Raised inside dateutil's iteration when a period starts after the walk's last day: the
    expansion is over (caught by the walk's loop, never further)."""


def attach(rule: _dateutil.rrule, walk: Walk) -> _dateutil.rrule:
    """``rule`` with ``walk`` bounding its iterations (dateutil rules accept attributes)."""
    setattr(rule, _WALK_ATTR, walk)
    return rule


class _CountingIterinfo(_dateutil._iterinfo):  # type: ignore[misc]
    """dateutil's per-iteration helper, charging the attached walk (if any) for each period
    and each sub-daily advance. The parent keeps its state in ``__slots__``; this subclass
    adds a ``__dict__`` for its own two attributes."""

    def __init__(self, rrule: Any) -> None:
        super().__init__(rrule)
        self.walk: Walk | None = getattr(rrule, _WALK_ATTR, None)
        self.last_time_s: int | None = None

    def _period(self, first_day: date, got: Any) -> Any:
        walk = self.walk
        if walk is not None:
            if walk.last_day is not None and first_day > walk.last_day:
                raise PastLastDay
            _, start, end = got
            walk.charge(1 + end - start)
        return got

    def ydayset(self, year: int, month: int, day: int) -> Any:
        return self._period(date(year, 1, 1), super().ydayset(year, month, day))

    def mdayset(self, year: int, month: int, day: int) -> Any:
        return self._period(date(year, month, 1), super().mdayset(year, month, day))

    def wdayset(self, year: int, month: int, day: int) -> Any:
        return self._period(date(year, month, day), super().wdayset(year, month, day))

    def ddayset(self, year: int, month: int, day: int) -> Any:
        return self._period(date(year, month, day), super().ddayset(year, month, day))

    def _advance(self, now_s: int, step_s: int, searching: bool) -> None:
        """Charge the candidate times dateutil stepped through since the last one: with
        BYHOUR (or BYMINUTE) it searches, up to a day of them, for the next valid one;
        without, each step is one (an overestimate after a filtered day's jump: at most a
        day's candidates)."""
        if self.walk is not None:
            last, self.last_time_s = self.last_time_s, now_s
            moved = (now_s - last) % 86_400 or 86_400 if searching and last is not None else 0
            self.walk.charge(max(1, moved // step_s))

    def mtimeset(self, hour: int, minute: int, second: int) -> Any:
        rr = self.rrule
        self._advance(hour * 3600 + minute * 60, 60 * rr._interval, bool(rr._byhour))
        return super().mtimeset(hour, minute, second)

    def stimeset(self, hour: int, minute: int, second: int) -> Any:
        rr = self.rrule
        self._advance(hour * 3600 + minute * 60 + second, rr._interval,
                      bool(rr._byhour or rr._byminute))
        return super().stimeset(hour, minute, second)


# dateutil builds its helper by this module-level name at each iteration's start; rules
# without a walk behave exactly as before.
_dateutil._iterinfo = _CountingIterinfo


def walls(rule: _dateutil.rrule, walk: Walk) -> Iterator[datetime]:
    """``rule``'s instances (naive wall times) under ``walk``: each costs a step; a period
    past ``walk.last_day`` ends them; dateutil's own refusal of an empty combination of
    INTERVAL and BYHOUR/BYMINUTE met while iterating is ``InvalidRequest`` too."""
    try:
        for wall in attach(rule, walk):
            walk.charge(1)
            yield wall
    except PastLastDay:
        return
    except ValueError as e:  # "Invalid combination of interval and byhour ..." mid-iteration
        raise RuleTooCostly(f"{walk.field}: {e}", field=walk.field) from e


def cron_charge(walk: Walk, previous: datetime, wall: datetime) -> None:
    """A cron instance's cost: croniter takes about ten times dateutil's time per instance,
    and a step more per day it searched since ``previous``."""
    walk.charge(_CRON_INSTANCE_STEPS + max(0, (wall - previous).days))
