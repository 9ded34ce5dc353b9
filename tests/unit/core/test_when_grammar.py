"""``core.time.when``'s newer grammar: several times a day ("at 9am and 5pm"), ``until DATE``
(inclusive, in the trigger's zone) and ``for N times``, alone and with what existed; each
form's occurrences are checked, not only its RRULE, and each refusal is a 400 naming when."""

from __future__ import annotations

from datetime import datetime

import pytest

from trigger_service.app.schedules import TimeRequest, schedule_of
from trigger_service.core.errors import InvalidRequest
from trigger_service.core.time.recurrence import RuleKind, occurrences
from trigger_service.core.time.timing import format_rfc3339_ms, parse_rfc3339_ms
from trigger_service.core.time.when import resolve_when

NY, BERLIN, UTC = "America/New_York", "Europe/Berlin", "UTC"
WED = parse_rfc3339_ms("2027-06-09T10:00:00Z")  # 06:00 in New York, 12:00 in Berlin


def fires(phrase: str, zone: str | None, n: int = 50, now_ms: int = WED) -> list[str]:
    """The first ``n`` fire instants of the series ``phrase`` makes (all, if fewer)."""
    r = resolve_when(phrase, now_ms=now_ms, time_zone=zone)
    rec = schedule_of(TimeRequest(local_time=r.local_time, time_zone=zone or UTC,
                                  rule_kind=RuleKind.RRULE, rule_text=r.rrule))
    assert rec is not None
    out = []
    for occ in occurrences(rec, limit=datetime(2030, 1, 1)):
        out.append(format_rfc3339_ms(occ.at_ms))
        if len(out) == n:
            break
    assert out[0] == format_rfc3339_ms(r.fire_at_ms)  # the first is what create answers
    return out


@pytest.mark.parametrize(("phrase", "zone", "rrule"), [
    ("every weekday at 9am and 5pm", NY,
     "FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR;BYHOUR=9,17;BYMINUTE=0;BYSECOND=0"),
    ("every day at noon, 4pm and 8pm", UTC, "FREQ=DAILY;BYHOUR=12,16,20;BYMINUTE=0;BYSECOND=0"),
    ("daily at 9:00 and 9:30", UTC, "FREQ=DAILY;BYHOUR=9;BYMINUTE=0,30;BYSECOND=0"),
    ("every day at 9am for 10 times", BERLIN,
     "FREQ=DAILY;BYHOUR=9;BYMINUTE=0;BYSECOND=0;COUNT=10"),
    ("every monday at 8:30 until 2028-03-01", NY,
     "FREQ=WEEKLY;BYDAY=MO;BYHOUR=8;BYMINUTE=30;BYSECOND=0;UNTIL=20280301T235959"),
    ("every 15 minutes for 3 times", None, "FREQ=MINUTELY;INTERVAL=15;COUNT=3"),
    ("every hour until june 9", UTC, "FREQ=HOURLY;UNTIL=20270609T235959"),
    ("every day until march 1", UTC, "FREQ=DAILY;UNTIL=20280301T235959"),  # the next 1 march
    ("every weekday at 9am and 5pm for 4 times", NY,
     "FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR;BYHOUR=9,17;BYMINUTE=0;BYSECOND=0;COUNT=4"),
    ("every month on the 1st at 9am until 1 dec 2027", UTC,
     "FREQ=MONTHLY;BYMONTHDAY=1;BYHOUR=9;BYMINUTE=0;BYSECOND=0;UNTIL=20271201T235959"),
])
def test_new_forms_read_as_one_rrule(phrase: str, zone: str | None, rrule: str) -> None:
    assert resolve_when(phrase, now_ms=WED, time_zone=zone).rrule == rrule


def test_several_times_a_day_fire_at_each_time_in_the_zone() -> None:
    # Wednesday 06:00 in New York: 09:00 EDT (13:00Z) and 17:00 EDT (21:00Z) each weekday.
    assert fires("every weekday at 9am and 5pm", NY, n=5) == [
        "2027-06-09T13:00:00.000Z", "2027-06-09T21:00:00.000Z", "2027-06-10T13:00:00.000Z",
        "2027-06-10T21:00:00.000Z", "2027-06-11T13:00:00.000Z"]


