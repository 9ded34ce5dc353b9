"""Recurrence: an RFC 5545 RRULE or a five-field cron expression, expanded in a zone's wall
time and resolved to instants by the trigger's DST policy.

The order of operations is the contract:

1. the rule yields wall times (naive datetimes) from DTSTART, the trigger's first time read in
   its zone; DTSTART anchors the time of day and the first period, and is an occurrence only
   if it matches the rule (python-dateutil's reading, not RFC 5545's ``compatible`` one);
   invalid dates (Feb 30) never appear; COUNT and UNTIL count these wall instances;
2. ``exdates`` (wall times) are left out — each still used its COUNT;
3. each remaining wall time is resolved by :func:`trigger_service.core.time.zones.resolve`: none
   (a gap under ``skip``), one, or two instants (an overlap under ``both``).

Occurrences come out in instant order. Shifting a gap can move an instant past the next wall
time's instant, so expansion buffers until no later wall time can resolve earlier (the zone's
largest UTC offset, :mod:`trigger_service.core.time.zone_offsets`). A schedule may carry an
:class:`~trigger_service.core.time.anchors.Anchor`: expansion for a cursor (or a lower bound) the
anchor is usable for starts there instead of DTSTART, with the same results. Each occurrence
is identified by ``(at_ms, index, second)``: its instant, its wall instance's index (0 = the
first the rule yields) and whether it is the later instant of an overlap fired twice; a
series' cursor is the last one of these it fired.

Pure: no I/O, no clock (``after``/``limit`` are arguments), so a preview never depends on the
day it is asked.
"""

from __future__ import annotations

import heapq
import re
import warnings
import zoneinfo
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

from croniter import CroniterError, croniter
from dateutil.rrule import rrule, rrulestr

from trigger_service.core.errors import InvalidRequest
from trigger_service.core.time.anchors import (
    NO_BOUND,
    Anchor,
    bound_wall,
    cron_fast_forward,
    fast_forward,
    usable,
)
from trigger_service.core.time.catchup import CatchUp
from trigger_service.core.time.occurrence import Occurrence
from trigger_service.core.time.rule_walk import REQUEST_STEPS, Walk, cron_charge, walls
from trigger_service.core.time.timing import datetime_to_ms
from trigger_service.core.time.zone_offsets import offset_bounds
from trigger_service.core.time.zones import (
    DstPolicy,
    Gap,
    Overlap,
    load_zone,
    resolve,
)

# An anchor this far behind the bound is worth replacing by a computed one (computing costs
# about as much as walking a day of a minutely rule).
_FAR_MS = 2 * 86_400_000
_MIN_CHECK_INSTANCES = 100  # wall instances looked at for the minimum interval
_MAX_RULE_LEN = 1_000
_PART_RE = re.compile(r"^[A-Z]+=[A-Z0-9,+\-:]+$")
_UNTIL_RE = re.compile(r"^(\d{8})(T(\d{6}))?Z$")


class RuleKind(StrEnum):
    ONCE = "once"  # one wall time (``localTime`` + ``timeZone``): DTSTART alone
    RRULE = "rrule"
    CRON = "cron"


@dataclass(frozen=True, slots=True)
class Recurrence:
    """A rule in a zone: ``dtstart`` and ``exdates`` are naive wall times in ``time_zone``.

    ``anchor`` is where a series' expansion may restart (a cache of where it got to, not part
    of what the schedule means: equal schedules may differ in it)."""

    kind: RuleKind
    rule: str  # normalized: an RRULE value without the prefix, or the five cron fields
    time_zone: str
    dtstart: datetime
    dst: DstPolicy = field(default_factory=DstPolicy)
    exdates: tuple[datetime, ...] = ()
    catch_up: CatchUp = field(default_factory=CatchUp)  # a recurring rule's (core.time.catchup)
    anchor: Anchor | None = field(default=None, compare=False)

    @property
    def zone(self) -> zoneinfo.ZoneInfo:
        return load_zone(self.time_zone)

    @property
    def recurring(self) -> bool:
        return self.kind is not RuleKind.ONCE

    def to_dict(self) -> dict[str, object]:
        """A JSON-able form (stored with the trigger); :meth:`from_dict` reads it back."""
        return {"kind": self.kind.value, "rule": self.rule, "timeZone": self.time_zone,
                "dtstart": self.dtstart.isoformat(), "gap": self.dst.gap.value,
                "overlap": self.dst.overlap.value,
                "exdates": [d.isoformat() for d in self.exdates],
                "catchUp": self.catch_up.to_json(),
                **({"anchor": self.anchor.to_dict()} if self.anchor else {})}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Recurrence:
        return cls(RuleKind(d["kind"]), d["rule"], d["timeZone"],
                   datetime.fromisoformat(d["dtstart"]),
                   DstPolicy(Gap(d["gap"]), Overlap(d["overlap"])),
                   tuple(datetime.fromisoformat(x) for x in d["exdates"]),
                   CatchUp.from_json(d.get("catchUp")), Anchor.from_dict(d.get("anchor")))


