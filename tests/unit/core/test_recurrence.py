"""RRULE and cron expansion in wall time, then the DST policy (pure, milliseconds)."""

from __future__ import annotations

from datetime import datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trigger_service.core.errors import InvalidRequest
from trigger_service.core.time.recurrence import (
    Recurrence,
    RuleKind,
    first_occurrences,
    next_occurrence,
    parse_rule,
    shortest_interval_s,
    wall_instances,
)
from trigger_service.core.time.timing import format_rfc3339_ms
from trigger_service.core.time.zones import DstPolicy, Gap, Overlap, load_zone, resolve

NY = "America/New_York"
LIMIT = datetime(2040, 1, 1)


def rec(rule: str, start: datetime, *, kind: RuleKind = RuleKind.RRULE, zone: str = NY,
        dst: DstPolicy | None = None, exdates: tuple[datetime, ...] = ()) -> Recurrence:
    return Recurrence(kind, parse_rule(kind, rule, load_zone(zone), start), zone, start,
                      dst or DstPolicy(), exdates)


def fires(r: Recurrence, n: int = 10) -> list[str]:
    return [format_rfc3339_ms(o.at_ms) for o in first_occurrences(r, n, limit=LIMIT)]


def test_last_day_of_every_month_skips_a_dtstart_that_does_not_match() -> None:
    r = rec("RRULE:FREQ=MONTHLY;BYMONTHDAY=-1", datetime(2027, 1, 15, 9, 0))
    assert fires(r, 3) == ["2027-01-31T14:00:00.000Z", "2027-02-28T14:00:00.000Z",
                           "2027-03-31T13:00:00.000Z"]  # 09:00 EST, EST, EDT


def test_weekdays_at_nine_across_spring_forward() -> None:
    r = rec("FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR", datetime(2027, 3, 12, 9, 0))
    assert fires(r, 3) == ["2027-03-12T14:00:00.000Z", "2027-03-15T13:00:00.000Z",
                           "2027-03-16T13:00:00.000Z"]


def test_cron_weekdays_at_nine_matches_the_rrule() -> None:
    start = datetime(2027, 3, 12, 9, 0)
    assert fires(rec("0 9 * * 1-5", start, kind=RuleKind.CRON), 20) == fires(
        rec("FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR", start), 20)


def test_last_friday_bysetpos_interval_count_and_wkst() -> None:
    start = datetime(2027, 1, 1, 9, 0)
    assert fires(rec("FREQ=MONTHLY;BYDAY=-1FR;COUNT=3", start)) == [
        "2027-01-29T14:00:00.000Z", "2027-02-26T14:00:00.000Z", "2027-03-26T13:00:00.000Z"]
    # the last weekday of the month
    assert fires(rec("FREQ=MONTHLY;BYDAY=MO,TU,WE,TH,FR;BYSETPOS=-1", start), 2) == [
        "2027-01-29T14:00:00.000Z", "2027-02-26T14:00:00.000Z"]
    assert fires(rec("FREQ=DAILY;INTERVAL=10;COUNT=2", start)) == [
        "2027-01-01T14:00:00.000Z", "2027-01-11T14:00:00.000Z"]
    # RFC 5545's WKST example: every other week on TU and SU, WKST=SU vs MO differ
    s2 = datetime(1997, 8, 5, 9, 0)
    assert fires(rec("FREQ=WEEKLY;INTERVAL=2;COUNT=4;BYDAY=TU,SU;WKST=MO", s2)) != fires(
        rec("FREQ=WEEKLY;INTERVAL=2;COUNT=4;BYDAY=TU,SU;WKST=SU", s2))


def test_the_31st_skips_short_months_and_feb_30_never_happens() -> None:
    r = rec("FREQ=MONTHLY;BYMONTHDAY=31;COUNT=3", datetime(2027, 1, 31, 8, 0))
    assert [f[:10] for f in fires(r)] == ["2027-01-31", "2027-03-31", "2027-05-31"]
    assert fires(rec("FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=30", datetime(2027, 1, 1))) == []
    assert fires(rec("0 0 30 2 *", datetime(2027, 1, 1), kind=RuleKind.CRON)) == []


def test_until_in_utc_is_read_in_the_zone() -> None:
    r = rec("FREQ=DAILY;UNTIL=20270103T140000Z", datetime(2027, 1, 1, 9, 0))
    assert fires(r) == ["2027-01-01T14:00:00.000Z", "2027-01-02T14:00:00.000Z",
                        "2027-01-03T14:00:00.000Z"]


def test_exdates_leave_out_wall_times_but_still_use_their_count() -> None:
    r = rec("FREQ=DAILY;COUNT=3", datetime(2027, 1, 1, 9, 0),
            exdates=(datetime(2027, 1, 2, 9, 0),))
    assert fires(r) == ["2027-01-01T14:00:00.000Z", "2027-01-03T14:00:00.000Z"]


@pytest.mark.parametrize(("gap", "expected"), [
    (Gap.SHIFT, ["2027-03-13T07:30:00.000Z", "2027-03-14T07:30:00.000Z",
                 "2027-03-15T06:30:00.000Z"]),
    (Gap.SKIP, ["2027-03-13T07:30:00.000Z", "2027-03-15T06:30:00.000Z"]),
])
def test_a_daily_0230_across_spring_forward(gap: Gap, expected: list[str]) -> None:
    r = rec("FREQ=DAILY;COUNT=3", datetime(2027, 3, 13, 2, 30), dst=DstPolicy(gap=gap))
    assert fires(r) == expected  # COUNT=3 counts the skipped wall instance too


