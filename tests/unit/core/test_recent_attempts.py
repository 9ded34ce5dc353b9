"""``core.recent_attempts``: the ring's slots keep the newest attempts, and pages go on from
their cursor without repeating or skipping one."""

from __future__ import annotations

import math

import pytest

from trigger_service.core.dead_letters import Attempt, AttemptOutcome
from trigger_service.core.recent_attempts import (
    attempt_number,
    decode_cursor,
    encode_cursor,
    newest_first,
    page,
    ring_slot,
    stride,
)


def attempt(seq: int, n: int, at_ms: int, kept: int = 10) -> Attempt:
    return Attempt("trg_x", f"trg_x.{seq + 1}", n, at_ms, 5, 503, "HTTP 503", None, "d",
                   outcome=AttemptOutcome.RETRY, number=attempt_number(seq, n, kept))


@pytest.mark.parametrize("kept", [1, 7, 8, 10, 100, 210])
def test_the_stride_is_coprime_with_the_ring(kept: int) -> None:
    assert stride(kept) >= 8 and math.gcd(stride(kept), kept) == 1


def test_a_series_delivered_first_time_fills_every_slot_with_its_newest_occurrences() -> None:
    kept = 10
    ring: dict[int, int] = {}
    for seq in range(100):
        ring[ring_slot(attempt_number(seq, 1, kept), kept)] = seq
    assert sorted(ring.values()) == list(range(90, 100))


def test_a_later_attempt_never_loses_its_slot_to_an_earlier_one() -> None:
    kept = 10
    numbers = [attempt_number(seq, n, kept) for seq in range(30) for n in (1, 2, 3)]
    assert numbers == sorted(numbers) and len(set(numbers)) == len(numbers)
    ring: dict[int, int] = {}
    for number in numbers:
        ring[ring_slot(number, kept)] = number
    assert max(numbers) in ring.values() and len(ring) <= kept


def test_pages_go_newest_first_from_their_cursor() -> None:
    found = [attempt(0, n, 1_000 * n) for n in range(1, 6)]
    ordered = newest_first(list(reversed(found)), kept=4)
    assert [a.attempt for a in ordered] == [5, 4, 3, 2]  # the newest ``kept``
    first = page(ordered, None, 3)
    assert [a.attempt for a in first.items] == [5, 4, 3] and first.next_cursor is not None
    after = decode_cursor(encode_cursor(first.next_cursor))
    last = page(ordered, after, 3)
    assert [a.attempt for a in last.items] == [2] and last.next_cursor is None


@pytest.mark.parametrize("text", ["garbage", "W10", "WyJ4IiwxLDIsM10", "x" * 500])
def test_a_cursor_not_made_here_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        decode_cursor(text)