def normalize_rrule(text: object, tz: zoneinfo.ZoneInfo) -> str:
    """The RRULE value of ``text`` (``RRULE:`` prefix optional), parts upper-cased, UNTIL given
    in UTC (``...Z``) rewritten as the zone's wall time. Raises ``InvalidRequest`` (rrule)."""
    if not isinstance(text, str) or not text.strip() or len(text) > _MAX_RULE_LEN:
        raise InvalidRequest("rrule: must be an RFC 5545 RRULE value such as "
                             "'FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR'", field="rrule")
    body = text.strip()
    if body.upper().startswith("RRULE:"):
        body = body[6:]
    parts = [p.strip().upper() for p in body.split(";") if p.strip()]
    out = []
    for part in parts:
        if not _PART_RE.match(part):
            raise InvalidRequest(f"rrule: cannot parse {part!r}", field="rrule")
        name, value = part.split("=", 1)
        if name == "DTSTART":
            raise InvalidRequest("rrule: DTSTART comes from the trigger's time fields, not "
                                 "the rule", field="rrule")
        if name == "UNTIL":
            value = _until_in_zone(value, tz)
        out.append(f"{name}={value}")
    return ";".join(out)


def _until_in_zone(value: str, tz: zoneinfo.ZoneInfo) -> str:
    m = _UNTIL_RE.match(value)
    if not m:
        return value  # a local (floating) UNTIL: already wall time
    try:
        utc = datetime.strptime(m.group(1) + (m.group(3) or "000000"), "%Y%m%d%H%M%S")
    except ValueError as e:
        raise InvalidRequest(f"rrule: UNTIL {value!r} is not a valid date", field="rrule") from e
    wall = utc.replace(tzinfo=UTC).astimezone(tz).replace(tzinfo=None)
    return wall.strftime("%Y%m%dT%H%M%S")


def parse_rule(kind: RuleKind, text: object, tz: zoneinfo.ZoneInfo, dtstart: datetime) -> str:
    """Validate and normalize a rule; raises ``InvalidRequest`` naming ``rrule`` or ``cron``."""
    if kind is RuleKind.ONCE:
        return ""
    if kind is RuleKind.RRULE:
        rule = normalize_rrule(text, tz)
        _rrule(rule, dtstart)  # raises if dateutil cannot read it
        return rule
    if not isinstance(text, str) or len(text.split()) != 5 or len(text) > _MAX_RULE_LEN:
        raise InvalidRequest("cron: must be five fields: minute hour day-of-month month "
                             "day-of-week", field="cron")
    rule = " ".join(text.split())
    if not croniter.is_valid(rule):
        raise InvalidRequest(f"cron: cannot parse {rule!r}", field="cron")
    return rule


def _rrule(rule: str, dtstart: datetime) -> rrule:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # dateutil warns about COUNT with UNTIL
            parsed = rrulestr(rule, dtstart=dtstart)
    except (ValueError, TypeError, KeyError, IndexError, AttributeError) as e:
        raise InvalidRequest(f"rrule: {e}", field="rrule") from e
    if not isinstance(parsed, rrule):
        raise InvalidRequest("rrule: one RRULE value expected", field="rrule")
    return parsed


def wall_instances(rec: Recurrence, limit: datetime,
                   max_steps: int = REQUEST_STEPS) -> Iterator[datetime]:
    """The rule's wall times from ``rec.dtstart`` in order, none later than ``limit`` (the
    expansion bounded as :func:`instances`')."""
    for instance in instances(rec, limit, None, max_steps):
        yield instance.wall


def instances(rec: Recurrence, limit: datetime, start: Anchor | None,
              max_steps: int = REQUEST_STEPS) -> Iterator[Anchor]:
    """The rule's wall times with their indexes, in order, none later than ``limit``: from
    ``start`` (an instance of the rule) or, None, from DTSTART. The expansion is bounded by
    ``max_steps`` (:mod:`trigger_service.core.time.rule_walk`): raises ``RuleTooCostly``
    (naming ``rrule`` or ``cron``) past it."""
    if rec.kind is RuleKind.ONCE:
        if rec.dtstart <= limit:
            yield Anchor(rec.dtstart, 0)
        return
    first = start or Anchor(rec.dtstart, 0)
    walk = Walk(rec.kind.value, max_steps)
    found = _rrule_walls(rec, first, limit, walk) if rec.kind is RuleKind.RRULE else (
        _cron_walls(rec.rule, first.wall, limit, walk))
    for n, wall in enumerate(found):
        yield Anchor(wall, first.index + n)


def _rrule_walls(rec: Recurrence, first: Anchor, limit: datetime,
                 walk: Walk) -> Iterator[datetime]:
    # dateutil works in whole seconds; DTSTART's fraction is every occurrence's phase
    # (a rule started at 09:00:00.250 fires at .250 each time, never before its start).
    phase = timedelta(microseconds=rec.dtstart.microsecond)
    rule = _rrule(rec.rule, first.wall - phase)
    until = rule._until  # dateutil keeps the parsed UNTIL here
    count = rule._count  # ... and COUNT, which counts from DTSTART: the anchor's index used
    if count is not None and count - first.index <= 0:
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        last = min(until, limit) if until else limit
        bounded = rule.replace(until=last,
                               count=None if count is None else count - first.index)
    walk.last_day = last.date()
    for wall in walls(bounded, walk):
        yield wall + phase


