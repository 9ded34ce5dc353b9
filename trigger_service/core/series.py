"""A scheduled trigger's occurrences, one at a time: the first when it is created or edited,
the next when an occurrence finishes. Pure: every "now" is an argument.

Only the next occurrence is ever stored (in the trigger's own row: ``fire_at_ms`` and the
occurrence fields); finishing one and scheduling the next is a single LWT on that row, so a
crash at any point neither loses the series nor fires an occurrence twice beyond what
at-least-once delivery allows.

Each step re-anchors the schedule (:mod:`trigger_service.core.anchors`) on the latest wall
instance usable for the occurrence it moved to, so the next step expands from there: its cost
depends on the rule's frequency, not on the series' age. A schedule stored without an anchor
is expanded from DTSTART once, then anchored.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime

from trigger_service.core.anchors import Tracker
from trigger_service.core.model import Status, Trigger, route_for
from trigger_service.core.recurrence import (
    Occurrence,
    Recurrence,
    RuleKind,
    lower_bound,
    occurrences,
)
from trigger_service.core.timing import DAY_MS, datetime_to_ms
from trigger_service.core.zones import TZDATA_VERSION, wall_of


def search_limit(rec: Recurrence, from_ms: int, horizon_days: int) -> datetime:
    """The latest wall time looked at: ``horizon_days`` after ``from_ms`` (the horizon of
    ``TRIGGER_MAX_FIRE_AHEAD_DAYS``; a rule with nothing before it counts as ended)."""
    return wall_of(from_ms + horizon_days * DAY_MS, rec.zone)


@dataclass(frozen=True, slots=True)
class Step:
    """The occurrence a schedule moved to (None: it has no more) and the schedule anchored
    for that occurrence as its cursor."""

    occurrence: Occurrence | None
    schedule: Recurrence


def step(rec: Recurrence, *, limit: datetime, after: tuple[int, int, bool] | None = None,
         not_before_ms: int | None = None) -> Step:
    """The first occurrence strictly after the cursor ``after`` and at or after
    ``not_before_ms``, from wall times up to ``limit``; the schedule comes back re-anchored
    on the latest instance walked that is usable for that occurrence (or as it was)."""
    if rec.kind is RuleKind.ONCE:
        occ = next(occurrences(rec, limit=limit, after=after, not_before_ms=not_before_ms),
                   None)
        return Step(occ, rec)
    tracker = Tracker(rec.time_zone, lower_bound(after, not_before_ms))
    occ = next(occurrences(rec, limit=limit, after=after, not_before_ms=not_before_ms,
                           seen=tracker.saw), None)
    if occ is None:
        return Step(None, rec)
    anchor = tracker.anchor_for(occ.at_ms)
    if anchor is None or anchor.index == 0 or (rec.anchor and anchor.index <= rec.anchor.index):
        return Step(occ, rec)
    return Step(occ, replace(rec, anchor=anchor))


def first_step(rec: Recurrence, *, not_before_ms: int, horizon_days: int) -> Step:
    """The first occurrence at or after ``not_before_ms`` (earlier ones are in the past),
    looked for up to the horizon after ``not_before_ms`` or DTSTART, whichever is later, and
    the schedule anchored for it."""
    start_ms = datetime_to_ms(rec.dtstart.replace(tzinfo=UTC))
    limit = search_limit(rec, max(not_before_ms, start_ms), horizon_days)
    return step(rec, limit=limit, not_before_ms=not_before_ms)


def first_occurrence(rec: Recurrence, *, not_before_ms: int,
                     horizon_days: int) -> Occurrence | None:
    """:func:`first_step`'s occurrence."""
    return first_step(rec, not_before_ms=not_before_ms, horizon_days=horizon_days).occurrence


def at_occurrence(t: Trigger, occ: Occurrence, now_ms: int, direct_max_delay_s: int) -> Trigger:
    """``t`` pointing at ``occ``: PENDING, no attempts yet, routed by how far ahead it is."""
    return replace(
        t, status=Status.PENDING, fire_at_ms=occ.at_ms, occurrence_index=occ.index,
        occurrence_second=occ.second, attempts=0, last_error=None, claim_id=None,
        claimed_at_ms=None, next_attempt_at_ms=None, tzdata_version=TZDATA_VERSION,
        route=route_for(occ.at_ms, now_ms, direct_max_delay_s))


def next_after(t: Trigger, *, fired: bool, now_ms: int, horizon_days: int,
               direct_max_delay_s: int) -> Trigger | None:
    """The trigger moved on to its next occurrence once the current one finished (``fired``,
    or given up on), or None when the schedule has no more. Occurrences that would already
    be more than a day late (a series that was stuck) are passed over, not fired in a burst.
    """
    if t.schedule is None:
        return None
    counted = replace(t, occurrence_seq=t.occurrence_seq + 1, channel_states=(),
                      occurrences_fired=t.occurrences_fired + (1 if fired else 0),
                      fired_at_ms=now_ms if fired else t.fired_at_ms)
    limit = search_limit(t.schedule, max(t.fire_at_ms, now_ms), horizon_days)
    moved = step(t.schedule, limit=limit, after=t.occurrence_key, not_before_ms=now_ms - DAY_MS)
    if moved.occurrence is None:
        return None
    return at_occurrence(replace(counted, schedule=moved.schedule), moved.occurrence, now_ms,
                         direct_max_delay_s)


def finished(t: Trigger, *, fired: bool, now_ms: int, error: str | None) -> Trigger:
    """The terminal state of ``t`` once its last occurrence finished."""
    if fired:
        return t.with_status(Status.FIRED, fired_at_ms=now_ms, claim_id=None,
                             next_attempt_at_ms=None, last_error=None,
                             occurrence_seq=t.occurrence_seq + 1,
                             occurrences_fired=t.occurrences_fired + 1)
    return t.with_status(Status.FAILED, claim_id=None, last_error=error,
                         next_attempt_at_ms=None, occurrence_seq=t.occurrence_seq + 1)