def test_for_n_times_fires_exactly_n_times_from_the_first_occurrence() -> None:
    got = fires("every day at 9am for 10 times", BERLIN)
    assert len(got) == 10
    assert (got[0], got[-1]) == ("2027-06-10T07:00:00.000Z", "2027-06-19T07:00:00.000Z")
    # A rule without a time of day starts one period after now; that start is not counted.
    assert fires("every 15 minutes for 3 times", None) == [
        "2027-06-09T10:15:00.000Z", "2027-06-09T10:30:00.000Z", "2027-06-09T10:45:00.000Z"]


def test_until_is_inclusive_of_its_day_in_the_zone() -> None:
    got = fires("every monday at 8:30 until 2027-06-28", NY)
    assert got == ["2027-06-14T12:30:00.000Z", "2027-06-21T12:30:00.000Z",
                   "2027-06-28T12:30:00.000Z"]
    # 23:00 in New York on the until day is already the next day in UTC: still fired.
    assert fires("every day at 11pm until june 10", NY)[-1] == "2027-06-11T03:00:00.000Z"


@pytest.mark.parametrize(("phrase", "zone", "says"), [
    ("every day at 9am for 0 times", UTC, "from 1 to 1,000,000"),
    ("every day at 9am for 1000001 times", UTC, "from 1 to 1,000,000"),
    ("every day at 9am for ten times", UTC, "whole number"),
    ("every monday at 8:30 until 2027-03-01", UTC, "before the start"),
    ("every day at 9am until june 9", UTC, "after the until date"),  # 09:00 passed today
    ("every day at 9am until feb 30", UTC, "is not a date"),
    ("every day at 9am until someday", UTC, "a date such as"),
    ("every day at 9am until 2027-13-01", UTC, "is not a date"),
    ("every day at 9am for 3 times until march 1", UTC, "not both"),
    ("every day at 9am until march 1 for 3 times", UTC, "not both"),
    ("every day at 9:30 and 5pm", UTC, "share their minute"),
    ("every day at 9am and 25:00", UTC, "not a time of day"),
    ("every 15 minutes until march 1", None, "timeZone: required"),
])
def test_nonsense_is_a_400_naming_the_field(phrase: str, zone: str | None, says: str) -> None:
    with pytest.raises(InvalidRequest) as e:
        resolve_when(phrase, now_ms=WED, time_zone=zone)
    assert says in e.value.message
    assert e.value.extra["field"] == ("timeZone" if says.startswith("timeZone") else "when")


@pytest.mark.parametrize(("locale", "fire_at"), [
    ("en-US", "2027-03-04T09:00:00.000Z"), ("es_US", "2027-03-04T09:00:00.000Z"),
    ("en-GB", "2027-04-03T09:00:00.000Z"), ("de-DE", "2027-04-03T09:00:00.000Z"),
    ("zh-Hant-TW", "2027-04-03T09:00:00.000Z")])
def test_a_locale_hint_reads_a_numeric_date_in_its_order(locale: str, fire_at: str) -> None:
    r = resolve_when("03/04/2027 9am", now_ms=WED - 200 * 86_400_000, time_zone=UTC,
                     locale=locale)
    assert format_rfc3339_ms(r.fire_at_ms) == fire_at


@pytest.mark.parametrize("locale", [None, "en", ""])
def test_without_a_region_a_numeric_date_stays_ambiguous(locale: str | None) -> None:
    with pytest.raises(InvalidRequest) as e:
        resolve_when("03/04/2027 9am", now_ms=WED - 200 * 86_400_000, time_zone=UTC,
                     locale=locale)
    assert len(e.value.extra["candidates"]) == 2  # type: ignore[arg-type]


def test_a_date_valid_only_the_other_way_is_refused_under_the_hint() -> None:
    with pytest.raises(InvalidRequest) as e:
        resolve_when("13/04 9am", now_ms=WED, time_zone=UTC, locale="en-US")
    assert "month-first (the locale's order)" in e.value.message
