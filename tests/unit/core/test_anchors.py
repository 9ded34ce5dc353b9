"""Anchored expansion yields exactly what expansion from DTSTART yields (pure).

The reference here is the definition itself: every wall instance from DTSTART
(``wall_instances``), EXDATEs left out, each resolved by the DST policy, the keys sorted. The
code under test starts at a stored anchor, at one computed for a fixed-step rule, or at the
one a series stepped to, and skips resolving wall times that cannot reach the cursor.
"""

from __future__ import annotations

import zoneinfo
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trigger_service.core.time.anchors import (
    Anchor,
    Tracker,
    bound_wall,
    cron_fast_forward,
    fast_forward,
    fixed_step,
    usable,
)
from trigger_service.core.time.recurrence import (
    Recurrence,
    RuleKind,
    instances,
    occurrences,
    parse_rule,
    wall_instances,
)
from trigger_service.core.time.rule_walk import SERIES_STEPS
from trigger_service.core.time.series import Step, step_schedule
from trigger_service.core.time.timing import datetime_to_ms
from trigger_service.core.time.zone_offsets import offset_bounds
from trigger_service.core.time.zones import DstPolicy, Gap, Overlap, load_zone, resolve

Key = tuple[int, int, bool]
# The cases walk thousands of instances (a cron every 20 minutes for 40 days): more than a
# request's budget allows, the dispatcher's room.
STEPS = SERIES_STEPS

# Each zone with a day where its offset changes: the anchors and cursors land around it.
ZONES = {
    "America/New_York": [datetime(2027, 3, 14), datetime(2027, 11, 7)],
    "Europe/London": [datetime(2027, 3, 28), datetime(2027, 10, 31)],
    "Australia/Lord_Howe": [datetime(2027, 4, 4), datetime(2027, 10, 3)],  # 30-minute shift
    "Pacific/Apia": [datetime(2011, 12, 30)],  # the day that was skipped
    "Asia/Tokyo": [datetime(2027, 1, 1)],
}
# (FREQ, the span of wall time a case covers): enough instances, a bounded test.
FREQS = {"MINUTELY": timedelta(hours=30), "HOURLY": timedelta(days=12),
         "DAILY": timedelta(days=200), "WEEKLY": timedelta(days=500),
         "MONTHLY": timedelta(days=1200), "YEARLY": timedelta(days=4000)}
CRONS = ["30 2 * * *", "*/20 * * * *", "0 1 * * 0", "15 1,2,3 * * *", "45 23 * * 1-5",
         "0 0 1 * *"]
DAYS = ["MO", "TU", "WE", "TH", "FR", "SA", "SU"]


@st.composite
def rrules(draw: st.DrawFn) -> tuple[str, timedelta]:
    freq = draw(st.sampled_from(sorted(FREQS)))
    parts = [f"FREQ={freq}"]
    interval = draw(st.sampled_from([1, 1, 2, 3, 7] if freq != "MINUTELY" else [7, 13, 30]))
    if interval > 1:
        parts.append(f"INTERVAL={interval}")
    if freq in ("DAILY", "WEEKLY", "MONTHLY", "YEARLY") and draw(st.booleans()):
        days = draw(st.lists(st.sampled_from(DAYS), min_size=1, max_size=3, unique=True))
        parts.append("BYDAY=" + ",".join(days))
        if freq in ("MONTHLY", "YEARLY") and draw(st.booleans()):
            parts.append(f"BYSETPOS={draw(st.sampled_from(['1', '-1', '2', '1,-1']))}")
    elif freq in ("MONTHLY", "YEARLY") and draw(st.booleans()):
        parts.append(f"BYMONTHDAY={draw(st.sampled_from(['1', '15', '31', '-1', '29']))}")
    if freq == "DAILY" and draw(st.booleans()):
        parts.append(f"BYHOUR={draw(st.sampled_from(['1,2,3', '2', '0,12']))};BYMINUTE=30")
    ending = draw(st.sampled_from(["", "count", "until"]))
    span = FREQS[freq] * min(interval, 2) if freq != "MINUTELY" else FREQS[freq]
    if ending == "count":
        parts.append(f"COUNT={draw(st.integers(1, 60))}")
    return ";".join(parts) + ("|until" if ending == "until" else ""), span


