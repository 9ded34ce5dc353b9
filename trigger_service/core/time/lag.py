"""Fire lag: its histogram buckets, a per-slot tally a dispatcher keeps until it publishes
it, and percentiles over a window of slots.

The same buckets serve ``trigger_fire_lag_seconds`` (Prometheus) and the ops overview's
percentiles, which are computed like PromQL's ``histogram_quantile``: linear within the
bucket the rank falls in, so a percentile is exact to a bucket's width.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

# 1 ms .. 60 s (seconds); a lag above the last bound is counted in the +Inf bucket.
FIRE_LAG_BUCKETS_S: tuple[float, ...] = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
BUCKETS = len(FIRE_LAG_BUCKETS_S) + 1  # with +Inf
LAG_WINDOW_S = 300
LAG_SLOT_S = 10
_KEEP_SLOTS = LAG_WINDOW_S // LAG_SLOT_S + 1


def bucket_of(lag_s: float) -> int:
    """Index of the bucket ``lag_s`` falls in (upper bounds inclusive, as Prometheus)."""
    return bisect.bisect_left(FIRE_LAG_BUCKETS_S, lag_s)


def slot_of(at_ms: int) -> int:
    """The slot (its start, in epoch seconds) that ``at_ms`` falls in."""
    return at_ms // 1000 // LAG_SLOT_S * LAG_SLOT_S


def window_slots(now_ms: int) -> list[int]:
    """The slots of the last ``LAG_WINDOW_S`` (the current one included)."""
    current = slot_of(now_ms)
    return [current - i * LAG_SLOT_S for i in range(LAG_WINDOW_S // LAG_SLOT_S)]


class LagTally:
    """Bucket counts per slot, not yet published. Bounded: slots older than the window are
    dropped (nobody would read them)."""

    def __init__(self) -> None:
        self._slots: dict[int, list[int]] = {}

    def add(self, at_ms: int, lag_s: float) -> None:
        slot = slot_of(at_ms)
        counts = self._slots.get(slot)
        if counts is None:
            counts = self._slots[slot] = [0] * BUCKETS
            for old in sorted(self._slots)[:-_KEEP_SLOTS]:
                del self._slots[old]
        counts[bucket_of(lag_s)] += 1

    def take(self) -> dict[int, list[int]]:
        """Everything tallied so far; the tally starts again empty."""
        slots, self._slots = self._slots, {}
        return slots

    def put_back(self, slots: dict[int, list[int]]) -> None:
        """Add back what ``take`` returned (its publication failed)."""
        for slot, counts in slots.items():
            mine = self._slots.setdefault(slot, [0] * BUCKETS)
            for i, n in enumerate(counts):
                mine[i] += n


def percentile_s(counts: Sequence[int], q: float) -> float | None:
    """The ``q`` quantile (0..1) of the bucket ``counts``; None when there is none. A rank in
    the +Inf bucket answers the last finite bound (as ``histogram_quantile``)."""
    total = sum(counts)
    if total == 0:
        return None
    rank = q * total
    seen = 0
    for i, n in enumerate(counts):
        if n and seen + n >= rank:
            if i >= len(FIRE_LAG_BUCKETS_S):
                return FIRE_LAG_BUCKETS_S[-1]
            lower = FIRE_LAG_BUCKETS_S[i - 1] if i else 0.0
            upper = FIRE_LAG_BUCKETS_S[i]
            return lower + (upper - lower) * (rank - seen) / n
        seen += n
    return FIRE_LAG_BUCKETS_S[-1]
