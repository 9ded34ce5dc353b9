"""The timing wheel's internal invariants, checked by the unit tests (O(everything))."""

from __future__ import annotations

from typing import Any

from sweeper.timing_wheel import TimingWheel
from trigger_service.core.time.timing import ceil_div as _ceil_div


def check_invariants(wheel: TimingWheel[Any]) -> None:
    """Assert every invariant the wheel's docstrings promise."""
    entries = wheel._entries
    now_ms = wheel._now_ms
    wheel_size = wheel._wheel_size
    seen_live: set[str] = set()
    tombstones = 0
    for entry in wheel._due:
        if entries.get(entry[0]) is entry:
            assert entry[0] not in seen_live, f"{entry[0]} stored twice"
            seen_live.add(entry[0])
        else:
            tombstones += 1
    occupied: set[tuple[int, int]] = set()
    c0 = _ceil_div(now_ms, wheel._ticks_ms[0])
    for level, ring in enumerate(wheel._rings):
        tick_ms = wheel._ticks_ms[level]
        lowest = _ceil_div(now_ms, tick_ms)
        for slot, bucket in enumerate(ring):
            if not bucket:
                continue
            numbers = {_ceil_div(e[1], tick_ms) for e in bucket}
            assert len(numbers) == 1, f"level {level} slot {slot} mixes buckets {numbers}"
            (bucket_no,) = numbers
            assert bucket_no % wheel_size == slot
            assert lowest <= bucket_no < lowest + wheel_size, (level, bucket_no, lowest)
            if level > 0 or bucket_no != c0:
                assert (bucket_no - 1) * tick_ms >= now_ms, "passed bucket left behind"
            occupied.add((level, bucket_no))
            for entry in bucket:
                if entries.get(entry[0]) is entry:
                    assert entry[0] not in seen_live, f"{entry[0]} stored twice"
                    assert entry[1] > now_ms, "due timer left in a bucket"
                    seen_live.add(entry[0])
                else:
                    tombstones += 1
    assert seen_live == set(entries), "live index and buckets disagree"
    assert tombstones == wheel._dead, (tombstones, wheel._dead)
    queued = [(level, bucket_no) for _, level, bucket_no in wheel._queue]
    assert len(queued) == len(set(queued)), "bucket queued twice"
    assert set(queued) == occupied, "queue and non-empty buckets disagree"
    for first_ms, level, bucket_no in wheel._queue:
        assert first_ms == (bucket_no - 1) * wheel._ticks_ms[level] + 1
    assert wheel._aligned_ms == now_ms
    assert wheel._limits_ms == [
        (_ceil_div(now_ms, tick_ms) + wheel_size - 1) * tick_ms for tick_ms in wheel._ticks_ms
    ]
