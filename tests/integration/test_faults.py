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


async def test_a_herd_waiting_in_a_dispatchers_hands_gets_no_copies_but_a_lost_one_is_healed(
        stack: Stack) -> None:
    """One caller's herd, due at once, waits in the dispatcher's hands (two sends at a time
    to a slow receiver) seconds past the grace: its triggers are overdue by the rows, but
    the dispatcher says it is behind on that caller, so the due-scan sends no copies of
    them. Another caller's trigger whose message was lost meanwhile is healed as ever."""
    stack.receiver.delay_s = 0.3
    d = await stack.start_dispatcher(default_max_concurrency=2)
    sweeper = await stack.start_sweeper()
    now = int(time.time() * 1000)
    other = f"{stack.caller}_other"  # no max_concurrency of its own: two at a time

    def trigger(caller: str, path: str, fire_at_ms: int) -> Trigger:
        tid = new_trigger_id(now)
        return Trigger(tid, caller, stack.receiver.base_url + path, "{}", fire_at_ms, now,
                       shard_of(tid, stack.settings.shards), Route.DIRECT)

    herd = [trigger(other, f"herd/{i}", now + 300) for i in range(24)]
    lost = trigger(stack.caller, "lost", now + 300)
    for t in [*herd, lost]:
        await stack.runtime.store.create(t, 3600)
    await stack.runtime.queue.send_many([OutgoingMessage.of(t, 0) for t in herd])
    rec = stack.receiver
    ids = {t.trigger_id for t in herd}
    # 24 sends of 0.3 s, two at a time: the last starts ~3.6 s after its time, past the
    # grace (2 s) and a few heal passes.
    assert await rec.wait_for(lambda: {a.trigger_id for a in rec.arrivals} >= ids, 30)
    assert await rec.wait_for(lambda: bool(rec.for_trigger(lost.trigger_id)), 10)
    last_ms = max(a.at_ms for a in rec.arrivals if a.trigger_id in ids)
    assert last_ms - herd[0].fire_at_ms > 3_000  # the herd did wait past the grace
    assert sorted(a.trigger_id for a in rec.arrivals if a.trigger_id in ids) == sorted(ids)
    snap = sweeper.metrics.snapshot()
    # The lost one (again, if its copy was not claimed within the grace on a slow machine);
    # without the dispatcher's marks the herd's claims, waiting, looked stale: 10 or more.
    assert 1 <= snap.get("overdue_resent_total", 0) <= 2, snap
    assert snap.get("heal_behind_total", 0) >= 1, snap
    assert d.metrics.snapshot().get("duplicate_messages_total", 0) == 0


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
