"""A scheduled trigger's occurrences, one at a time: the first when it is created or edited,
the next when an occurrence finishes. Pure: every "now" is an argument.

Only the next occurrence is ever stored (in the trigger's own row: ``fire_at_ms`` and the
occurrence fields); finishing one and scheduling the next is a single LWT on that row, so a
crash at any point neither loses the series nor fires an occurrence twice beyond what
at-least-once delivery allows.

Each step re-anchors the schedule (:mod:`trigger_service.core.time.anchors`) on the latest wall
instance usable for the occurrence it moved to, so the next step expands from there: its cost
depends on the rule's frequency, not on the series' age. A schedule stored without an anchor
is expanded from DTSTART once, then anchored.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from trigger_service.core.deadlines import beyond_expiry
from trigger_service.core.errors import RuleTooCostly
from trigger_service.core.model import Status, Trigger, route_for
from trigger_service.core.time.anchors import Tracker
from trigger_service.core.time.catchup import MISSED_TOLERANCE_MS, CatchUpPolicy, Pick, pick
from trigger_service.core.time.occurrence import Occurrence
from trigger_service.core.time.recurrence import (
    Recurrence,
    RuleKind,
    instances,
    lower_bound,
    occurrences,
)
from trigger_service.core.time.rule_walk import REQUEST_STEPS, SERIES_STEPS
from trigger_service.core.time.timing import DAY_MS, datetime_to_ms
from trigger_service.core.time.zones import TZDATA_VERSION, resolve, wall_of


def search_limit(rec: Recurrence, from_ms: int, horizon_days: int) -> datetime:
    """The latest wall time looked at: ``horizon_days`` after ``from_ms`` (the horizon of
    ``TRIGGER_API_MAX_FIRE_AHEAD_DAYS``; a rule with nothing before it counts as ended)."""
    return wall_of(from_ms + horizon_days * DAY_MS, rec.zone)


@dataclass(frozen=True, slots=True)
class Step:
    """The occurrence a schedule moved to (None: it has no more) and the schedule anchored
    for that occurrence as its cursor."""

    occurrence: Occurrence | None
    schedule: Recurrence


def step_schedule(rec: Recurrence, *, limit: datetime,
                  after: tuple[int, int, bool] | None = None,
                  not_before_ms: int | None = None, max_steps: int = REQUEST_STEPS) -> Step:
    """The first occurrence strictly after the cursor ``after`` and at or after
    ``not_before_ms``, from wall times up to ``limit``; the schedule comes back re-anchored
    on the latest instance walked that is usable for that occurrence (or as it was). Raises
    ``RuleTooCostly`` past ``max_steps`` (``core.time.rule_walk``)."""
    if rec.kind is RuleKind.ONCE:
        occ = next(occurrences(rec, limit=limit, after=after, not_before_ms=not_before_ms),
                   None)
        return Step(occ, rec)
    tracker = Tracker(rec.time_zone, lower_bound(after, not_before_ms))
    occ = next(occurrences(rec, limit=limit, after=after, not_before_ms=not_before_ms,
                           seen=tracker.saw, max_steps=max_steps), None)
    if occ is None:
        return Step(None, rec)
    return Step(occ, _anchored(rec, tracker, occ))


def _anchored(rec: Recurrence, tracker: Tracker, occ: Occurrence) -> Recurrence:
    """``rec`` anchored on the latest instance ``tracker`` saw that is usable for ``occ`` as
    the cursor (or as it was: no later usable one)."""
    if rec.kind is RuleKind.ONCE:
        return rec
    anchor = tracker.anchor_for(occ.at_ms)
    if anchor is None or anchor.index == 0 or (rec.anchor and anchor.index <= rec.anchor.index):
        return rec
    return replace(rec, anchor=anchor)


def first_step(rec: Recurrence, *, not_before_ms: int, horizon_days: int) -> Step:
    """The first occurrence at or after ``not_before_ms`` (earlier ones are in the past),
    looked for up to the horizon after ``not_before_ms`` or DTSTART, whichever is later, and
    the schedule anchored for it."""
    start_ms = datetime_to_ms(rec.dtstart.replace(tzinfo=UTC))
    limit = search_limit(rec, max(not_before_ms, start_ms), horizon_days)
    return step_schedule(rec, limit=limit, not_before_ms=not_before_ms)


def first_occurrence(rec: Recurrence, *, not_before_ms: int,
                     horizon_days: int) -> Occurrence | None:
    """:func:`first_step`'s occurrence."""
    return first_step(rec, not_before_ms=not_before_ms, horizon_days=horizon_days).occurrence


