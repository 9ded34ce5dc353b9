"""A registration answers once the trigger is durable: the SQS send runs in the background
(tracked, drained at shutdown, its failure counted) and never holds up the 201."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import replace

import pytest

from tests.unit.app.support import SETTINGS, Env, make_env, request
from trigger_service.adapters.memory.store import MemoryQueue
from trigger_service.app.triggers import TriggerService
from trigger_service.config.settings import Settings
from trigger_service.core.errors import ConfigError, QueueError
from trigger_service.core.model import Status
from trigger_service.core.ports.values import OutgoingMessage

pytestmark = pytest.mark.timeout(10)


class SlowQueue(MemoryQueue):
    """Sends wait for ``gate``; then they go through (or raise ``fail_with``)."""

    gate: asyncio.Event
    fail_with: QueueError | None = None

    async def send_many(self, messages: Sequence[OutgoingMessage]) -> None:
        await self.gate.wait()
        if self.fail_with is not None:
            raise self.fail_with
        await super().send_many(messages)


def slow_env(settings: Settings = SETTINGS) -> tuple[SlowQueue, Env]:
    env = make_env(settings)
    queue = SlowQueue(env.clock)
    queue.gate = asyncio.Event()
    env.service = TriggerService(settings, env.store, env.store, queue, env.cache, env.clock,
                                 env.metrics)
    return queue, env


async def test_the_answer_does_not_wait_for_sqs_and_drain_waits_for_the_send() -> None:
    queue, env = slow_env()
    # SQS never answers while the registration runs, and the clock never moves: the answer
    # waited for the durable write alone.
    result = await env.service.register_planned("orders", request(env, 1_000), None, "h")
    assert env.store.triggers[result.trigger_id].status is Status.PENDING
    assert queue.sent == []
    drained = asyncio.ensure_future(env.service.drain())
    await asyncio.sleep(0)
    assert not drained.done()
    queue.gate.set()
    await drained
    assert [m.trigger_id for m in queue.sent] == [result.trigger_id]
    assert "enqueue_failures_total" not in env.metrics.snapshot()


async def test_a_send_that_fails_after_the_answer_is_counted_and_the_row_stays_pending() -> None:
    queue, env = slow_env()
    queue.fail_with = QueueError("sqs gone")
    result = await env.service.register_planned("orders", request(env, 1_000), None, "h")
    queue.gate.set()
    await env.service.drain()  # the failure is counted, not raised
    assert env.metrics.snapshot().get("enqueue_failures_total") == 1
    # PENDING and in the due index: the due-scan re-sends it once overdue.
    assert env.store.triggers[result.trigger_id].status is Status.PENDING


async def test_concurrent_registrations_each_send_in_the_background() -> None:
    queue, env = slow_env()
    results = await asyncio.gather(*(env.service.register_planned(
        "orders", request(env, 1_000), None, f"h{i}") for i in range(20)))
    assert queue.sent == []
    queue.gate.set()
    await env.service.drain()
    assert sorted(m.trigger_id for m in queue.sent) == sorted(r.trigger_id for r in results)


async def test_background_sends_are_bounded_and_the_rest_left_to_the_due_scan() -> None:
    settings = replace(SETTINGS, sqs=replace(SETTINGS.sqs, max_background_sends=3))
    queue, env = slow_env(settings)  # SQS hangs: no send answers
    results = [await env.service.register_planned("orders", request(env, 1_000), None, f"h{i}")
               for i in range(5)]
    # Every registration answered and is durable; only 3 sends are pending, 2 not started.
    assert all(env.store.triggers[r.trigger_id].status is Status.PENDING for r in results)
    assert env.metrics.snapshot().get("enqueue_overflow_total") == 2
    queue.gate.set()
    await env.service.drain()
    assert [m.trigger_id for m in queue.sent] == [r.trigger_id for r in results[:3]]
    # Once they answered there is room again.
    late = await env.service.register_planned("orders", request(env, 1_000), None, "h5")
    await env.service.drain()
    assert queue.sent[-1].trigger_id == late.trigger_id
    assert env.metrics.snapshot().get("enqueue_overflow_total") == 2


def test_the_bound_on_background_sends_is_a_setting() -> None:
    s = Settings.from_env({"TRIGGER_SQS_MAX_BACKGROUND_SENDS": "7"})
    assert s.sqs.max_background_sends == 7
    with pytest.raises(ConfigError, match="TRIGGER_SQS_MAX_BACKGROUND_SENDS"):
        Settings.from_env({"TRIGGER_SQS_MAX_BACKGROUND_SENDS": "-1"})


def test_the_retired_wait_setting_is_refused_with_why() -> None:
    with pytest.raises(ConfigError, match=r"TRIGGER_ENQUEUE_WAIT_MS is retired: .*never waits"):
        Settings.from_env({"TRIGGER_ENQUEUE_WAIT_MS": "500"})
