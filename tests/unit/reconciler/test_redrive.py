"""The redrive mirror on the in-memory fakes: a poison message becomes FAILED + a dead letter."""

from __future__ import annotations

import asyncio

import pytest

from reconciler.redrive import RedriveMirror
from tests.unit.reconciler.test_reconciler import NOW_MS, SETTINGS, put
from trigger_service.adapters.memory.queue import QueuedDeadLetter
from trigger_service.adapters.memory.store import MemoryQueue, MemoryStore
from trigger_service.core.errors import QueueError
from trigger_service.core.model import Status
from trigger_service.core.time.clock import ManualClock
from trigger_service.platform.metrics import InMemoryMetrics

REASON = "poison message: moved by SQS after 51 receives"


@pytest.fixture
def parts() -> tuple[MemoryStore, MemoryQueue, InMemoryMetrics, RedriveMirror]:
    clock = ManualClock(NOW_MS)
    store, queue, metrics = MemoryStore(), MemoryQueue(clock), InMemoryMetrics()
    return store, queue, metrics, RedriveMirror(SETTINGS, store, queue, clock, metrics)


Parts = tuple[MemoryStore, MemoryQueue, InMemoryMetrics, RedriveMirror]


@pytest.mark.parametrize("status", [Status.PENDING, Status.IN_FLIGHT])
async def test_a_live_trigger_becomes_failed_and_dead_lettered(parts: Parts,
                                                               status: Status) -> None:
    store, queue, metrics, mirror = parts
    t = await put(store, NOW_MS - 60_000, status=status, claim_id="c1", attempts=1)
    queue.redrive(t.trigger_id, t.fire_at_ms, receive_count=50)
    assert await mirror.run_once() == 1
    row = await store.get(t.trigger_id)
    assert row is not None and row.status is Status.FAILED
    assert row.last_error == REASON and row.claim_id is None
    assert queue.dead_letters == [QueuedDeadLetter(t.trigger_id, t.fire_at_ms, REASON)]
    assert queue.redriven == []
    assert metrics.snapshot()["redriven_messages_total"] == 1


@pytest.mark.parametrize("status", [Status.FIRED, Status.CANCELLED])
async def test_a_finished_trigger_is_left_alone(parts: Parts, status: Status) -> None:
    store, queue, _, mirror = parts
    t = await put(store, NOW_MS - 60_000, status=status)
    queue.redrive(t.trigger_id, t.fire_at_ms)
    assert await mirror.run_once() == 1
    row = await store.get(t.trigger_id)
    assert row is not None and row.status is status
    assert queue.dead_letters == [] and queue.redriven == []


async def test_an_unknown_trigger_or_a_malformed_body_is_removed(parts: Parts) -> None:
    _, queue, _, mirror = parts
    queue.redrive("no-such-trigger", NOW_MS)
    queue.redrive("", 0)
    assert await mirror.run_once() == 2
    assert queue.dead_letters == [QueuedDeadLetter("", 0, "malformed message body (redriven)")]
    assert queue.redriven == []


async def test_a_failed_dead_letter_send_keeps_the_redriven_message(parts: Parts) -> None:
    """Nothing is deleted before the dead letter exists; the next round finishes the job."""
    store, queue, _, mirror = parts
    t = await put(store, NOW_MS - 60_000)
    queue.redrive(t.trigger_id, t.fire_at_ms)
    queue.failures["send_dead_letter"] = QueueError("sqs down")
    with pytest.raises(QueueError):
        await mirror.run_once()
    assert len(queue.redriven) == 1
    del queue.failures["send_dead_letter"]
    queue.redriven[0].visible_at_ms = 0
    assert await mirror.run_once() == 1
    assert [d.trigger_id for d in queue.dead_letters] == [t.trigger_id]
    assert queue.redriven == []


async def test_run_drains_the_queue_and_stops(parts: Parts) -> None:
    store, queue, _, mirror = parts
    for _ in range(13):
        t = await put(store, NOW_MS - 60_000)
        queue.redrive(t.trigger_id, t.fire_at_ms)
    stop = asyncio.Event()
    task = asyncio.create_task(mirror.run(stop))
    for _ in range(100):
        if not queue.redriven:
            break
        await asyncio.sleep(0)
    stop.set()
    await asyncio.wait_for(task, 5)
    assert queue.redriven == [] and len(queue.dead_letters) == 13