def at_occurrence(t: Trigger, occ: Occurrence, now_ms: int, direct_max_delay_s: int) -> Trigger:
    """``t`` pointing at ``occ``: PENDING, no attempts yet, ``fire_at_ms`` the occurrence's
    instant plus its jitter, routed by how far ahead that is."""
    moved = replace(
        t, status=Status.PENDING, occurrence_index=occ.index,
        occurrence_second=occ.second, attempts=0, last_error=None, claim_id=None,
        claimed_at_ms=None, next_attempt_at_ms=None,
        tzdata_version=TZDATA_VERSION).jittered(occ.at_ms)
    return replace(moved, route=route_for(moved.fire_at_ms, now_ms, direct_max_delay_s))


def next_after(t: Trigger, *, fired: bool, now_ms: int, horizon_days: int,
               direct_max_delay_s: int, tolerance_ms: int = MISSED_TOLERANCE_MS
               ) -> Trigger | None:
    """The trigger moved on to its next occurrence once the current one finished (``fired``,
    or given up on), or None when the schedule has no more. Occurrences missed meanwhile (a
    long retry, a series that was stuck) are fired or passed over by the series' catch-up
    policy (``core.time.catchup``; the default fires those up to a day late, in order). The cursor
    is the scheduled instant (``Trigger.occurrence_key``): jitter never changes which
    occurrences a series steps through, and lateness is counted from the jittered instant.
    A next occurrence firing after the trigger's ``expires_at_ms`` is none (``core.deadlines``).
    """
    return next_step(t, fired=fired, now_ms=now_ms, horizon_days=horizon_days,
                     direct_max_delay_s=direct_max_delay_s, tolerance_ms=tolerance_ms)[0]


def next_step(t: Trigger, *, fired: bool, now_ms: int, horizon_days: int,
         direct_max_delay_s: int, tolerance_ms: int = MISSED_TOLERANCE_MS
         ) -> tuple[Trigger | None, Pick]:
    """``next_after``, with what the catch-up policy passed over. A rule whose next
    occurrence cannot be found within the series' step budget (``core.time.rule_walk``: one
    stored before rules were bounded, that never matches again) has none: the series ends."""
    if t.schedule is None:
        return None, Pick(None)
    try:
        return _next_step(t, fired=fired, now_ms=now_ms, horizon_days=horizon_days,
                          direct_max_delay_s=direct_max_delay_s, tolerance_ms=tolerance_ms)
    except RuleTooCostly:
        return None, Pick(None)


def _next_step(t: Trigger, *, fired: bool, now_ms: int, horizon_days: int,
               direct_max_delay_s: int, tolerance_ms: int) -> tuple[Trigger | None, Pick]:
    assert t.schedule is not None
    counted = replace(t, occurrence_seq=t.occurrence_seq + 1, channel_states=(),
                      occurrences_fired=t.occurrences_fired + (1 if fired else 0),
                      fired_at_ms=now_ms if fired else t.fired_at_ms)
    rec = t.schedule
    limit = search_limit(rec, max(t.scheduled_at_ms, now_ms), horizon_days)
    tracker = Tracker(rec.time_zone, lower_bound(t.occurrence_key, None))
    # The next occurrence's jitter (its number is the counted one's): how late it may fire.
    chosen = pick(occurrences(rec, limit=limit, after=t.occurrence_key, seen=tracker.saw,
                              max_steps=SERIES_STEPS),
                  now_ms=now_ms - counted.jitter_ms, catch_up=rec.catch_up,
                  tolerance_ms=tolerance_ms)
    if chosen.occurrence is None:
        return None, chosen
    moved = replace(counted, schedule=_anchored(rec, tracker, chosen.occurrence))
    nxt = at_occurrence(moved, chosen.occurrence, now_ms, direct_max_delay_s)
    if beyond_expiry(nxt, nxt.fire_at_ms):  # expiresAt ends the series as its rule would
        return None, Pick(None, chosen.skipped_window, chosen.skipped_policy)
    return nxt, chosen


