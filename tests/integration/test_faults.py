"""Faults of the real dependencies, end to end."""

from __future__ import annotations

import pytest

from tests.integration.conftest import Stack

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
