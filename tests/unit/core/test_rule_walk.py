"""The bound on expanding a rule (core.time.rule_walk), counted in steps, not seconds: a rule
that never matches stops at its limit instead of walking to the year 9999; one that costs more
than its budget is a 400 naming its field (a request) or the end of its series (a step after
a fire); an impossible cron is a 400, never a 500."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from dateutil.rrule import rrulestr

from trigger_service.app.schedules import TimeRequest, first_fire, preview
from trigger_service.core.errors import InvalidRequest, RuleTooCostly
from trigger_service.core.model import Route, Trigger
from trigger_service.core.time import rule_walk, series
from trigger_service.core.time.recurrence import Recurrence, RuleKind, instances, parse_rule
from trigger_service.core.time.rule_walk import REQUEST_STEPS, Walk, walls
from trigger_service.core.time.timing import DAY_MS, datetime_to_ms
from trigger_service.core.time.zones import load_zone

NOW = datetime(2027, 1, 1, 9, 0)
NOW_MS = datetime_to_ms(NOW.replace(tzinfo=UTC))
HORIZON_DAYS = 3660
NEVER = ["FREQ=DAILY;BYMONTH=2;BYMONTHDAY=30", "FREQ=MINUTELY;INTERVAL=7;BYMONTH=4;BYMONTHDAY=31",
         "FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=30", "FREQ=MONTHLY;BYMONTH=2;BYMONTHDAY=30",
         "FREQ=WEEKLY;BYMONTH=2;BYMONTHDAY=30", "FREQ=HOURLY;INTERVAL=5;BYMONTH=4;BYMONTHDAY=31",
         "FREQ=SECONDLY;INTERVAL=61;BYMONTH=4;BYMONTHDAY=31", "FREQ=DAILY;BYYEARDAY=366;BYMONTH=1",
         "FREQ=DAILY;BYSETPOS=2", "FREQ=YEARLY;INTERVAL=4;BYMONTH=2;BYMONTHDAY=29"]


@pytest.fixture
def steps(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Every step any walk is charged, in order."""
    spent: list[int] = []
    charge = Walk.charge

    def counting(self: Walk, n: int) -> None:
        spent.append(n)
        charge(self, n)

    monkeypatch.setattr(Walk, "charge", counting)
    yield spent


def rec(rule: str, start: datetime = NOW, kind: RuleKind = RuleKind.RRULE) -> Recurrence:
    return Recurrence(kind, parse_rule(kind, rule, load_zone("UTC"), start), "UTC", start)


def request(rule: str, start: datetime = NOW, kind: RuleKind = RuleKind.RRULE) -> TimeRequest:
    return TimeRequest(local_time=start, time_zone="UTC", rule_kind=kind, rule_text=rule)


@pytest.mark.parametrize("rule", NEVER)
def test_a_rule_that_never_matches_stops_at_its_limit(rule: str, steps: list[int]) -> None:
    limit = NOW + timedelta(days=HORIZON_DAYS)
    assert list(instances(rec(rule), limit, None)) == []
    # At most a step per period and per day filtered, over the days up to the limit (it
    # walked 2.9 million days before, to the year 9999).
    assert 0 < sum(steps) <= 3 * HORIZON_DAYS + 400


@pytest.mark.parametrize("rule", NEVER)
def test_the_first_fire_of_a_rule_that_never_matches_is_a_400_in_one_walk(
        rule: str, steps: list[int]) -> None:
    with pytest.raises(InvalidRequest) as e:
        first_fire(request(rule), now_ms=NOW_MS, horizon_days=HORIZON_DAYS, min_interval_s=60)
    assert e.value.status == 400 and e.value.extra["field"] == "rrule"
    assert sum(steps) <= 3 * HORIZON_DAYS + 400
    assert preview(request(rule), count=1000, after_ms=None, now_ms=NOW_MS,
                   horizon_days=HORIZON_DAYS, min_interval_s=60) == []


@pytest.mark.parametrize(("rule", "start"), [
    ("FREQ=SECONDLY;INTERVAL=7;BYHOUR=3;BYMINUTE=0;BYSECOND=0", NOW),  # a day's search a step
    ("FREQ=MINUTELY;INTERVAL=2;BYDAY=MO", datetime(1700, 1, 1, 9)),  # from a start long ago
    ("FREQ=DAILY;BYHOUR=9,17", datetime(1, 1, 1, 9)),
])
def test_a_rule_past_its_budget_is_refused_naming_its_field(
        rule: str, start: datetime, steps: list[int]) -> None:
    with pytest.raises(RuleTooCostly) as e:
        first_fire(request(rule, start), now_ms=NOW_MS, horizon_days=HORIZON_DAYS,
                   min_interval_s=60)
    assert e.value.status == 400 and e.value.extra["field"] == "rrule"
    assert "steps" in e.value.message
    assert sum(steps) <= 2 * (REQUEST_STEPS + 86_400)  # stopped at the budget (a step over)


def test_an_empty_combination_found_while_iterating_is_a_400() -> None:
    # dateutil raises ValueError for it only once it iterates (a 500 before).
    with pytest.raises(InvalidRequest) as e:
        first_fire(request("FREQ=MINUTELY;INTERVAL=1440;BYHOUR=5"), now_ms=NOW_MS,
                   horizon_days=HORIZON_DAYS, min_interval_s=60)
    assert e.value.extra["field"] == "rrule" and "empty rule" in e.value.message


