"""Wall time → instants under the DST policy, against an independent reference.

The reference never uses ``fold``: it tries every UTC offset the zone uses within a day of the
wall time and keeps the instants whose local reading (UTC → zone, which is unambiguous) is the
wall time; for a gap it finds the transition by bisection and reads the wall time with the
offset just before it.
"""

from __future__ import annotations

import zoneinfo
from datetime import UTC, datetime, timedelta
from functools import cache

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trigger_service.core.errors import InvalidRequest
from trigger_service.core.time.timing import datetime_to_ms, format_rfc3339_ms
from trigger_service.core.time.zones import (
    TZDATA_VERSION,
    DstPolicy,
    Gap,
    Overlap,
    WallKind,
    classify,
    load_zone,
    resolve,
)

# DST zones with whole-hour, 30- and 45-minute offsets or shifts, transitions at midnight
# (Havana, Santiago, Asuncion), a negative DST (Dublin), Ramadan DST (Casablanca), a
# skipped day (Apia, 2011) and a zone with no DST at all (Kathmandu).
ZONES = ["America/New_York", "Europe/London", "Europe/Dublin", "Australia/Lord_Howe",
         "Australia/Adelaide", "America/St_Johns", "Pacific/Chatham", "America/Havana",
         "America/Santiago", "America/Asuncion", "Africa/Casablanca", "Pacific/Apia",
         "Asia/Tehran", "Asia/Kathmandu"]


@cache
def transitions(zone: str) -> list[datetime]:
    """UTC instants where the zone's offset changes, 2008-2032 (12-hourly scan, bisection)."""
    tz = zoneinfo.ZoneInfo(zone)
    out = []
    t = datetime(2008, 1, 1, tzinfo=UTC)
    end = datetime(2032, 1, 1, tzinfo=UTC)
    step = timedelta(hours=12)
    while t < end:
        if t.astimezone(tz).utcoffset() != (t + step).astimezone(tz).utcoffset():
            lo, hi = t, t + step
            while hi - lo > timedelta(seconds=1):
                mid = lo + (hi - lo) / 2
                if mid.astimezone(tz).utcoffset() == lo.astimezone(tz).utcoffset():
                    lo = mid
                else:
                    hi = mid
            out.append(hi.replace(microsecond=0))
        t += step
    return out


def local(at: datetime, tz: zoneinfo.ZoneInfo) -> datetime:
    return at.astimezone(tz).replace(tzinfo=None)


def reference(wall: datetime, tz: zoneinfo.ZoneInfo) -> tuple[list[int], int | None]:
    """(instants whose local time is ``wall``, the shift instant when there is none)."""
    guess = wall.replace(tzinfo=UTC)
    offsets = {local(guess + timedelta(minutes=m), tz) - (guess + timedelta(minutes=m))
               .replace(tzinfo=None) for m in range(-36 * 60, 36 * 60 + 1, 60)}
    hits = sorted({datetime_to_ms((wall - off).replace(tzinfo=UTC)) for off in offsets
                   if local((wall - off).replace(tzinfo=UTC), tz) == wall})
    if hits:
        return hits, None
    # A gap: the transition is the last instant whose local time is before ``wall``.
    lo, hi = guess - timedelta(hours=36), guess + timedelta(hours=36)
    while hi - lo > timedelta(seconds=1):
        mid = lo + (hi - lo) / 2
        if local(mid, tz) < wall:
            lo = mid
        else:
            hi = mid
    off_before = local(lo, tz) - lo.replace(tzinfo=None)
    return [], datetime_to_ms((wall - off_before).replace(tzinfo=UTC))


@st.composite
def near_transition(draw: st.DrawFn) -> tuple[str, datetime]:
    zone = draw(st.sampled_from([z for z in ZONES if transitions(z)]))
    at = draw(st.sampled_from(transitions(zone)))
    minutes = draw(st.integers(-150, 150))
    wall = local(at, zoneinfo.ZoneInfo(zone)) + timedelta(minutes=minutes)
    return zone, wall.replace(second=draw(st.sampled_from([0, 0, 30, 59])))