@st.composite
def schedules(draw: st.DrawFn) -> tuple[Recurrence, datetime]:
    zone = draw(st.sampled_from(sorted(ZONES)))
    pivot = draw(st.sampled_from(ZONES[zone]))
    kind = draw(st.sampled_from([RuleKind.RRULE, RuleKind.RRULE, RuleKind.CRON]))
    if kind is RuleKind.RRULE:
        text, span = draw(rrules())
    else:
        text, span = draw(st.sampled_from(CRONS)), timedelta(days=40)
    before = draw(st.integers(0, max(1, int(span.total_seconds() // 120))))
    dtstart = (pivot - timedelta(seconds=before * 60)).replace(
        hour=draw(st.integers(0, 23)), minute=draw(st.sampled_from([0, 15, 30, 45])),
        microsecond=draw(st.sampled_from([0, 0, 250_000])))
    limit = dtstart + span
    if text.endswith("|until"):
        until = dtstart + span * draw(st.floats(0.2, 0.8))
        text = text.removesuffix("|until") + f";UNTIL={until:%Y%m%dT%H%M%S}"
    policy = DstPolicy(draw(st.sampled_from(list(Gap))), draw(st.sampled_from(list(Overlap))))
    rule = parse_rule(kind, text, load_zone(zone), dtstart)
    walls = list(wall_instances(Recurrence(kind, rule, zone, dtstart, policy), limit, STEPS))
    excluded = draw(st.lists(st.sampled_from(walls), max_size=4)) if walls else []
    exdates = tuple(sorted({w.replace(microsecond=0) for w in excluded}))
    return Recurrence(kind, rule, zone, dtstart, policy, exdates), limit


def reference(rec: Recurrence, limit: datetime) -> list[Key]:
    """Every occurrence's key by the definition: from DTSTART, EXDATEs out, resolved, sorted."""
    plain = replace(rec, anchor=None)
    out = []
    for index, wall in enumerate(wall_instances(plain, limit, STEPS)):
        if wall.replace(microsecond=0) in rec.exdates:
            continue
        for n, at_ms in enumerate(resolve(wall, rec.zone, rec.dst)):
            out.append((at_ms, index, n == 1))
    return sorted(out)


def step(rec: Recurrence, *, limit: datetime, after: Key | None = None,
         not_before_ms: int | None = None) -> Step:
    return step_schedule(rec, limit=limit, after=after, not_before_ms=not_before_ms,
                         max_steps=STEPS)


def walked(rec: Recurrence, limit: datetime, first_bound_ms: int,
           steps: int = 10**9) -> tuple[list[Key], int]:
    """A series stepping through ``steps`` occurrences from ``first_bound_ms`` (or to its
    end), re-anchoring at each step as the dispatcher does; the keys and the last anchor's
    index."""
    moved = step(rec, limit=limit, not_before_ms=first_bound_ms)
    keys: list[Key] = []
    while moved.occurrence is not None and len(keys) < steps:
        keys.append(moved.occurrence.key)
        moved = step(moved.schedule, limit=limit, after=moved.occurrence.key)
    return keys, (moved.schedule.anchor.index if moved.schedule.anchor else -1)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schedules(), st.data())
def test_stepping_with_anchors_yields_the_occurrences_from_dtstart(
        case: tuple[Recurrence, datetime], data: st.DataObject) -> None:
    rec, limit = case
    expected = reference(rec, limit)
    start = data.draw(st.integers(0, max(0, len(expected) - 1)))
    bound_ms = expected[start][0] if expected else 0
    keys, _ = walked(rec, limit, bound_ms, steps=60)
    assert keys == [k for k in expected if k[0] >= bound_ms][:60]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schedules(), st.data())
def test_any_usable_anchor_gives_the_same_occurrences_after_a_cursor(
        case: tuple[Recurrence, datetime], data: st.DataObject) -> None:
    rec, limit = case
    expected = reference(rec, limit)
    if not expected:
        return
    cursor = expected[data.draw(st.integers(0, len(expected) - 1))]
    candidates = [a for a in instances(rec, limit, None, STEPS)
                  if usable(a, rec.time_zone, cursor[0])]
    anchor = data.draw(st.sampled_from(candidates)) if candidates else None
    anchored = replace(rec, anchor=anchor)
    got = [o.key for o in occurrences(anchored, limit=limit, after=cursor, max_steps=STEPS)]
    assert got == [k for k in expected if k > cursor]


def test_a_long_minutely_series_is_anchored_near_its_cursor() -> None:
    zone = "America/New_York"
    start = datetime(2027, 3, 14, 0, 0)  # across the spring gap at 02:00
    rec = Recurrence(RuleKind.RRULE, "FREQ=MINUTELY;BYSECOND=0,30", zone, start)  # not fixed-step
    limit = start + timedelta(hours=4)
    keys, last_anchor = walked(rec, limit, datetime_to_ms(start.replace(tzinfo=UTC)))
    assert keys == reference(rec, limit)
    # The anchor followed the series: within the zone's offset range of its last occurrence.
    lo, hi = offset_bounds(zone)
    assert len(keys) - last_anchor <= (hi - lo) / timedelta(seconds=30) + 4


def test_a_schedule_stored_without_anchor_is_read_and_stepped_from_dtstart() -> None:
    rec = Recurrence(RuleKind.RRULE, "FREQ=DAILY;BYDAY=MO,WE", "Europe/London",
                     datetime(2026, 1, 5, 9, 0))
    stored = rec.to_dict()
    assert "anchor" not in stored
    old = Recurrence.from_dict(stored)
    limit = datetime(2027, 1, 1)
    moved = step(old, limit=limit, not_before_ms=datetime_to_ms(datetime(2026, 6, 1, tzinfo=UTC)))
    assert moved.occurrence is not None and moved.schedule.anchor is not None
    again = Recurrence.from_dict(moved.schedule.to_dict())
    assert again.anchor == moved.schedule.anchor and again == old  # the anchor: no meaning
    nxt = step(again, limit=limit, after=moved.occurrence.key).occurrence
    assert nxt is not None
    assert [moved.occurrence.key, nxt.key] == [
        k for k in reference(old, limit) if k[0] >= moved.occurrence.at_ms][:2]


@pytest.mark.parametrize(("rule", "expected"), [
    ("FREQ=MINUTELY;INTERVAL=5", timedelta(minutes=5)), ("FREQ=DAILY", timedelta(days=1)),
    ("FREQ=WEEKLY;INTERVAL=2;COUNT=10", timedelta(weeks=2)), ("FREQ=WEEKLY;BYDAY=MO", None),
    ("FREQ=MONTHLY", None), ("FREQ=DAILY;BYHOUR=9", None)])
def test_fixed_step_rules_are_the_ones_without_narrowing_parts(
        rule: str, expected: timedelta | None) -> None:
    assert fixed_step(rule) == expected


def test_fast_forward_lands_on_an_instance_with_its_index() -> None:
    start = datetime(2025, 11, 26, 9, 0, 0, 250_000)
    bound_ms = datetime_to_ms(datetime(2026, 11, 26, 12, 0, tzinfo=UTC))
    a = fast_forward("FREQ=MINUTELY;INTERVAL=7", start, "America/New_York", bound_ms)
    assert a is not None
    walls = {i: w for i, w in enumerate(wall_instances(Recurrence(
        RuleKind.RRULE, "FREQ=MINUTELY;INTERVAL=7", "America/New_York", start),
        a.wall + timedelta(minutes=1), STEPS))}
    assert walls[a.index] == a.wall
    assert usable(a, "America/New_York", bound_ms)
    assert not usable(Anchor(a.wall + timedelta(minutes=7), a.index + 1), "America/New_York",
                      bound_ms)


@pytest.mark.parametrize("zone", ["Pacific/Apia", "America/New_York", "Australia/Lord_Howe",
                                  "Asia/Manila", "America/Sitka"])
def test_no_wall_time_before_the_anchor_resolves_after_the_cursor(zone: str) -> None:
    """The bound itself: for cursors every 20 minutes across the zone's transition, the
    anchor a minutely series would take is usable, and wall minutes of the two days before it
    resolve (under every policy, both instants) strictly before the cursor."""
    tz = zoneinfo.ZoneInfo(zone)
    pivot = ZONES.get(zone, [datetime(1844, 12, 31)])[0] if zone != "America/Sitka" else \
        datetime(1867, 10, 18)
    rec = Recurrence(RuleKind.RRULE, "FREQ=MINUTELY", zone, pivot - timedelta(days=3))
    limit = pivot + timedelta(days=2)
    both = DstPolicy(Gap.SHIFT, Overlap.BOTH)
    walls = list(instances(rec, limit, None, STEPS))
    checked = 0
    for minutes in range(-18 * 60, 18 * 60, 20):
        cursor_ms = datetime_to_ms((pivot + timedelta(minutes=minutes)).replace(tzinfo=UTC))
        tracker = Tracker(zone, cursor_ms - 3 * 3600_000)
        for a in walls:
            tracker.saw(a)
        anchor = tracker.anchor_for(cursor_ms)
        assert anchor is not None and usable(anchor, zone, cursor_ms)
        assert not usable(walls[anchor.index + 1], zone, cursor_ms)  # the latest one
        for back in range(1, 2 * 24 * 60, 11):
            wall = anchor.wall - timedelta(minutes=back)
            assert all(at < cursor_ms for at in resolve(wall, tz, both)), (wall, cursor_ms)
            checked += 1
    assert checked > 0


def test_offset_bounds_hold_every_offset_a_zone_uses() -> None:
    for name in sorted(zoneinfo.available_timezones())[::7]:
        tz = zoneinfo.ZoneInfo(name)
        lo, hi = offset_bounds(name)
        at = datetime(1800, 1, 1, tzinfo=UTC)
        while at.year < 2100:
            off = at.astimezone(tz).utcoffset()
            assert off is not None and lo <= off <= hi, (name, at)
            at += timedelta(days=61)


@pytest.mark.parametrize("expr", ["* * * * *", "0 1 * * 0", "45 23 * * 1-5", "*/20 * * * *",
                                  "0 0 1 * *", "15 1,2,3 * * *", "30 2 1,15 * *",
                                  "0 */3 * 1-6 *", "5 0 * * 7", "0 0 * * *"])
def test_cron_fast_forward_counts_the_matches_from_dtstart(expr: str) -> None:
    for start, days in [(datetime(2026, 1, 6, 8, 47), 9), (datetime(2026, 2, 28, 23, 59, 30), 31),
                        (datetime(2026, 3, 1, 0, 0), 200)]:
        if expr.startswith("*") and days > 31:
            continue  # every minute for months: a slow reference
        bound_ms = datetime_to_ms((start + timedelta(days=days, hours=5)).replace(tzinfo=UTC))
        a = cron_fast_forward(expr, start, "Pacific/Apia", bound_ms)
        rec = Recurrence(RuleKind.CRON, expr, "Pacific/Apia", start)
        latest = bound_wall(bound_ms) + offset_bounds("Pacific/Apia")[0]
        if a is None:  # no match yet: nothing to count
            assert not list(instances(rec, latest, None, STEPS))
            continue
        assert usable(a, "Pacific/Apia", bound_ms)
        walls = list(instances(rec, latest, None, STEPS))
        assert walls[-1] == a
        # Counted from an earlier anchor instead of DTSTART: the same.
        assert cron_fast_forward(expr, start, "Pacific/Apia", bound_ms, walls[len(walls) // 3]) == a


@pytest.mark.parametrize("expr", ["0 0 L * *", "0 0 * * 5#3", "0 0 1 * 1"])
def test_cron_fast_forward_declines_what_it_cannot_count(expr: str) -> None:
    bound_ms = datetime_to_ms(datetime(2027, 1, 1, tzinfo=UTC))
    assert cron_fast_forward(expr, datetime(2026, 1, 1), "UTC", bound_ms) is None
