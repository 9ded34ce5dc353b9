"""Jitter: the offset of an occurrence from its id (never early, within the window, the same
every time, spread over the window), the scheduled instant a trigger keeps through its
states, and a jittered series stepping through exactly the unjittered one's occurrences."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

import pytest

from trigger_service.core.model import Route, Status, Trigger, new_trigger_id
from trigger_service.core.time import series
from trigger_service.core.time.jitter import jitter_offset_ms
from trigger_service.core.time.recurrence import Recurrence, RuleKind
from trigger_service.core.time.timing import DAY_MS, parse_rfc3339_ms
from trigger_service.core.time.zones import DstPolicy

NOW_MS = parse_rfc3339_ms("2027-03-12T12:00:00Z")
ID = "trg_01HF7YAT008N6MGYNT0J0TPEHG"


@pytest.mark.parametrize("jitter_s", [1, 7, 60, 3600, 86_400])
def test_an_offset_is_within_its_window_in_whole_milliseconds(jitter_s: int) -> None:
    for n in range(1, 601):
        offset = jitter_offset_ms(f"{ID}.{n}", jitter_s)
        assert isinstance(offset, int) and 0 <= offset <= jitter_s * 1000


def test_no_window_is_no_offset() -> None:
    assert {jitter_offset_ms(f"{ID}.{n}", 0) for n in range(1, 100)} == {0}


def test_an_offset_is_the_same_for_the_same_occurrence_and_differs_between_them() -> None:
    assert jitter_offset_ms(f"{ID}.3", 3600) == jitter_offset_ms(f"{ID}.3", 3600)
    # Pinned: the derivation is part of the contract (every process and release agrees).
    assert (jitter_offset_ms(f"{ID}.1", 3600), jitter_offset_ms(f"{ID}.2", 60)) == (
        2_082_871, 9_545)
    offsets = {jitter_offset_ms(f"{ID}.{n}", 3600) for n in range(1, 101)}
    assert len(offsets) > 95


def test_offsets_spread_over_the_whole_window() -> None:
    window_ms = 600 * 1000
    ids = [new_trigger_id(NOW_MS + i) for i in range(20_000)]
    offsets = [jitter_offset_ms(f"{tid}.1", 600) for tid in ids]
    assert min(offsets) < window_ms * 0.01 and max(offsets) > window_ms * 0.99
    tenths = [0] * 10
    for offset in offsets:
        tenths[min(9, offset * 10 // window_ms)] += 1
    # Uniform: 2,000 per tenth expected; 1,800..2,200 is more than 4 standard deviations.
    assert all(1_800 <= count <= 2_200 for count in tenths), tenths


def quarter_hourly(jitter_s: int) -> Trigger:
    rec = Recurrence(RuleKind.RRULE, "FREQ=MINUTELY;INTERVAL=15", "Europe/Berlin",
                     datetime(2027, 3, 12, 13, 0), DstPolicy())
    t = Trigger(ID, "caller-a", "https://example.test/hook", "{}", NOW_MS, NOW_MS, 0,
                Route.SWEEP, schedule=rec, jitter_s=jitter_s)
    return t.jittered(NOW_MS)


def test_a_trigger_keeps_its_scheduled_instant_through_its_states() -> None:
    t = quarter_hourly(3600)
    assert t.scheduled_at_ms == NOW_MS
    assert NOW_MS <= t.fire_at_ms <= NOW_MS + 3_600_000
    claimed = replace(t, status=Status.IN_FLIGHT, claim_id="c", attempts=1)
    assert claimed.scheduled_at_ms == NOW_MS and claimed.occurrence_key[0] == NOW_MS
    # Finishing counts the occurrence (occurrence_seq + 1); fire_at_ms is still that one's.
    for done in (series.finished(claimed, fired=True, now_ms=t.fire_at_ms, error=None),
                 series.finished(claimed, fired=False, now_ms=t.fire_at_ms, error="x")):
        assert done.occurrence_seq == 1 and done.scheduled_at_ms == NOW_MS
    assert replace(t, jitter_s=0).scheduled_at_ms == t.fire_at_ms  # no jitter: the same


def steps(t: Trigger, count: int, *, late_ms: int = 0) -> list[Trigger]:
    """The first ``count`` occurrences of ``t``'s series, each fired ``late_ms`` after its
    (jittered) fire time."""
    out = [t]
    while len(out) < count:
        cur = replace(out[-1], status=Status.IN_FLIGHT, claim_id="c")
        nxt = series.next_after(cur, fired=True, now_ms=cur.fire_at_ms + late_ms,
                                horizon_days=366, direct_max_delay_s=900)
        assert nxt is not None
        out.append(nxt)
    return out


@pytest.mark.parametrize(("jitter_s", "late_ms"), [(600, 0), (3600, 5_000)])  # 4 periods
def test_a_jittered_series_steps_through_the_unjittered_ones_occurrences(
        jitter_s: int, late_ms: int) -> None:
    plain = steps(quarter_hourly(0), 60, late_ms=late_ms)
    jittered = steps(quarter_hourly(jitter_s), 60, late_ms=late_ms)
    assert [t.scheduled_at_ms for t in jittered] == [t.fire_at_ms for t in plain]
    assert [t.occurrence_key for t in jittered] == [t.occurrence_key for t in plain]
    assert [t.occurrence_seq for t in jittered] == list(range(60))
    for t in jittered:
        assert t.scheduled_at_ms <= t.fire_at_ms <= t.scheduled_at_ms + jitter_s * 1000
        assert t.jitter_ms == jitter_offset_ms(t.occurrence_id, jitter_s)
    assert len({t.jitter_ms for t in jittered}) > 50  # a new offset each occurrence
    assert jittered[-1].scheduled_at_ms - jittered[0].scheduled_at_ms < DAY_MS
