"""The catch-up policy (core.time.catchup) and pause/resume values (core.pause), on a manual
clock: every policy, the window, the tolerance, and the series' steps that use them."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest

from trigger_service.core.errors import InvalidRequest
from trigger_service.core.model import Route, Status, Trigger
from trigger_service.core.pause import MISSED_WHILE_PAUSED, paused, resumed
from trigger_service.core.time import series
from trigger_service.core.time.catchup import (
    MISSED_TOLERANCE_MS,
    CatchUp,
    CatchUpPolicy,
    parse_catch_up,
    parse_policy,
    pick,
)
from trigger_service.core.time.occurrence import Occurrence
from trigger_service.core.time.recurrence import Recurrence, RuleKind, parse_rule
from trigger_service.core.time.zones import load_zone

T0 = 1_700_000_000_000 - 1_700_000_000_000 % 3_600_000  # on the hour
HOUR = 3_600_000
ALL, LATEST, NONE = CatchUpPolicy.ALL, CatchUpPolicy.LATEST, CatchUpPolicy.NONE


def hourly(n: int) -> list[Occurrence]:
    return [Occurrence(T0 + i * HOUR, i) for i in range(n)]


def at(o: Occurrence | None) -> int | None:
    return None if o is None else (o.at_ms - T0) // HOUR


@pytest.mark.parametrize(("policy", "expected", "skipped_policy"),
                         [(ALL, 0, 0), (LATEST, 2, 2), (NONE, 3, 3)])
def test_three_missed_in_the_window_under_each_policy(
        policy: CatchUpPolicy, expected: int, skipped_policy: int) -> None:
    now = T0 + 2 * HOUR + 30 * 60_000  # 0, 1, 2 missed; 3 not yet due
    got = pick(hourly(10), now_ms=now, catch_up=CatchUp(policy))
    assert at(got.occurrence) == expected
    assert got.skipped_policy == skipped_policy and got.skipped_window == 0


def test_an_override_wins_over_the_series_policy() -> None:
    now = T0 + 2 * HOUR + 30 * 60_000
    got = pick(hourly(10), now_ms=now, catch_up=CatchUp(ALL), policy=NONE)
    assert at(got.occurrence) == 3


@pytest.mark.parametrize("policy", list(CatchUpPolicy))
def test_occurrences_older_than_the_window_never_fire(policy: CatchUpPolicy) -> None:
    now = T0 + 5 * HOUR + 30 * 60_000  # 0..5 missed; window 2 h: 0..3 out of it
    got = pick(hourly(10), now_ms=now, catch_up=CatchUp(policy, 2 * 3600))
    assert got.skipped_window == 4
    assert at(got.occurrence) == {ALL: 4, LATEST: 5, NONE: 6}[policy]


@pytest.mark.parametrize("policy", list(CatchUpPolicy))
def test_late_by_no_more_than_the_tolerance_is_not_missed(policy: CatchUpPolicy) -> None:
    got = pick(hourly(3), now_ms=T0 + MISSED_TOLERANCE_MS, catch_up=CatchUp(policy))
    assert at(got.occurrence) == 0 and not got.skipped()
    late = pick(hourly(3), now_ms=T0 + MISSED_TOLERANCE_MS + 1, catch_up=CatchUp(policy))
    assert at(late.occurrence) == (1 if policy is NONE else 0)


def test_the_default_is_all_over_a_day() -> None:
    assert CatchUp() == CatchUp(ALL, 86_400) == parse_catch_up({})
    now = T0 + 30 * HOUR  # 0..29 missed; 0..5 more than a day late
    got = pick(hourly(40), now_ms=now, catch_up=CatchUp())
    assert at(got.occurrence) == 6 and got.skipped_window == 6


def test_a_schedule_that_ends_while_missed() -> None:
    now = T0 + 10 * HOUR
    assert at(pick(hourly(3), now_ms=now, catch_up=CatchUp(LATEST)).occurrence) == 2
    assert pick(hourly(3), now_ms=now, catch_up=CatchUp(NONE)).occurrence is None
    assert pick(hourly(3), now_ms=now, catch_up=CatchUp(ALL, 3600)).occurrence is None


@pytest.mark.parametrize("value", [[], {"policy": "some"}, {"windowSeconds": 59},
                                   {"windowSeconds": True}, {"windowSeconds": 1.5},
                                   {"policy": "all", "extra": 1}])
def test_bad_catch_up_bodies_name_the_field(value: object) -> None:
    with pytest.raises(InvalidRequest) as e:
        parse_catch_up(value)
    assert e.value.extra["field"] == "catchUp"


def test_policies_parse_and_round_trip() -> None:
    assert parse_policy("latest") is LATEST
    with pytest.raises(InvalidRequest):
        parse_policy("LATEST ")
    c = CatchUp(NONE, 600)
    assert CatchUp.from_json(c.to_json()) == c and CatchUp.from_json(None) == CatchUp()


# --- the series' steps -------------------------------------------------------------------
def series_trigger(catch_up: CatchUp, first_ms: int = T0) -> Trigger:
    start = datetime.fromtimestamp(first_ms / 1000, UTC).replace(tzinfo=None)
    rec = Recurrence(RuleKind.RRULE, parse_rule(RuleKind.RRULE, "FREQ=HOURLY", load_zone("UTC"),
                                                start), "UTC", start, catch_up=catch_up)
    return Trigger("trg_x", "orders", "http://x/cb", "null", first_ms, first_ms - HOUR, 0,
                   Route.DIRECT, schedule=rec)


def test_a_recurrence_stores_its_policy() -> None:
    rec = series_trigger(CatchUp(LATEST, 600)).schedule
    assert rec is not None and Recurrence.from_dict(rec.to_dict()) == rec
    legacy = {k: v for k, v in rec.to_dict().items() if k != "catchUp"}
    assert Recurrence.from_dict(legacy).catch_up == CatchUp()


@pytest.mark.parametrize(("policy", "expected"), [(ALL, 1), (LATEST, 3), (NONE, 4)])
def test_the_step_after_a_long_retry_follows_the_policy(policy: CatchUpPolicy,
                                                         expected: int) -> None:
    t = series_trigger(CatchUp(policy))
    now = T0 + 3 * HOUR + 20 * 60_000  # occurrence 0 retried for 3 h: 1, 2, 3 missed
    nxt, chosen = series.next_step(t, fired=True, now_ms=now, horizon_days=400,
                              direct_max_delay_s=900)
    assert nxt is not None and (nxt.fire_at_ms - T0) // HOUR == expected
    assert nxt.occurrence_seq == 1  # skipped ones are not counted
    assert sum(chosen.skipped().values()) == expected - 1
    assert series.next_after(t, fired=True, now_ms=now, horizon_days=400,
                             direct_max_delay_s=900) == nxt


@pytest.mark.parametrize(("policy", "expected"), [(ALL, 0), (LATEST, 2), (NONE, 3)])
def test_a_late_occurrence_about_to_be_delivered(policy: CatchUpPolicy, expected: int) -> None:
    t = replace(series_trigger(CatchUp(policy)), occurrence_seq=7)
    now = T0 + 2 * HOUR + 5 * 60_000
    nxt, _ = series.catch_up(t, now_ms=now, horizon_days=400, direct_max_delay_s=900)
    assert nxt is not None and (nxt.fire_at_ms - T0) // HOUR == expected
    assert (nxt is t) == (expected == 0) and nxt.occurrence_seq == 7


# --- pause and resume --------------------------------------------------------------------
@pytest.mark.parametrize(("policy", "expected"),
                         [(None, 0), (ALL, 0), (LATEST, 2), (NONE, 3)])
def test_a_series_resumed_after_three_occurrences(policy: CatchUpPolicy | None,
                                                  expected: int) -> None:
    t = paused(series_trigger(CatchUp(ALL)))
    assert t.status is Status.PAUSED and t.revision == 1
    now = T0 + 2 * HOUR + 10 * 60_000
    new, _ = resumed(t, now_ms=now, policy=policy, horizon_days=400, direct_max_delay_s=900)
    assert new.status is Status.PENDING and new.revision == 2
    assert (new.fire_at_ms - T0) // HOUR == expected and new.occurrence_seq == 0
    # Routed by how far ahead it now is: the sweeper promotes one 50 minutes ahead.
    assert new.route is (Route.SWEEP if policy is NONE else Route.DIRECT)


@pytest.mark.parametrize("policy", [None, ALL, LATEST])
def test_a_one_time_trigger_missed_while_paused_fires_now(
        policy: CatchUpPolicy | None) -> None:
    t = paused(Trigger("trg_y", "orders", "http://x/cb", "null", T0, T0 - HOUR, 0,
                       Route.SWEEP))
    new, _ = resumed(t, now_ms=T0 + HOUR, policy=policy, horizon_days=400,
                     direct_max_delay_s=900)
    assert new.status is Status.PENDING and new.fire_at_ms == T0 and new.route is Route.DIRECT


def test_a_one_time_trigger_missed_while_paused_is_cancelled_under_none() -> None:
    t = paused(Trigger("trg_y", "orders", "http://x/cb", "null", T0, T0 - HOUR, 0,
                       Route.DIRECT))
    new, _ = resumed(t, now_ms=T0 + HOUR, policy=NONE, horizon_days=400,
                     direct_max_delay_s=900)
    assert new.status is Status.CANCELLED and new.last_error == MISSED_WHILE_PAUSED
    before, _ = resumed(t, now_ms=T0 - 1_000, policy=NONE, horizon_days=400,
                        direct_max_delay_s=900)
    assert before.status is Status.PENDING  # not yet due: nothing was missed


@pytest.mark.parametrize(("policy", "expected"),
                         [(None, 0), (ALL, 0), (LATEST, 2), (NONE, 3)])
def test_what_came_due_while_paused_is_missed_however_little_late(
        policy: CatchUpPolicy | None, expected: int) -> None:
    """Resumed 1 s after occurrence 2, well inside the catch-up tolerance: 0, 1 and 2 came
    due while paused all the same (the tolerance is for outages)."""
    t = paused(series_trigger(CatchUp(ALL)))
    new, chosen = resumed(t, now_ms=T0 + 2 * HOUR + 1_000, policy=policy, horizon_days=400,
                          direct_max_delay_s=900)
    assert (new.fire_at_ms - T0) // HOUR == expected
    assert sum(chosen.skipped().values()) == {0: 0, 2: 2, 3: 3}[expected]
    due_now, _ = resumed(t, now_ms=T0 + 2 * HOUR, policy=NONE, horizon_days=400,
                         direct_max_delay_s=900)
    assert (due_now.fire_at_ms - T0) // HOUR == 2  # due at the resume: not missed


def test_a_one_time_trigger_a_second_past_its_time_is_cancelled_under_none() -> None:
    t = paused(Trigger("trg_y", "orders", "http://x/cb", "null", T0, T0 - HOUR, 0,
                       Route.DIRECT))
    new, chosen = resumed(t, now_ms=T0 + 1_000, policy=NONE, horizon_days=400,
                          direct_max_delay_s=900)
    assert new.status is Status.CANCELLED and new.last_error == MISSED_WHILE_PAUSED
    assert chosen.skipped_policy == 1
