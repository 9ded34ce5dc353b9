"""A scheduled trigger's occurrences, one at a time: the first when it is created or edited,
the next when an occurrence finishes. Pure: every "now" is an argument.

Only the next occurrence is ever stored (in the trigger's own row: ``fire_at_ms`` and the
occurrence fields); finishing one and scheduling the next is a single LWT on that row, so a
crash at any point neither loses the series nor fires an occurrence twice beyond what
at-least-once delivery allows.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from trigger_service.core.model import Status, Trigger, route_for
from trigger_service.core.recurrence import Occurrence, Recurrence, occurrences, wall_instances
from trigger_service.core.timing import DAY_MS, datetime_to_ms
from trigger_service.core.zones import TZDATA_VERSION, resolve, wall_of


def search_limit(rec: Recurrence, from_ms: int, horizon_days: int) -> datetime:
    """The latest wall time looked at: ``horizon_days`` after ``from_ms`` (the horizon of
    ``TRIGGER_MAX_FIRE_AHEAD_DAYS``; a rule with nothing before it counts as ended)."""
    return wall_of(from_ms + horizon_days * DAY_MS, rec.zone)


def first_occurrence(rec: Recurrence, *, not_before_ms: int,
                     horizon_days: int) -> Occurrence | None:
    """The first occurrence at or after ``not_before_ms`` (earlier ones are in the past),
    looked for up to the horizon after ``not_before_ms`` or DTSTART, whichever is later."""
    start_ms = datetime_to_ms(rec.dtstart.replace(tzinfo=UTC))
    limit = search_limit(rec, max(not_before_ms, start_ms), horizon_days)
    for occ in occurrences(rec, limit=limit):
        if occ.at_ms >= not_before_ms:
            return occ
    return None


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
               direct_max_delay_s: int) -> Trigger | None:
    """The trigger moved on to its next occurrence once the current one finished (``fired``,
    or given up on), or None when the schedule has no more. Occurrences that would already
    be more than a day late (a series that was stuck) are passed over, not fired in a burst.
    The cursor is the scheduled instant (``Trigger.occurrence_key``): jitter never changes
    which occurrences a series steps through."""
    if t.schedule is None:
        return None
    counted = replace(t, occurrence_seq=t.occurrence_seq + 1, channel_states=(),
                      occurrences_fired=t.occurrences_fired + (1 if fired else 0),
                      fired_at_ms=now_ms if fired else t.fired_at_ms)
    limit = search_limit(t.schedule, max(t.scheduled_at_ms, now_ms), horizon_days)
    for occ in occurrences(t.schedule, limit=limit, after=t.occurrence_key):
        if occ.at_ms >= now_ms - DAY_MS:
            return at_occurrence(counted, occ, now_ms, direct_max_delay_s)
    return None


def finished(t: Trigger, *, fired: bool, now_ms: int, error: str | None) -> Trigger:
    """The terminal state of ``t`` once its last occurrence finished."""
    if fired:
        return t.with_status(Status.FIRED, fired_at_ms=now_ms, claim_id=None,
                             next_attempt_at_ms=None, last_error=None,
                             occurrence_seq=t.occurrence_seq + 1,
                             occurrences_fired=t.occurrences_fired + 1)
    return t.with_status(Status.FAILED, claim_id=None, last_error=error,
                         next_attempt_at_ms=None, occurrence_seq=t.occurrence_seq + 1)


def same_occurrence(t: Trigger, rec: Recurrence, *, now_ms: int, horizon_days: int,
                    not_before_ms: int | None = None) -> Occurrence | None:
    """``t``'s pending occurrence resolved again under ``rec`` (its rule in the zone rules in
    use, or in another zone: the same wall instance, the same DST policy): the first wall
    instance from ``t.occurrence_index`` on, the later instant of two if ``t`` was the
    second. With ``not_before_ms`` the first such occurrence not before it (a wall time
    already past in a new zone is not fired late: the next one is). None: that wall time no
    longer exists (a gap under "skip"), or nothing is left before the horizon."""
    limit = search_limit(rec, max(t.scheduled_at_ms, now_ms), horizon_days)
    for index, wall in enumerate(wall_instances(rec, limit)):
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
