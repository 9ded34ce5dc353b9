"""``Batcher`` on a ManualClock: a lone item goes at once, a crowd goes in full batches, no
item waits longer than the linger, and each caller gets its own item's outcome."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest

from trigger_service.adapters.batching import NO_ERRORS, Batcher, ItemErrors
from trigger_service.core.time.clock import ManualClock

pytestmark = pytest.mark.timeout(10)

LINGER_MS = 20


@dataclass
class Sink:
    """A flush that records (when, batch) and, while ``gate`` is clear, stays in flight."""

    clock: ManualClock
    gate: asyncio.Event = field(default_factory=asyncio.Event)
    batches: list[tuple[int, list[int]]] = field(default_factory=list)
    fail_batch_with: dict[int, Exception] = field(default_factory=dict)  # item -> raise
    fail_item_with: dict[int, Exception] = field(default_factory=dict)  # item -> its error

    def __post_init__(self) -> None:
        self.gate.set()

    async def flush(self, items: Sequence[int]) -> ItemErrors:
        self.batches.append((self.clock.now_ms(), list(items)))
        await self.gate.wait()
        for item in items:
            if item in self.fail_batch_with:
                raise self.fail_batch_with[item]
        return {i: self.fail_item_with[x] for i, x in enumerate(items)
                if x in self.fail_item_with} or NO_ERRORS

    def sizes(self) -> list[int]:
        return [len(b) for _, b in self.batches]


def make() -> tuple[ManualClock, Sink, Batcher[int]]:
    clock = ManualClock(1_000)
    sink = Sink(clock)
    return clock, sink, Batcher(sink.flush, clock, max_batch=10, linger_ms=LINGER_MS)


async def settle(rounds: int = 10) -> None:
    for _ in range(rounds):
        await asyncio.sleep(0)


def submit_all(b: Batcher[int], items: range) -> asyncio.Future[list[object]]:
    return asyncio.gather(*(b.submit(i) for i in items), return_exceptions=True)


async def hold_one(sink: Sink, b: Batcher[int]) -> asyncio.Future[None]:
    """Item 0 sent on an idle batcher (alone, at once) and kept in flight until the gate
    is set again."""
    sink.gate.clear()
    first = asyncio.ensure_future(b.submit(0))
    await settle()
    return first


async def test_a_lone_item_goes_at_once_without_waiting_for_the_linger() -> None:
    _clock, sink, b = make()
    await b.submit(1)  # the clock never moves: no linger was waited for
    assert sink.batches == [(1_000, [1])]
    await b.submit(2)  # idle again once that flush finished: again at once
    assert sink.batches == [(1_000, [1]), (1_000, [2])]


async def test_items_arriving_while_a_flush_is_in_flight_go_in_full_batches() -> None:
    _clock, sink, b = make()
    first = await hold_one(sink, b)
    assert sink.sizes() == [1]  # nothing in flight: sent alone at once
    crowd = submit_all(b, range(1, 31))
    await settle()
    # Thirty more while the first is in flight: three full batches, cut without a linger.
    assert sink.sizes() == [1, 10, 10, 10]
    assert [when for when, _ in sink.batches] == [1_000] * 4
    sink.gate.set()
    assert await crowd == [None] * 30
    await first


async def test_a_concurrent_burst_goes_out_in_full_batches() -> None:
    clock, sink, b = make()
    burst = submit_all(b, range(95))
    await settle()
    # The first found the batcher idle; the rest came while it was in flight.
    assert sink.sizes()[:10] == [1] + [10] * 9
    clock.advance_ms(LINGER_MS)
    assert await burst == [None] * 95
    assert sink.sizes() == [1] + [10] * 9 + [4]
    assert sorted(x for _, batch in sink.batches for x in batch) == list(range(95))


async def test_no_item_waits_longer_than_the_linger() -> None:
    clock, sink, b = make()
    first = await hold_one(sink, b)
    waiting = submit_all(b, range(1, 4))  # in flight: these wait for company
    await settle()
    clock.advance_ms(LINGER_MS - 1)
    await settle()
    assert sink.sizes() == [1]
    clock.advance_ms(1)  # the oldest has waited the linger: the three go, not full
    await settle()
    assert sink.batches[1] == (1_000 + LINGER_MS, [1, 2, 3])
    late = asyncio.ensure_future(b.submit(4))  # a flush still in flight: waits again
    await settle()
    assert sink.sizes() == [1, 3]
    clock.advance_ms(LINGER_MS)
    await settle()
    assert sink.batches[2] == (1_000 + 2 * LINGER_MS, [4])
    sink.gate.set()
    assert await waiting == [None] * 3
    await asyncio.gather(first, late)


async def test_a_failed_flush_reaches_every_caller_of_that_batch_and_no_other() -> None:
    clock, sink, b = make()
    boom = RuntimeError("boom")
    sink.fail_batch_with[13] = boom
    burst = submit_all(b, range(25))
    await settle()
    clock.advance_ms(LINGER_MS)
    results = await burst
    bad_batch = next(batch for _, batch in sink.batches if 13 in batch)
    assert {i for i, r in enumerate(results) if r is boom} == set(bad_batch)
    assert all(r is None for i, r in enumerate(results) if i not in bad_batch)


async def test_an_item_error_reaches_only_that_items_caller() -> None:
    _clock, sink, b = make()
    gone = LookupError("receipt gone")
    sink.fail_item_with[5] = gone
    burst = submit_all(b, range(11))
    await settle()
    results = await burst
    assert sink.sizes() == [1, 10]
    assert results[5] is gone and [r for i, r in enumerate(results) if i != 5] == [None] * 10


async def test_drain_sends_what_waits_without_the_linger() -> None:
    _clock, sink, b = make()
    first = await hold_one(sink, b)
    waiting = submit_all(b, range(1, 3))
    await settle()
    sink.gate.set()
    await b.drain()
    assert sink.batches == [(1_000, [0]), (1_000, [1, 2])]
    assert await waiting == [None, None]
    await first


async def test_a_cancelled_caller_does_not_stop_its_batch() -> None:
    clock, sink, b = make()
    first = await hold_one(sink, b)
    gone = asyncio.ensure_future(b.submit(1))
    kept = asyncio.ensure_future(b.submit(2))
    await settle()
    gone.cancel()
    clock.advance_ms(LINGER_MS)
    sink.gate.set()
    await asyncio.gather(first, kept)
    assert sink.batches[1] == (1_000 + LINGER_MS, [1, 2])
    assert gone.cancelled()


async def test_submit_many_on_an_idle_batcher_sends_everything_at_once() -> None:
    _clock, sink, b = make()
    sink.fail_item_with[7] = gone = LookupError("receipt gone")
    results = await b.submit_many(list(range(25)))  # the clock never moves
    assert sink.sizes() == [10, 10, 5]
    assert results[7] is gone and results.count(None) == 24


async def test_submit_many_in_company_cuts_the_full_batches_and_the_rest_waits() -> None:
    clock, sink, b = make()
    first = await hold_one(sink, b)
    many = asyncio.ensure_future(b.submit_many(list(range(1, 13))))
    await settle()
    assert sink.sizes() == [1, 10]
    late = asyncio.ensure_future(b.submit(13))  # joins the two that wait
    await settle()
    clock.advance_ms(LINGER_MS)
    await settle()
    assert sink.batches[2] == (1_000 + LINGER_MS, [11, 12, 13])
    sink.gate.set()
    assert await many == [None] * 12
    await asyncio.gather(first, late)


async def test_batches_grow_to_the_busy_size_once_enough_flushes_are_in_flight() -> None:
    clock = ManualClock(1_000)
    sink = Sink(clock)
    b: Batcher[int] = Batcher(sink.flush, clock, max_batch=2, linger_ms=LINGER_MS,
                              max_concurrent_flushes=10, busy_batch=5, busy_flushes=3)
    first = await hold_one(sink, b)
    crowd = submit_all(b, range(1, 17))
    await settle()
    # One in flight, then batches of 2 until three are in flight, then batches of 5; the
    # last two wait for company (fewer than the busy size).
    assert sink.sizes() == [1, 2, 2, 5, 5]
    clock.advance_ms(LINGER_MS)
    await settle()
    assert sink.sizes() == [1, 2, 2, 5, 5, 2]
    sink.gate.set()
    assert await crowd == [None] * 16
    await first
    # Idle again: a lone item goes at once, and a crowd goes in batches of 2 again.
    await b.submit(20)
    crowd = submit_all(b, range(21, 26))
    await settle()
    assert sink.sizes()[-4:] == [1, 1, 2, 2]
    clock.advance_ms(LINGER_MS)
    assert await crowd == [None] * 5


async def test_without_a_busy_size_the_batch_size_never_changes() -> None:
    _clock, sink, b = make()
    first = await hold_one(sink, b)
    crowd = submit_all(b, range(1, 61))
    await settle()
    assert sink.sizes() == [1] + [10] * 6
    sink.gate.set()
    assert await crowd == [None] * 60
    await first