def catch_up(t: Trigger, *, now_ms: int, horizon_days: int, direct_max_delay_s: int,
             policy: CatchUpPolicy | None = None,
             tolerance_ms: int = MISSED_TOLERANCE_MS) -> tuple[Trigger | None, Pick]:
    """Where a recurring ``t`` whose current occurrence has not fired yet goes on at
    ``now_ms`` by its catch-up policy (or ``policy``): the current occurrence itself
    (``t`` unchanged), a later one (the occurrence numbering unchanged: skipped ones are
    not counted, so a later one keeps the current one's jitter), or None when the schedule
    has no occurrence left to fire. A dispatcher about to deliver a late occurrence and a
    resume both ask this; lateness is counted from the jittered instant. A later occurrence
    not found within the series' step budget is none (as in :func:`next_step`)."""
    assert t.schedule is not None
    current = Occurrence(t.scheduled_at_ms, t.occurrence_index, t.occurrence_second)
    limit = search_limit(t.schedule, max(t.scheduled_at_ms, now_ms), horizon_days)
    later = occurrences(t.schedule, limit=limit, after=t.occurrence_key,
                        max_steps=SERIES_STEPS)
    try:
        chosen = pick(itertools.chain((current,), later), now_ms=now_ms - t.jitter_ms,
                      catch_up=t.schedule.catch_up, policy=policy, tolerance_ms=tolerance_ms)
    except RuleTooCostly:
        return None, Pick(None)
    occ = chosen.occurrence
    if occ is None:
        return None, chosen
    if occ.key == t.occurrence_key:
        return t, chosen
    nxt = replace(at_occurrence(t, occ, now_ms, direct_max_delay_s), channel_states=())
    if beyond_expiry(nxt, nxt.fire_at_ms):  # expiresAt ends the series as its rule would
        return None, Pick(None, chosen.skipped_window, chosen.skipped_policy)
    return nxt, chosen


def finished(t: Trigger, *, fired: bool, now_ms: int, error: str | None) -> Trigger:
    """The terminal state of ``t`` once its last occurrence finished."""
    if fired:
        return replace(t, status=Status.FIRED, fired_at_ms=now_ms, claim_id=None,
                             next_attempt_at_ms=None, last_error=None,
                             occurrence_seq=t.occurrence_seq + 1,
                             occurrences_fired=t.occurrences_fired + 1)
    return replace(t, status=Status.FAILED, claim_id=None, last_error=error,
                         next_attempt_at_ms=None, occurrence_seq=t.occurrence_seq + 1)


def same_occurrence(t: Trigger, rec: Recurrence, *, now_ms: int, horizon_days: int,
                    not_before_ms: int | None = None) -> Occurrence | None:
    """``t``'s pending occurrence resolved again under ``rec`` (its rule in the zone rules in
    use, or in another zone: the same wall instance, the same DST policy): the first wall
    instance from ``t.occurrence_index`` on, the later instant of two if ``t`` was the
    second. With ``not_before_ms`` the first such occurrence not before it (a wall time
    already past in a new zone is not fired late: the next one is). None: that wall time no
    longer exists (a gap under "skip"), or nothing is left before the horizon (or within
    the series' step budget)."""
    try:
        return _same_occurrence(t, rec, now_ms=now_ms, horizon_days=horizon_days,
                                not_before_ms=not_before_ms)
    except RuleTooCostly:
        return None


def _same_occurrence(t: Trigger, rec: Recurrence, *, now_ms: int, horizon_days: int,
                     not_before_ms: int | None) -> Occurrence | None:
    limit = search_limit(rec, max(t.scheduled_at_ms, now_ms), horizon_days)
    # The anchor is an earlier wall instance with its index (the same in any zone: wall
    # times): no walk from DTSTART to find ``t``'s.
    start = rec.anchor if rec.anchor and rec.anchor.index <= t.occurrence_index else None
    for instance in instances(rec, limit, start, SERIES_STEPS):
        index, wall = instance.index, instance.wall
        if index < t.occurrence_index:
            continue
        instants = resolve(wall, rec.zone, rec.dst)
        if not instants:
            if not_before_ms is None:
                return None
            continue
        second = t.occurrence_second and len(instants) > 1
        occ = Occurrence(instants[-1] if second else instants[0], index, second, wall)
        if not_before_ms is None or occ.at_ms >= not_before_ms:
            return occ
    return None