POLICIES = st.builds(DstPolicy, st.sampled_from(list(Gap)), st.sampled_from(list(Overlap)))


@settings(max_examples=400, deadline=None)
@given(near_transition(), POLICIES)
def test_resolve_matches_the_reference_near_transitions(case: tuple[str, datetime],
                                                        policy: DstPolicy) -> None:
    zone, wall = case
    tz = load_zone(zone)
    hits, shifted = reference(wall, tz)
    got = resolve(wall, tz, policy)
    if len(hits) == 1:
        assert classify(wall, tz) is WallKind.NORMAL
        assert got == tuple(hits)
    elif len(hits) == 2:
        assert classify(wall, tz) is WallKind.OVERLAP
        expected = {Overlap.FIRST: hits[:1], Overlap.SECOND: hits[1:], Overlap.BOTH: hits}
        assert list(got) == expected[policy.overlap]
    else:
        assert classify(wall, tz) is WallKind.GAP
        assert got == (() if policy.gap is Gap.SKIP else (shifted,))


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(ZONES), st.datetimes(datetime(1990, 1, 1), datetime(2040, 1, 1)))
def test_every_resolved_instant_reads_back_as_its_wall_time_unless_shifted(
        zone: str, wall: datetime) -> None:
    tz = load_zone(zone)
    for at_ms in resolve(wall, tz, DstPolicy(overlap=Overlap.BOTH)):
        back = local(datetime.fromtimestamp(at_ms / 1000, UTC), tz)
        if classify(wall, tz) is not WallKind.GAP:
            assert abs((back - wall).total_seconds()) < 0.001


NY = "America/New_York"


@pytest.mark.parametrize(("wall", "policy", "expected"), [
    # spring forward 2027-03-14: 02:00-03:00 does not exist
    (datetime(2027, 3, 14, 2, 30), DstPolicy(), ["2027-03-14T07:30:00.000Z"]),  # = 03:30 EDT
    (datetime(2027, 3, 14, 2, 30), DstPolicy(gap=Gap.SKIP), []),
    # fall back 2027-11-07: 01:00-02:00 happens twice
    (datetime(2027, 11, 7, 1, 30), DstPolicy(), ["2027-11-07T05:30:00.000Z"]),
    (datetime(2027, 11, 7, 1, 30), DstPolicy(overlap=Overlap.SECOND),
     ["2027-11-07T06:30:00.000Z"]),
    (datetime(2027, 11, 7, 1, 30), DstPolicy(overlap=Overlap.BOTH),
     ["2027-11-07T05:30:00.000Z", "2027-11-07T06:30:00.000Z"]),
    (datetime(2027, 7, 1, 9, 0), DstPolicy(gap=Gap.SKIP), ["2027-07-01T13:00:00.000Z"]),
])
def test_new_york_examples(wall: datetime, policy: DstPolicy, expected: list[str]) -> None:
    assert [format_rfc3339_ms(t) for t in resolve(wall, load_zone(NY), policy)] == expected


def test_lord_howe_shifts_by_half_an_hour() -> None:
    # 2027-10-03 02:00 → 02:30 (+10:30 → +11)
    tz = load_zone("Australia/Lord_Howe")
    assert classify(datetime(2027, 10, 3, 2, 15), tz) is WallKind.GAP
    assert [format_rfc3339_ms(t) for t in resolve(datetime(2027, 10, 3, 2, 15), tz,
                                                   DstPolicy())] == ["2027-10-02T15:45:00.000Z"]


@pytest.mark.parametrize("name", ["", "Mars/Olympus", "../etc/passwd", "EST5EDT/x", 5, None,
                                  "America/" + "x" * 100])
def test_unknown_zones_are_invalid_requests_naming_the_field(name: object) -> None:
    with pytest.raises(InvalidRequest) as e:
        load_zone(name)
    assert e.value.extra == {"field": "timeZone"}


def test_zone_rules_come_from_the_tzdata_package() -> None:
    assert zoneinfo.TZPATH == ()  # the OS's zone files are switched off
    assert TZDATA_VERSION >= "2026f"