def _cron_walls(rule: str, first: datetime, limit: datetime,
                walk: Walk) -> Iterator[datetime]:
    previous = first - timedelta(seconds=1)
    it = croniter(rule, previous)
    while True:
        try:
            wall = it.get_next(datetime)
        except CroniterError:
            return  # no match within croniter's 50 years (e.g. Feb 30): the rule is exhausted
        if wall > limit:
            return
        cron_charge(walk, previous, wall)
        previous = wall
        yield wall


def occurrences(rec: Recurrence, *, limit: datetime,
                after: tuple[int, int, bool] | None = None, not_before_ms: int | None = None,
                seen: Callable[[Anchor], None] | None = None,
                max_steps: int = REQUEST_STEPS) -> Iterator[Occurrence]:
    """The occurrences in instant order, each strictly after the cursor ``after`` (an
    :attr:`Occurrence.key`) and at or after ``not_before_ms``, from wall times up to
    ``limit``; ``seen`` is told each wall instance walked. Starts at ``rec.anchor`` (or one
    computed for a fixed-step rule) when that is usable for the bound, else at DTSTART: the
    results are the same. Raises ``RuleTooCostly`` when the expansion needs more than
    ``max_steps`` (:mod:`trigger_service.core.time.rule_walk`)."""
    bound_ms = lower_bound(after, not_before_ms)
    tz = rec.zone
    lo, hi = offset_bounds(rec.time_zone)
    # A wall time before this resolves strictly before the bound: not resolved at all.
    passed = None if bound_ms <= NO_BOUND else bound_wall(bound_ms) + lo
    excluded = set(rec.exdates)
    pending: list[Occurrence] = []
    for instance in instances(rec, limit, _start(rec, bound_ms, max_steps), max_steps):
        if seen is not None:
            seen(instance)
        wall, index = instance.wall, instance.index
        if (passed is None or wall >= passed) and wall.replace(microsecond=0) not in excluded:
            for n, at_ms in enumerate(resolve(wall, tz, rec.dst)):
                occ = Occurrence(at_ms, index, n == 1, wall)
                if (after is None or occ.key > after) and at_ms >= bound_ms:
                    heapq.heappush(pending, occ)
        if pending:
            # No wall time from here on can resolve before this bound.
            floor_ms = datetime_to_ms((wall - hi).replace(tzinfo=UTC))
            while pending and pending[0].at_ms < floor_ms:
                yield heapq.heappop(pending)
    while pending:
        yield heapq.heappop(pending)


def lower_bound(after: tuple[int, int, bool] | None, not_before_ms: int | None) -> int:
    """The earliest instant an occurrence wanted can have (``NO_BOUND``: any)."""
    return max(NO_BOUND if after is None else after[0],
               NO_BOUND if not_before_ms is None else not_before_ms)


def _start(rec: Recurrence, bound_ms: int, max_steps: int) -> Anchor | None:
    """Where expansion for ``bound_ms`` may start: the later of the schedule's anchor and a
    computed one, if usable; None: DTSTART."""
    if rec.kind is RuleKind.ONCE or bound_ms <= NO_BOUND:
        return None
    best = rec.anchor if rec.anchor and usable(rec.anchor, rec.time_zone, bound_ms) else None
    if best is None or bound_ms - datetime_to_ms(best.wall.replace(tzinfo=UTC)) > _FAR_MS:
        computed = (
            fast_forward(rec.rule, rec.dtstart, rec.time_zone, bound_ms)
            if rec.kind is RuleKind.RRULE
            else cron_fast_forward(rec.rule, rec.dtstart, rec.time_zone, bound_ms, best,
                                   Walk(rec.kind.value, max_steps)))
        if computed is not None and (best is None or computed.index > best.index):
            best = computed
    return best


def first_occurrences(rec: Recurrence, count: int, *, limit: datetime,
                      after: tuple[int, int, bool] | None = None) -> list[Occurrence]:
    out: list[Occurrence] = []
    for occ in occurrences(rec, limit=limit, after=after):
        out.append(occ)
        if len(out) >= count:
            break
    return out


def next_occurrence(rec: Recurrence, after: tuple[int, int, bool] | None,
                    limit: datetime) -> Occurrence | None:
    """The first occurrence after the cursor ``after`` (None: from the start), or None when
    the rule has none up to ``limit``."""
    return next(occurrences(rec, limit=limit, after=after), None)


def shortest_interval_s(rec: Recurrence, limit: datetime) -> float | None:
    """The smallest gap between the rule's first wall instances (None with fewer than two):
    what ``TRIGGER_API_MIN_RECURRENCE_INTERVAL_S`` is checked against."""
    prev: datetime | None = None
    best: float | None = None
    for n, wall in enumerate(wall_instances(rec, limit)):
        if prev is not None:
            gap = (wall - prev).total_seconds()
            best = gap if best is None else min(best, gap)
        prev = wall
        if n >= _MIN_CHECK_INSTANCES:
            break
    return best
