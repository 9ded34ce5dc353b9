"""A registration never waits for SQS longer than ``TRIGGER_ENQUEUE_WAIT_MS`` once the
trigger is durable; the send finishes in the background."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import replace

import pytest

from tests.unit.app.support import SETTINGS, Env, drive, make_env, request
from trigger_service.adapters.memory import MemoryQueue
from trigger_service.app.triggers import TriggerService
from trigger_service.core.errors import QueueError
from trigger_service.core.model import Status
from trigger_service.core.ports import OutgoingMessage

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


def slow_env(wait_ms: int = 500) -> tuple[SlowQueue, Env]:
    settings = replace(SETTINGS, api=replace(SETTINGS.api, enqueue_wait_ms=wait_ms))
    env = make_env(settings)
    queue = SlowQueue(env.clock)
    queue.gate = asyncio.Event()
    env.service = TriggerService(settings, env.store, env.store, queue, env.cache, env.clock,
                                 env.metrics)
    return queue, env


async def test_a_slow_send_answers_after_the_wait_and_finishes_in_the_background() -> None:
    queue, env = slow_env(500)
    task = asyncio.create_task(env.service.register("orders", request(env, 1_000), None, "h"))
    waited_ms = await drive(env.clock, task)
    assert 500 <= waited_ms < 600
    result = task.result()
    assert env.store.triggers[result.trigger_id].status is Status.PENDING
    assert queue.sent == []
    assert env.metrics.snapshot().get("enqueue_slow_total") == 1
    queue.gate.set()
    await env.service.drain()
    assert [m.trigger_id for m in queue.sent] == [result.trigger_id]


async def test_a_send_that_fails_after_the_answer_is_counted() -> None:
    queue, env = slow_env(100)
    queue.fail_with = QueueError("sqs gone")
    task = asyncio.create_task(env.service.register("orders", request(env, 1_000), None, "h"))
    await drive(env.clock, task)
    queue.gate.set()
    await env.service.drain()
    snapshot = env.metrics.snapshot()
    assert snapshot.get("enqueue_failures_total") == 1 and snapshot["enqueue_slow_total"] == 1


async def test_a_fast_send_does_not_wait_for_the_timer() -> None:
    queue, env = slow_env(500)
    queue.gate.set()
    result = await env.service.register("orders", request(env, 1_000), None, "h")
    assert [m.trigger_id for m in queue.sent] == [result.trigger_id]
    assert "enqueue_slow_total" not in env.metrics.snapshot()
