"""``StreamGate``: caps per caller and per process, Retry-After from the oldest stream's end,
lifetimes spread over their last tenth, and release."""

from __future__ import annotations

import random

import pytest

from trigger_service.core.errors import TooManyStreams
from trigger_service.core.notify.streams import StreamCaps, StreamGate

NOW_MS = 1_700_000_000_000
CAPS = StreamCaps(max_streams=3, max_per_caller=2, lifetime_ms=600_000)


def test_a_caller_at_its_cap_is_refused_until_one_of_its_streams_is_released() -> None:
    gate = StreamGate(random.Random(1))
    first = gate.admit("orders", NOW_MS, CAPS)
    second = gate.admit("orders", NOW_MS + 5_000, CAPS)
    with pytest.raises(TooManyStreams) as refused:
        gate.admit("orders", NOW_MS + 10_000, CAPS)
    # Retry-After: until the earlier end of the two, whole seconds rounded up.
    earliest_ms = min(first.ends_at_ms, second.ends_at_ms)
    assert refused.value.retry_after_s == -(-(earliest_ms - NOW_MS - 10_000) // 1000)
    assert refused.value.headers() == {"Retry-After": str(refused.value.retry_after_s)}
    assert refused.value.status == 429 and refused.value.code == "too_many_streams"
    assert gate.open_streams("orders") == 2  # the refused one was not counted
    gate.admit("billing", NOW_MS, CAPS)  # another caller still gets one
    gate.release(first)
    gate.release(first)  # safe to repeat
    assert gate.open_streams("orders") == 1 and gate.open_streams() == 2
    gate.admit("orders", NOW_MS, CAPS)  # its place is free again


def test_the_process_cap_refuses_every_caller_with_the_earliest_end() -> None:
    gate = StreamGate(random.Random(2))
    tickets = [gate.admit(c, NOW_MS, CAPS) for c in ("a", "b", "c")]
    with pytest.raises(TooManyStreams) as refused:
        gate.admit("d", NOW_MS + 1_000, CAPS)
    earliest_ms = min(t.ends_at_ms for t in tickets)
    assert refused.value.retry_after_s == -(-(earliest_ms - NOW_MS - 1_000) // 1000)


def test_retry_after_is_at_least_one_second() -> None:
    gate = StreamGate(random.Random(3))
    ticket = gate.admit("a", NOW_MS, StreamCaps(1, 1, 1_000))
    with pytest.raises(TooManyStreams) as refused:
        gate.admit("a", ticket.ends_at_ms + 5_000, StreamCaps(1, 1, 1_000))  # overdue
    assert refused.value.retry_after_s == 1


def test_lifetimes_end_within_their_last_tenth_and_are_spread() -> None:
    gate = StreamGate(random.Random(4))
    caps = StreamCaps(1000, 1000, 600_000)
    ends = [gate.admit("a", NOW_MS, caps).ends_at_ms - NOW_MS for _ in range(200)]
    assert all(540_000 <= e <= 600_000 for e in ends)
    assert max(ends) - min(ends) > 30_000  # not all together
