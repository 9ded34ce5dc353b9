"""Faults of the real dependencies, end to end."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace

import pytest

from tests.integration.conftest import Stack
from trigger_service.adapters.sqs import SqsQueue
from trigger_service.app.registration import NewTrigger
from trigger_service.app.triggers import TriggerService
from trigger_service.core.errors import QueueError
from trigger_service.core.model import Route, Status, Trigger, new_trigger_id, shard_of
from trigger_service.core.ports.values import OutgoingMessage
from trigger_service.core.time.clock import SystemClock
from trigger_service.platform.metrics import InMemoryMetrics

pytestmark = pytest.mark.integration


async def test_a_deleted_queue_is_recreated_by_the_api_and_the_dispatcher(stack: Stack) -> None:
    """LocalStack restarted or the queue deleted: the next call that finds it missing
    re-creates both queues, so registrations still get 201 and are delivered."""
    d = await stack.start_dispatcher()
    status, first, _ = await stack.post(stack.body(delaySeconds=0))
    assert status == 201
    rec = stack.receiver
    assert await rec.wait_for(lambda: bool(rec.for_trigger(first["triggerId"])), 10)

    await stack.sqs.delete_queues()
    status, body, _ = await stack.post(stack.body(delaySeconds=1))
    assert status == 201, body
    tid = body["triggerId"]
    assert await rec.wait_for(lambda: bool(rec.for_trigger(tid)), 20)
    assert (await stack.wait_status(tid, "FIRED"))["status"] == "FIRED"
    assert not d.task.done()  # the dispatcher kept running


@pytest.fixture
def extra_env() -> dict[str, str]:
    return {"TRIGGER_HEAL_OVERDUE_GRACE_S": "2", "TRIGGER_HEAL_INTERVAL_S": "0.5",
            "TRIGGER_SHARDS": "4"}


async def test_a_trigger_whose_message_was_lost_is_healed_within_seconds(stack: Stack) -> None:
    """A durable DIRECT trigger with no SQS message (the API died after the write, or the
    queue lost it): the owner of its shard re-sends it a grace after its time."""
    await stack.start_dispatcher()
    sweeper = await stack.start_sweeper()
    now = int(time.time() * 1000)
    tid = new_trigger_id(now)
    lost = Trigger(tid, stack.caller, stack.receiver.base_url + "lost", '{"lost":true}',
                   now + 500, now, shard_of(tid, stack.settings.shards), Route.DIRECT)
    await stack.runtime.store.create(lost, 3600)
    rec = stack.receiver
    assert await rec.wait_for(lambda: bool(rec.for_trigger(tid)), 15)
    late_ms = rec.for_trigger(tid)[0].at_ms - lost.fire_at_ms
    assert 2_000 <= late_ms < 8_000  # after the grace, within a few heal passes
    assert sweeper.metrics.snapshot().get("overdue_resent_total", 0) >= 1
    assert (await stack.wait_status(tid, "FIRED"))["status"] == "FIRED"


class SkewedClock(SystemClock):
    """A host whose clock runs ``skew_ms`` ahead."""

    def __init__(self, skew_ms: int) -> None:
        self._skew_ms = skew_ms

    def now_ms(self) -> int:
        return super().now_ms() + self._skew_ms


async def test_a_cancel_right_after_a_create_on_a_fast_clock_sticks(stack: Stack) -> None:
    """An API host 5 s ahead writes the row; a cancel through another host right away must
    win over the creation cells (LWTs carry server time) and nothing may be delivered."""
    await stack.start_dispatcher()
    fast = SkewedClock(5_000)
    rt = stack.runtime
    fast_api = TriggerService(stack.settings, rt.store, rt.store, rt.queue, rt.cache, fast,
                              rt.metrics)
    now_ms = fast.now_ms()
    new = NewTrigger(stack.receiver.base_url + "skew", "null", now_ms + 1_000, now_ms)
    created = await fast_api.register_planned(stack.caller, new, None, "h")
    cancelled = await stack.service.cancel(stack.caller, created.trigger_id)
    assert cancelled.status is Status.CANCELLED
    row = await rt.store.get(created.trigger_id)
    assert row is not None and row.status is Status.CANCELLED
    await asyncio.sleep(8)  # past its fire time (6 s of real time away) and the hold
    assert stack.receiver.for_trigger(created.trigger_id) == []
    await fast_api.drain()


async def test_a_process_starts_while_sqs_is_unreachable(stack: Stack) -> None:
    """SQS down at start (LocalStack restarting): connecting does not fail, calls raise
    QueueError until SQS answers; the first call that reaches it sets the queues up."""
    down = replace(stack.settings.sqs, endpoint_url="http://127.0.0.1:1", max_attempts=1)
    q = await SqsQueue.connect(down, visibility_timeout_s=30, metrics=InMemoryMetrics(),
                               clock=SystemClock())
    try:
        with pytest.raises(QueueError):
            await q.send_many([OutgoingMessage("trg_x", 0, 0)])
    finally:
        await q.close()
    # The real endpoint, as if it had just come back: the first call creates the queues.
    q = await SqsQueue.connect(stack.settings.sqs, visibility_timeout_s=30,
                               metrics=InMemoryMetrics(), clock=SystemClock())
    try:
        q._urls = None  # as left by a start while SQS was down
        await q.send_many([OutgoingMessage("trg_x", 0, 0)])
        assert q.urls.main.endswith(stack.settings.sqs.queue)
    finally:
        await q.close()
