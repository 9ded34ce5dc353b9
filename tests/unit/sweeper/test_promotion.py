"""Promotions batched across shards: what expires in one wheel tick goes out in
SendMessageBatch-sized ``send_many`` calls of up to 10, behind one fencing check, never
early; a failed request retries only the triggers it carried."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import pytest

from tests.unit.sweeper.test_sweeper import (
    AHEAD_MS,
    ALL,
    GROUP,
    Rig,
    make_rig,
    put,
    settle,
    start,
)
from trigger_service.adapters.memory.store import MemoryQueue, MemoryStore
from trigger_service.core.errors import QueueError
from trigger_service.core.model import Status, Trigger
from trigger_service.core.ports.values import OutgoingMessage
from trigger_service.core.time.clock import ManualClock

FIRE_MS = 1_700_000_100_000  # 100 s after the rig's start: read into the wheel at once


@pytest.fixture
def rig() -> Rig:
    return make_rig(lease_ttl_s=600.0)  # outlives every clock move here


async def spread(rig: Rig, per_shard: dict[int, int], fire_ms: int = FIRE_MS) -> list[Trigger]:
    return [await put(rig.store, fire_ms, shard=s) for s, n in per_shard.items()
            for _ in range(n)]


async def test_a_ticks_triggers_from_every_shard_share_full_batches(rig: Rig) -> None:
    sw = rig.sweeper()
    ts = await spread(rig, {s: 3 for s in ALL} | {0: 4})  # 25 over 8 shards
    await sw.run_once()
    rig.store.calls.clear()
    rig.lease.calls.clear()
    rig.clock.set_ms(FIRE_MS - AHEAD_MS)
    await sw.run_once()
    assert sorted(rig.sent_ids()) == sorted(t.trigger_id for t in ts)
    assert rig.queue.send_calls == [25]  # one call (packs, 10 a request), not one per shard
    assert rig.store.calls["get_many"] == 1  # one IN request of 25
    # One fencing check for the eight shards (the fake's renew checks through held too).
    assert rig.lease.calls["held"] == rig.lease.calls["renew"] + 1
    assert rig.count("promoted_total") == 25
    assert {s: ms for (_, s), ms in rig.store.cursors.items()} == dict.fromkeys(
        ALL, FIRE_MS - AHEAD_MS + 120_000)


async def test_skipped_triggers_leave_no_gap_in_a_batch(rig: Rig) -> None:
    sw = rig.sweeper()
    ts = await spread(rig, dict.fromkeys(range(6), 2))
    await sw.run_once()
    for t in ts[::3]:  # four of twelve cancelled meanwhile
        assert await rig.store.compare_and_set(t, replace(t, status=Status.CANCELLED))
    rig.clock.set_ms(FIRE_MS - AHEAD_MS)
    await sw.run_once()
    assert rig.queue.send_calls == [8]
    assert rig.count("promotion_skipped_total") == 4


async def test_nothing_is_promoted_before_its_time_even_in_a_shared_tick(rig: Rig) -> None:
    sw = rig.sweeper()
    first = await put(rig.store, FIRE_MS + 1, shard=1)  # the same 10 ms wheel tick
    second = await put(rig.store, FIRE_MS + 4, shard=2)
    await sw.run_once()
    rig.clock.set_ms(first.fire_at_ms - AHEAD_MS)
    await sw.run_once()
    assert rig.sent_ids() == [first.trigger_id]
    rig.clock.advance_ms(2)
    await sw.run_once()
    assert rig.sent_ids() == [first.trigger_id]
    rig.clock.advance_ms(1)
    await sw.run_once()
    assert rig.sent_ids() == [first.trigger_id, second.trigger_id]


async def test_the_run_loop_sends_a_ticks_shards_together_once_all_are_due(rig: Rig) -> None:
    sw = rig.sweeper()
    ts = [await put(rig.store, FIRE_MS + 1 + s, shard=s) for s in (3, 4, 5)]
    stop, task = await start(sw)
    rig.clock.set_ms(FIRE_MS - AHEAD_MS - 1000)  # the periodic sweep runs (and pokes)
    await settle()
    rig.clock.set_ms(FIRE_MS - AHEAD_MS + 5)  # two of three due; the driver's tick is not
    await settle()
    assert rig.queue.sent == []
    rig.clock.set_ms(FIRE_MS - AHEAD_MS + 10)  # the tick boundary: every one is due
    await settle()
    assert sorted(rig.sent_ids()) == sorted(t.trigger_id for t in ts)
    assert rig.queue.send_calls == [3]
    stop.set()
    await task


class FlakyQueue(MemoryQueue):
    """Fails its ``n``-th send_many call (1-based)."""

    def __init__(self, clock: ManualClock, n: int) -> None:
        super().__init__(clock)
        self.n, self.seen = n, 0

    async def send_many(self, messages: Sequence[OutgoingMessage]) -> None:
        self.seen += 1
        if self.seen == self.n:
            raise QueueError("sqs refused the batch")
        await super().send_many(messages)


class ReadLog(MemoryStore):
    """Remembers the ids of each get_many call."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[list[str]] = []

    async def get_many(self, trigger_ids: Sequence[str]) -> list[Trigger | None]:
        self.reads.append(list(trigger_ids))
        return await super().get_many(trigger_ids)


async def test_a_failed_batch_retries_only_its_own_triggers(rig: Rig) -> None:
    rig.queue = FlakyQueue(rig.clock, 1)
    sw = rig.sweeper()
    ts = await spread(rig, {1: 60, 2: 60})  # two reads of 100 and 20, a send each
    await sw.run_once()
    rig.clock.set_ms(FIRE_MS - AHEAD_MS)
    await sw.run_once()
    assert len(rig.queue.sent) == 20  # the second batch went; the first failed
    assert rig.count("promoted_total") == 20 and rig.count("promotion_retries_total") == 1
    assert sw.pending == 100
    assert (GROUP, 1) not in rig.store.cursors and (GROUP, 2) not in rig.store.cursors
    rig.clock.advance_ms(1000)
    await sw.run_once()
    assert sorted(rig.sent_ids()) == sorted(t.trigger_id for t in ts)
    assert rig.count("promoted_total") == 120 and sw.pending == 0
    assert rig.store.cursors[(GROUP, 1)] == rig.clock.now_ms() + 120_000


async def test_a_hot_shard_does_not_hold_up_the_others(rig: Rig) -> None:
    rig.store = store = ReadLog()
    sw = rig.sweeper()
    hot = await spread(rig, {0: 250})
    others = await spread(rig, {s: 1 for s in ALL - {0}})
    await sw.run_once()
    store.reads.clear()
    rig.clock.set_ms(FIRE_MS - AHEAD_MS)
    await sw.run_once()
    assert [len(r) for r in store.reads] == [100, 100, 57]
    # Each other shard's one trigger is in the first read, not behind the hot crowd.
    assert {t.trigger_id for t in others} <= set(store.reads[0])
    assert len(rig.queue.sent) == len(hot) + len(others)