def test_a_dtstart_in_the_gap_keeps_its_wall_time_on_later_days() -> None:
    r = rec("FREQ=DAILY;COUNT=2", datetime(2027, 3, 14, 2, 30))
    assert fires(r) == ["2027-03-14T07:30:00.000Z", "2027-03-15T06:30:00.000Z"]  # 03:30, 02:30


@pytest.mark.parametrize(("overlap", "expected"), [
    (Overlap.FIRST, ["2027-11-07T05:30:00.000Z", "2027-11-08T06:30:00.000Z"]),
    (Overlap.SECOND, ["2027-11-07T06:30:00.000Z", "2027-11-08T06:30:00.000Z"]),
    (Overlap.BOTH, ["2027-11-07T05:30:00.000Z", "2027-11-07T06:30:00.000Z",
                    "2027-11-08T06:30:00.000Z"]),
])
def test_a_daily_0130_across_fall_back(overlap: Overlap, expected: list[str]) -> None:
    r = rec("FREQ=DAILY;COUNT=2", datetime(2027, 11, 7, 1, 30), dst=DstPolicy(overlap=overlap))
    assert fires(r) == expected


def test_shifted_instants_come_out_in_instant_order() -> None:
    """02:00 and 02:30 shift to 07:00Z/07:30Z, the same instants as 03:00 and 03:30 EDT."""
    r = rec("FREQ=HOURLY;BYMINUTE=0,30;COUNT=6", datetime(2027, 3, 14, 1, 0))
    occ = first_occurrences(r, 10, limit=LIMIT)
    assert [o.key for o in occ] == sorted(o.key for o in occ)
    assert [o.index for o in occ] == [0, 1, 2, 4, 3, 5]


def test_next_occurrence_continues_after_the_cursor() -> None:
    r = rec("FREQ=DAILY;COUNT=3", datetime(2027, 11, 6, 1, 30),
            dst=DstPolicy(overlap=Overlap.BOTH))
    seen, cursor = [], None
    while (o := next_occurrence(r, cursor, LIMIT)) is not None:
        seen.append(format_rfc3339_ms(o.at_ms))
        cursor = o.key
    assert seen == fires(r) and len(seen) == 4


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(["FREQ=HOURLY;INTERVAL=7", "FREQ=DAILY;BYHOUR=0,1,2,3",
                        "FREQ=MINUTELY;INTERVAL=43", "FREQ=WEEKLY;BYDAY=SU;BYHOUR=1,2"]),
       st.sampled_from([NY, "Australia/Lord_Howe", "America/Havana", "Europe/London"]),
       st.datetimes(datetime(2026, 1, 1), datetime(2030, 1, 1)),
       st.sampled_from(list(Gap)), st.sampled_from(list(Overlap)))
def test_occurrences_are_the_sorted_resolution_of_the_wall_instances(
        rule: str, zone: str, start: datetime, gap: Gap, overlap: Overlap) -> None:
    r = rec(rule + ";COUNT=60", start.replace(microsecond=0), zone=zone,
            dst=DstPolicy(gap, overlap))
    expected = sorted((at, i, n == 1) for i, w in enumerate(wall_instances(r, LIMIT))
                      for n, at in enumerate(resolve(w, load_zone(zone), r.dst)))
    assert [o.key for o in first_occurrences(r, 200, limit=LIMIT)] == expected


@pytest.mark.parametrize(("kind", "text", "field"), [
    (RuleKind.RRULE, "", "rrule"), (RuleKind.RRULE, 5, "rrule"),
    (RuleKind.RRULE, "FREQ=SOMETIMES", "rrule"), (RuleKind.RRULE, "BYDAY=MO", "rrule"),
    (RuleKind.RRULE, "FREQ=DAILY;BYHOUR=25", "rrule"),
    (RuleKind.RRULE, "FREQ=DAILY;DTSTART=20270101T000000", "rrule"),
    (RuleKind.RRULE, "FREQ=DAILY\nRRULE:FREQ=WEEKLY", "rrule"),
    (RuleKind.RRULE, "FREQ=DAILY;UNTIL=20270231T000000Z", "rrule"),
    (RuleKind.CRON, "* * * *", "cron"), (RuleKind.CRON, "61 * * * *", "cron"),
    (RuleKind.CRON, "0 9 * * 1-5 2027", "cron"), (RuleKind.CRON, None, "cron"),
])
def test_bad_rules_name_their_field(kind: RuleKind, text: object, field: str) -> None:
    with pytest.raises(InvalidRequest) as e:
        parse_rule(kind, text, load_zone(NY), datetime(2027, 1, 1))
    assert e.value.extra == {"field": field}


def test_shortest_interval_of_a_rule() -> None:
    assert shortest_interval_s(rec("FREQ=SECONDLY;INTERVAL=2", datetime(2027, 1, 1)),
                               LIMIT) == 2
    assert shortest_interval_s(rec("FREQ=YEARLY;BYSECOND=0,1", datetime(2027, 1, 1)),
                               LIMIT) == 1
    assert shortest_interval_s(rec("FREQ=DAILY;COUNT=1", datetime(2027, 1, 1)), LIMIT) is None
    assert shortest_interval_s(rec("*/5 * * * *", datetime(2027, 1, 1), kind=RuleKind.CRON),
                               LIMIT) == 300


def test_a_one_time_wall_time_far_ahead_is_found() -> None:
    from trigger_service.core.time.series import first_occurrence
    r = Recurrence(RuleKind.ONCE, "", NY, datetime(2030, 3, 11, 9, 0), DstPolicy())
    occ = first_occurrence(r, not_before_ms=-(2**62), horizon_days=3660)
    assert occ is not None and format_rfc3339_ms(occ.at_ms) == "2030-03-11T13:00:00.000Z"
