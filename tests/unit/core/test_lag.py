"""Fire-lag buckets, the per-slot tally and bucket percentiles (as ``histogram_quantile``)."""

from __future__ import annotations

import pytest

from trigger_service.core.time.lag import (
    BUCKETS,
    FIRE_LAG_BUCKETS_S,
    LAG_SLOT_S,
    LAG_WINDOW_S,
    LagTally,
    bucket_of,
    percentile_s,
    window_slots,
)


def test_buckets_span_1_ms_to_60_s_with_upper_bounds_inclusive() -> None:
    assert FIRE_LAG_BUCKETS_S[0] == 0.001 and FIRE_LAG_BUCKETS_S[-1] == 60.0
    assert bucket_of(0.0) == 0 and bucket_of(0.001) == 0 and bucket_of(0.0011) == 1
    assert bucket_of(61) == BUCKETS - 1  # +Inf


def test_percentiles_interpolate_within_a_bucket() -> None:
    counts = [0] * BUCKETS
    assert percentile_s(counts, 0.5) is None
    counts[bucket_of(0.2)] = 100  # all in (0.1, 0.25]
    assert percentile_s(counts, 0.5) == pytest.approx(0.175)
    assert percentile_s(counts, 0.99) == pytest.approx(0.2485)
    counts[BUCKETS - 1] = 100  # half of them beyond 60 s
    assert percentile_s(counts, 0.99) == 60.0


def test_the_tally_is_per_slot_taken_once_and_bounded() -> None:
    tally = LagTally()
    tally.add(10_000, 0.002)
    tally.add(19_999, 0.002)
    tally.add(20_000, 5)
    slots = tally.take()
    assert set(slots) == {10, 20} and sum(slots[10]) == 2 and sum(slots[20]) == 1
    assert tally.take() == {}
    tally.put_back(slots)
    for i in range(100):
        tally.add(i * LAG_SLOT_S * 1000, 0.01)
    assert len(tally.take()) == LAG_WINDOW_S // LAG_SLOT_S + 1


def test_the_window_is_the_last_five_minutes_of_slots() -> None:
    slots = window_slots(1_000_005_000)
    assert slots[0] == 1_000_000 and len(slots) == 30 and slots[-1] == 1_000_000 - 290
