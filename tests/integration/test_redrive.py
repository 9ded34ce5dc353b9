"""A poison message on the real LocalStack: SQS's redrive policy moves it aside and the
reconciler's redrive mirror turns it into a FAILED trigger and a dead letter."""

from __future__ import annotations

import asyncio

import pytest

from reconciler.redrive import RedriveMirror
from tests.integration.conftest import Stack
from trigger_service.core.time.clock import SystemClock
from trigger_service.platform.metrics import InMemoryMetrics

pytestmark = pytest.mark.integration


@pytest.fixture
def extra_env() -> dict[str, str]:
    return {"TRIGGER_SQS_MAX_RECEIVE_COUNT": "2"}


async def test_a_redriven_message_fails_its_trigger_and_is_dead_lettered(stack: Stack) -> None:
    status, body, _ = await stack.post(stack.body(delaySeconds=0))
    assert status == 201
    tid = body["triggerId"]
    # A handler that crashes every time: received, never deleted, back at once.
    seen = 0
    for _ in range(20):
        got = await stack.sqs.receive_main(visibility_s=0)
        seen += sum(1 for b in got if b["triggerId"] == tid)
        if seen >= 2 and not got:
            break  # the third receive found nothing: SQS moved it to the redrive queue
    assert seen == 2
    mirror = RedriveMirror(stack.settings, stack.runtime.store, stack.runtime.queue,
                           SystemClock(), InMemoryMetrics())
    handled = 0
    for _ in range(10):
        handled += await mirror.run_once()
        if handled:
            break
        await asyncio.sleep(0.2)
    assert handled == 1
    view = await stack.wait_status(tid, "FAILED")
    assert view["status"] == "FAILED"
    dead = [b for b in await stack.sqs.dlq_bodies() if b["triggerId"] == tid]
    assert len(dead) == 1 and dead[0]["reason"].startswith("poison message: moved by SQS")
    assert await mirror.run_once() == 0  # the redriven message is gone