@pytest.mark.parametrize("cron", ["0 0 30 2 *", "0 0 31 4 *", "0 0 31 2,4,6,9,11 *"])
def test_an_impossible_cron_is_a_400_naming_cron(cron: str) -> None:
    # A localTime two days back: the fast-forward's search for the last match found none
    # and raised CroniterBadDateError (a 500).
    start = NOW - timedelta(days=2)
    with pytest.raises(InvalidRequest) as e:
        first_fire(request(cron, start, RuleKind.CRON), now_ms=NOW_MS, horizon_days=HORIZON_DAYS,
                   min_interval_s=60)
    assert e.value.status == 400 and e.value.extra["field"] == "cron"
    assert preview(request(cron, start, RuleKind.CRON), count=10, after_ms=None,
                   now_ms=NOW_MS, horizon_days=HORIZON_DAYS, min_interval_s=60) == []


def test_a_cron_walk_is_bounded_too() -> None:
    # Not countable by the fast-forward (a day of the month and of the week both given):
    # walked from a start 40 years back, a step per day and ten per instance.
    with pytest.raises(RuleTooCostly) as e:
        first_fire(request("*/5 * 1-31 * 1-5", datetime(1987, 1, 1), RuleKind.CRON), now_ms=NOW_MS,
                   horizon_days=HORIZON_DAYS, min_interval_s=60)
    assert e.value.extra["field"] == "cron"


def test_rules_without_a_walk_iterate_as_dateutil_does() -> None:
    rule = rrulestr("FREQ=MONTHLY;BYMONTHDAY=31;COUNT=3", dtstart=NOW)
    assert list(rule) == [datetime(2027, 1, 31, 9), datetime(2027, 3, 31, 9),
                          datetime(2027, 5, 31, 9)]
    walked = list(walls(rrulestr("FREQ=MONTHLY;BYMONTHDAY=31;COUNT=3", dtstart=NOW),
                        Walk("rrule", 1000)))
    assert walked == list(rule)


def test_a_walk_past_its_last_day_ends_without_an_instance() -> None:
    rule = rrulestr("FREQ=DAILY;BYMONTH=2;BYMONTHDAY=30", dtstart=NOW)
    walk = Walk("rrule", 10_000, (NOW + timedelta(days=30)).date())
    assert list(walls(rule, walk)) == []
    assert walk.used == 2 * 31  # 31 days, each a period of one day


def hourly_series(rule: str, start: datetime = NOW) -> Trigger:
    return Trigger(trigger_id="trg_01HF7YAT00CM52FQVQTBF9PFJQ", caller="orders",
                   callback_url="https://orders.internal/cb", payload_json="null",
                   fire_at_ms=NOW_MS, created_at_ms=NOW_MS - DAY_MS, shard=0,
                   route=Route.SWEEP, schedule=rec(rule, start))


def test_a_stored_rule_that_never_matches_again_ends_its_series(steps: list[int]) -> None:
    # Stored before rules were bounded: its next step stops at the horizon and ends it.
    t = hourly_series("FREQ=DAILY;BYMONTH=2;BYMONTHDAY=30")
    step = dict(now_ms=NOW_MS, horizon_days=HORIZON_DAYS, direct_max_delay_s=900)
    assert series.next_after(t, fired=True, **step) is None
    assert sum(steps) <= 3 * HORIZON_DAYS + 400


def test_a_series_step_past_its_budget_ends_the_series(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(series, "SERIES_STEPS", 50)
    t = hourly_series("FREQ=DAILY;BYMONTH=1;BYMONTHDAY=1")  # next: a year on, 365 days walked
    step = dict(now_ms=NOW_MS, horizon_days=HORIZON_DAYS, direct_max_delay_s=900)
    assert series.next_after(t, fired=True, **step) is None
    late = replace(t, fire_at_ms=NOW_MS + DAY_MS)
    assert series.catch_up(late, now_ms=NOW_MS + 400 * DAY_MS, horizon_days=HORIZON_DAYS,
                           direct_max_delay_s=900)[0] is None
    assert t.schedule is not None
    assert series.same_occurrence(replace(t, occurrence_index=1), t.schedule, now_ms=NOW_MS,
                                  horizon_days=HORIZON_DAYS) is None
    # With room, the same steps find the next year's.
    monkeypatch.setattr(series, "SERIES_STEPS", rule_walk.SERIES_STEPS)
    nxt = series.next_after(t, fired=True, **step)
    assert nxt is not None and nxt.fire_at_ms == datetime_to_ms(datetime(2028, 1, 1, 9,
                                                                         tzinfo=UTC))


def test_the_budget_is_deterministic() -> None:
    a, b = Walk("rrule", REQUEST_STEPS), Walk("rrule", REQUEST_STEPS)
    for walk in (a, b):
        rule = rrulestr("FREQ=MINUTELY;INTERVAL=7;BYHOUR=3;BYMINUTE=0", dtstart=NOW)
        list(itertools.islice(walls(rule, walk), 50))
    assert a.used == b.used > 50
