"""``core.time.when``: phrases → the exact instant (and RRULE) at a fixed clock, across zones and
the DST nights of New York and Berlin in both directions; ambiguity and refusals."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trigger_service.core.errors import InvalidRequest, NonexistentLocalTime
from trigger_service.core.time.timing import format_rfc3339_ms, parse_rfc3339_ms
from trigger_service.core.time.when import MAX_WHEN_LEN, resolve_when
from trigger_service.core.time.zones import DstPolicy, Gap, Overlap

NY, BERLIN, TOKYO = "America/New_York", "Europe/Berlin", "Asia/Tokyo"
SYDNEY, KOLKATA, UTC = "Australia/Sydney", "Asia/Kolkata", "UTC"
# The clocks (each a Saturday noon in its zone but the first, a Wednesday):
WED = "2027-06-09T10:00:00.000Z"  # 06:00 New York, 12:00 Berlin, 19:00 Tokyo, 20:00 Sydney
NY_SPRING = "2027-03-13T17:00:00.000Z"  # the day before 02:00 EST -> 03:00 EDT (2027-03-14)
NY_FALL = "2027-11-06T16:00:00.000Z"  # the day before 02:00 EDT -> 01:00 EST (2027-11-07)
BE_SPRING = "2027-03-27T11:00:00.000Z"  # the day before 02:00 CET -> 03:00 CEST (2027-03-28)
BE_FALL = "2027-10-30T10:00:00.000Z"  # the day before 03:00 CEST -> 02:00 CET (2027-10-31)

WEEKDAYS_9 = "FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR;BYHOUR=9;BYMINUTE=0;BYSECOND=0"

# (clock, timeZone, phrase, fireAt, rrule)
TABLE = [
    # relative: elapsed time from now, no zone needed
    (WED, None, "in 2 hours", "2027-06-09T12:00:00.000Z", None),
    (WED, None, "in 90 minutes", "2027-06-09T11:30:00.000Z", None),
    (WED, None, "in 1 hour and 30 minutes", "2027-06-09T11:30:00.000Z", None),
    (WED, None, "45 minutes from now", "2027-06-09T10:45:00.000Z", None),
    (WED, None, "in 2 seconds", "2027-06-09T10:00:02.000Z", None),
    (WED, None, "in 3 days", "2027-06-12T10:00:00.000Z", None),
    (WED, None, "In  2   Weeks", "2027-06-23T10:00:00.000Z", None),
    (WED, None, "now", "2027-06-09T10:00:00.000Z", None),
    (WED, TOKYO, "in an hour", "2027-06-09T11:00:00.000Z", None),
    # wall clock, in the zone
    (WED, NY, "tomorrow at 9am", "2027-06-10T13:00:00.000Z", None),
    (WED, NY, "tomorrow 9am", "2027-06-10T13:00:00.000Z", None),
    (WED, NY, "today at 5pm", "2027-06-09T21:00:00.000Z", None),
    (WED, NY, "at 9am", "2027-06-09T13:00:00.000Z", None),
    (WED, NY, "next friday 17:30", "2027-06-11T21:30:00.000Z", None),
    (WED, BERLIN, "friday at 3pm", "2027-06-11T13:00:00.000Z", None),
    (WED, BERLIN, "tomorrow noon", "2027-06-10T10:00:00.000Z", None),
    (WED, TOKYO, "tomorrow at 7:30am", "2027-06-09T22:30:00.000Z", None),
    (WED, SYDNEY, "monday 8am", "2027-06-13T22:00:00.000Z", None),
    (WED, KOLKATA, "tomorrow at 10:15", "2027-06-10T04:45:00.000Z", None),
    (WED, UTC, "december 25 at 8am", "2027-12-25T08:00:00.000Z", None),
    (WED, UTC, "march 4th at 9:15pm", "2028-03-04T21:15:00.000Z", None),
    (WED, NY, "2027-07-04 09:00", "2027-07-04T13:00:00.000Z", None),
    (WED, UTC, "13/04 9am", "2028-04-13T09:00:00.000Z", None),
    (WED, UTC, "04/13 9am", "2028-04-13T09:00:00.000Z", None),
    (WED, UTC, "07/07 9am", "2027-07-07T09:00:00.000Z", None),
    (WED, NY, "in 2 months", "2027-08-09T10:00:00.000Z", None),
    (WED, BERLIN, "tomorrow 9.30pm", "2027-06-10T19:30:00.000Z", None),  # dateparser: 00:00
    (WED, UTC, "tomorrow at 9.30", "2027-06-10T09:30:00.000Z", None),
    (WED, UTC, "every day at 9.15pm", "2027-06-09T21:15:00.000Z",
     "FREQ=DAILY;BYHOUR=21;BYMINUTE=15;BYSECOND=0"),
    # recurring: the grammar's RRULE, first occurrence from now
    (WED, NY, "every weekday at 9am", "2027-06-09T13:00:00.000Z", WEEKDAYS_9),
    (WED, BERLIN, "every monday and thursday at 18:00", "2027-06-10T16:00:00.000Z",
     "FREQ=WEEKLY;BYDAY=MO,TH;BYHOUR=18;BYMINUTE=0;BYSECOND=0"),
    (WED, TOKYO, "every day at 7:30", "2027-06-09T22:30:00.000Z",
     "FREQ=DAILY;BYHOUR=7;BYMINUTE=30;BYSECOND=0"),
    (WED, None, "every 15 minutes", "2027-06-09T10:15:00.000Z", "FREQ=MINUTELY;INTERVAL=15"),
    (WED, NY, "every month on the 1st at 9am", "2027-07-01T13:00:00.000Z",
     "FREQ=MONTHLY;BYMONTHDAY=1;BYHOUR=9;BYMINUTE=0;BYSECOND=0"),
    (WED, None, "every hour", "2027-06-09T11:00:00.000Z", "FREQ=HOURLY"),
    (WED, None, "every 2 hours", "2027-06-09T12:00:00.000Z", "FREQ=HOURLY;INTERVAL=2"),
    (WED, UTC, "hourly", "2027-06-09T11:00:00.000Z", "FREQ=HOURLY"),
    (WED, UTC, "every other week", "2027-06-23T10:00:00.000Z", "FREQ=WEEKLY;INTERVAL=2"),
    (WED, NY, "every day", "2027-06-10T10:00:00.000Z", "FREQ=DAILY"),
    (WED, BERLIN, "every last friday of the month at 17:00", "2027-06-25T15:00:00.000Z",
     "FREQ=MONTHLY;BYDAY=-1FR;BYHOUR=17;BYMINUTE=0;BYSECOND=0"),
    (WED, SYDNEY, "daily at 6pm", "2027-06-10T08:00:00.000Z",
     "FREQ=DAILY;BYHOUR=18;BYMINUTE=0;BYSECOND=0"),
    (WED, UTC, "every year on march 3 at 9am", "2028-03-03T09:00:00.000Z",
     "FREQ=YEARLY;BYMONTH=3;BYMONTHDAY=3;BYHOUR=9;BYMINUTE=0;BYSECOND=0"),
    (WED, KOLKATA, "every weekend at 10am", "2027-06-12T04:30:00.000Z",
     "FREQ=WEEKLY;BYDAY=SA,SU;BYHOUR=10;BYMINUTE=0;BYSECOND=0"),
    (WED, NY, "every month on the last day at 8pm", "2027-07-01T00:00:00.000Z",
     "FREQ=MONTHLY;BYMONTHDAY=-1;BYHOUR=20;BYMINUTE=0;BYSECOND=0"),
    (WED, NY, "Each Tues, Thurs at 7:05 PM", "2027-06-10T23:05:00.000Z",
     "FREQ=WEEKLY;BYDAY=TU,TH;BYHOUR=19;BYMINUTE=5;BYSECOND=0"),
    # New York, spring forward (02:00 EST -> 03:00 EDT): a gap is shifted like localTime's
    (NY_SPRING, NY, "tomorrow at 9am", "2027-03-14T13:00:00.000Z", None),
    (NY_SPRING, NY, "tomorrow at 2:30am", "2027-03-14T07:30:00.000Z", None),
    (NY_SPRING, NY, "tomorrow at 1:30am", "2027-03-14T06:30:00.000Z", None),
    (NY_SPRING, NY, "tomorrow noon", "2027-03-14T16:00:00.000Z", None),
    (NY_SPRING, None, "in 24 hours", "2027-03-14T17:00:00.000Z", None),
    (NY_SPRING, NY, "every day at 2:30am", "2027-03-14T07:30:00.000Z",
     "FREQ=DAILY;BYHOUR=2;BYMINUTE=30;BYSECOND=0"),
    # New York, fall back (02:00 EDT -> 01:00 EST)
    (NY_FALL, NY, "tomorrow 9am", "2027-11-07T14:00:00.000Z", None),
    (NY_FALL, NY, "tomorrow 12:30am", "2027-11-07T04:30:00.000Z", None),
    (NY_FALL, NY, "tomorrow 3am", "2027-11-07T08:00:00.000Z", None),
    (NY_FALL, NY, "every day at 1:30am", "2027-11-07T05:30:00.000Z",
     "FREQ=DAILY;BYHOUR=1;BYMINUTE=30;BYSECOND=0"),
    # Berlin, spring forward (02:00 CET -> 03:00 CEST)
    (BE_SPRING, BERLIN, "tomorrow at 2:30am", "2027-03-28T01:30:00.000Z", None),
    (BE_SPRING, BERLIN, "tomorrow at 9am", "2027-03-28T07:00:00.000Z", None),
    (BE_SPRING, BERLIN, "tomorrow 1:30am", "2027-03-28T00:30:00.000Z", None),
    (BE_SPRING, BERLIN, "every day at 2:30", "2027-03-28T01:30:00.000Z",
     "FREQ=DAILY;BYHOUR=2;BYMINUTE=30;BYSECOND=0"),
    # Berlin, fall back (03:00 CEST -> 02:00 CET)
    (BE_FALL, BERLIN, "tomorrow 9am", "2027-10-31T08:00:00.000Z", None),
    (BE_FALL, BERLIN, "tomorrow 1:30am", "2027-10-30T23:30:00.000Z", None),
    (BE_FALL, BERLIN, "in 1 day", "2027-10-31T10:00:00.000Z", None),
    (BE_FALL, BERLIN, "tomorrow at noon", "2027-10-31T11:00:00.000Z", None),
]


def at(clock: str) -> int:
    return parse_rfc3339_ms(clock)


@pytest.mark.parametrize(("clock", "zone", "phrase", "fire_at", "rrule"), TABLE,
                         ids=[f"{r[1]}:{r[2]}@{r[0][:10]}" for r in TABLE])
def test_phrase_resolves_exactly(clock: str, zone: str | None, phrase: str, fire_at: str,
                                 rrule: str | None) -> None:
    r = resolve_when(phrase, now_ms=at(clock), time_zone=zone)
    assert (format_rfc3339_ms(r.fire_at_ms), r.rrule) == (fire_at, rrule)
    assert r.text == phrase and r.time_zone == zone
    # Exactly one way of saying it: an instant (relative) or a wall time in the zone.
    assert (r.at_ms is None) != (r.local_time is None)


def test_the_table_is_large_enough_and_covers_both_dst_directions_in_both_zones() -> None:
    assert len(TABLE) >= 40
    assert {NY_SPRING, NY_FALL, BE_SPRING, BE_FALL} <= {row[0] for row in TABLE}


def test_neither_the_machine_clock_nor_its_zone_is_consulted(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import dateparser.utils

    def no_local_zone() -> None:
        raise AssertionError("dateparser asked for the local zone")

    monkeypatch.setattr(dateparser.utils, "get_localzone", no_local_zone)
    monkeypatch.setenv("TZ", "Pacific/Kiritimati")  # +14: any leak shows in the instant
    time.tzset()
    try:
        for clock, zone, phrase, fire_at, rrule in TABLE[:30]:
            r = resolve_when(phrase, now_ms=at(clock), time_zone=zone)
            assert (format_rfc3339_ms(r.fire_at_ms), r.rrule) == (fire_at, rrule), phrase
    finally:
        monkeypatch.undo()
        time.tzset()


def test_a_wall_clock_phrase_is_read_as_a_local_time_and_a_rule_from_its_first_occurrence(
        ) -> None:
    r = resolve_when("every weekday at 9am", now_ms=at(WED), time_zone=NY)
    assert r.local_time is not None and r.local_time.isoformat() == "2027-06-09T09:00:00"
    one = resolve_when("tomorrow at 9am", now_ms=at(WED), time_zone=NY)
    assert one.local_time is not None and one.local_time.isoformat() == "2027-06-10T09:00:00"
    rel = resolve_when("in 2 hours", now_ms=at(WED) + 250, time_zone=None)
    assert rel.at_ms == at(WED) + 250 + 7_200_000  # milliseconds kept


# --- ambiguity ------------------------------------------------------------------------------

@pytest.mark.parametrize(("clock", "zone", "phrase", "candidates"), [
    (NY_FALL, NY, "tomorrow 1:30am", ["2027-11-07T05:30:00.000Z", "2027-11-07T06:30:00.000Z"]),
    (BE_FALL, BERLIN, "tomorrow 2:30am",
     ["2027-10-31T00:30:00.000Z", "2027-10-31T01:30:00.000Z"]),
    (WED, UTC, "03/04 9am", ["2028-03-04T09:00:00.000Z", "2028-04-03T09:00:00.000Z"]),
    (WED, BERLIN, "03.04.2028 10:00", ["2028-03-04T09:00:00.000Z", "2028-04-03T08:00:00.000Z"]),
])
def test_ambiguous_phrases_list_their_candidates(clock: str, zone: str, phrase: str,
                                                 candidates: list[str]) -> None:
    with pytest.raises(InvalidRequest) as e:
        resolve_when(phrase, now_ms=at(clock), time_zone=zone)
    body = e.value.to_json()
    assert body["field"] == "when" and "ambiguous" in str(body["message"])
    assert body["candidates"] == candidates


@pytest.mark.parametrize(("overlap", "fire_at"), [
    (Overlap.FIRST, "2027-11-07T05:30:00.000Z"), (Overlap.SECOND, "2027-11-07T06:30:00.000Z"),
    (Overlap.BOTH, "2027-11-07T05:30:00.000Z")])
def test_an_explicit_dst_policy_settles_an_overlap(overlap: Overlap, fire_at: str) -> None:
    r = resolve_when("tomorrow 1:30am", now_ms=at(NY_FALL), time_zone=NY,
                     dst=DstPolicy(overlap=overlap))
    assert format_rfc3339_ms(r.fire_at_ms) == fire_at


def test_a_gap_under_skip_is_a_nonexistent_local_time_naming_when() -> None:
    with pytest.raises(NonexistentLocalTime) as e:
        resolve_when("tomorrow at 2:30am", now_ms=at(NY_SPRING), time_zone=NY,
                     dst=DstPolicy(gap=Gap.SKIP))
    assert e.value.to_json()["field"] == "when"
    assert "2027-03-14T02:30:00" in e.value.message


# --- refusals -------------------------------------------------------------------------------

@pytest.mark.parametrize(("zone", "phrase", "field", "says"), [
    (NY, "yesterday", "when", "2027-06-08T10:00:00.000Z, in the past"),
    (NY, "today at 5am", "when", "2027-06-09T09:00:00.000Z, in the past"),
    (UTC, "9am EST", "when", "timeZone"),
    (UTC, "tomorrow 9am +02:00", "when", "timeZone"),
    (UTC, "tomorrow at 25:00", "when", "25:00"),
    (UTC, "9", "when", "bare number"),
    (UTC, "blah blah", "when", "cannot read"),
    (UTC, "every blah", "when", "not a recurring phrase"),
    (UTC, "every monday", "when", "needs a time of day"),
    (UTC, "every 2 hours at 9am", "when", "'at' goes with days"),
    (UTC, "every 0 minutes", "when", "1 to 1000"),
    (UTC, "every month on the 32nd at 9am", "when", "day 32"),
    (UTC, "every year on february 30 at 9am", "when", "no day 30"),
    (UTC, "every day at 13pm", "when", "1 to 12"),
    (UTC, "31/02 9am", "when", "not a date"),
    (UTC, "", "when", "1 to 200"),
    (UTC, "x" * (MAX_WHEN_LEN + 1), "when", "1 to 200"),
    (None, "tomorrow 9am", "timeZone", "required"),
    (None, "every day at 9am", "timeZone", "required"),
    (None, "every day", "timeZone", "required"),
    ("Mars/Olympus", "tomorrow 9am", "timeZone", "unknown"),
    ("Mars/Olympus", "in 2 hours", "timeZone", "unknown"),
    ("Mars/Olympus", "every hour", "timeZone", "unknown"),
])
def test_refusals_name_the_field(zone: str | None, phrase: str, field: str, says: str) -> None:
    with pytest.raises(InvalidRequest) as e:
        resolve_when(phrase, now_ms=at(WED), time_zone=zone)
    assert e.value.to_json()["field"] == field
    assert says in e.value.message


@pytest.mark.parametrize("phrase", [
    "in 99999999999 years", "\x00\x01", "every " + "monday, " * 30 + "at 9am",
    "tomorrow at 9am " + "and " * 40, "0930", "1700000000", "next next next friday",
    "every 9999 minutes", "in 999999 weeks", "every day at 24:00", "::::", "in -2 hours"])
def test_odd_text_is_a_400_never_another_error(phrase: str) -> None:
    try:
        resolve_when(phrase, now_ms=at(WED), time_zone=NY)
    except InvalidRequest as e:
        assert e.to_json()["field"] in ("when", "timeZone")


@pytest.mark.parametrize("phrase", ["every hour", "every day", "every day at 9am",
                                    "every 15 minutes", "in 2 weeks", "tomorrow 9am"])
@pytest.mark.parametrize("zone", [None, "Pacific/Kiritimati", "Etc/GMT+12"])
def test_the_end_of_time_is_a_400(phrase: str, zone: str | None) -> None:
    try:
        resolve_when(phrase, now_ms=at("9999-12-30T00:00:00.000Z"), time_zone=zone)
    except InvalidRequest as e:
        assert e.to_json()["field"] in ("when", "timeZone")


# --- any text ------------------------------------------------------------------------------

_WORDS = ["every", "each", "in", "at", "on", "the", "of", "and", ",", "next", "this", "last",
          "tomorrow", "today", "yesterday", "now", "from", "monday", "fri", "weekday",
          "weekend", "day", "days", "week", "month", "year", "hour", "hours", "minutes",
          "seconds", "other", "1st", "31st", "first", "march", "dec", "9am", "12pm", "13pm",
          "17:30", "25:00", "2:30am", "1:30", "noon", "midnight", "03/04", "13/04", "31/02",
          "12/31/9999", "9999", "0001", "2", "15", "0", "999999", "1.5", "an", "a", "EST",
          "+02:00", "z", "utc", "daily", "hourly", "ago", "before", "after", "-", "/", ":"]
_ZONES = [None, UTC, NY, BERLIN, "Pacific/Kiritimati", "Etc/GMT+12"]
_CLOCKS = [WED, NY_SPRING, NY_FALL, BE_SPRING, BE_FALL, "9999-12-30T00:00:00.000Z",
           "0001-01-02T00:00:00.000Z"]


@settings(max_examples=300, deadline=None)
@given(words=st.lists(st.sampled_from(_WORDS), min_size=1, max_size=8),
       zone=st.sampled_from(_ZONES), clock=st.sampled_from(_CLOCKS),
       overlap=st.sampled_from([None, *Overlap]), gap=st.sampled_from(list(Gap)))
def test_any_phrase_is_read_or_refused_with_a_field(
        words: list[str], zone: str | None, clock: str, overlap: Overlap | None,
        gap: Gap) -> None:
    """Whatever the text, the answer is a reading that fires no earlier than now, or an
    ``InvalidRequest`` / ``NonexistentLocalTime`` naming ``when`` or ``timeZone``."""
    dst = None if overlap is None else DstPolicy(gap, overlap)
    try:
        r = resolve_when(" ".join(words), now_ms=at(clock), time_zone=zone, dst=dst)
    except (InvalidRequest, NonexistentLocalTime) as e:
        assert e.to_json()["field"] in ("when", "timeZone")
        return
    assert r.fire_at_ms >= at(clock) and (r.at_ms is None) != (r.local_time is None)
    assert r.rrule is None or r.local_time is not None
