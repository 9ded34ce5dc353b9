"""SQS batches on LocalStack, read from ``GET /metrics``: a burst of sends goes out in
SendMessageBatch requests of ten (the adaptive linger) and in packs of many triggers a
message (``adapters.sqs_packs``), and a burst of registrations, whose 201 no longer waits
for SQS, shares batches too."""

from __future__ import annotations

import asyncio
import re

import pytest

from tests.integration.conftest import Stack
from trigger_service.core.ports.values import OutgoingMessage

pytestmark = pytest.mark.integration

BURST = 200


async def batch_stats(stack: Stack, operation: str) -> tuple[float, float]:
    """(messages, requests) of ``operation`` so far, as the API's /metrics shows them."""
    resp = await stack.client.get("/metrics")
    assert resp.status == 200
    page = await resp.text()

    def value(suffix: str) -> float:
        found = re.search(rf'^trigger_sqs_batch_messages_{suffix}\{{operation="{operation}"\}} '
                          r"(\S+)$", page, re.MULTILINE)
        return float(found.group(1)) if found else 0.0

    return value("sum"), value("count")


async def triggers_sent(stack: Stack) -> float:
    """Triggers the messages sent so far carried (``trigger_sqs_triggers_sent_total``)."""
    resp = await stack.client.get("/metrics")
    found = re.search(r"^trigger_sqs_triggers_sent_total (\S+)$", await resp.text(),
                      re.MULTILINE)
    return float(found.group(1)) if found else 0.0


async def drain_main(stack: Stack, want: int, timeout_s: float = 20) -> set[str]:
    """Receive (and delete) from the main queue until ``want`` distinct triggers came."""
    got: set[str] = set()
    deadline = asyncio.get_running_loop().time() + timeout_s
    queue = stack.runtime.queue
    while len(got) < want and asyncio.get_running_loop().time() < deadline:
        received = await queue.receive(max_messages=10, wait_s=1, visibility_s=30)
        got |= {m.trigger_id for m in received}
        # Concurrent deletes, as the dispatcher's: they share DeleteMessageBatch requests.
        await asyncio.gather(*(queue.delete(m.receipt_handle) for m in received))
    return got


async def test_a_burst_of_sends_goes_out_in_full_batches(stack: Stack) -> None:
    queue = stack.runtime.queue
    before, triggers_before = await batch_stats(stack, "send"), await triggers_sent(stack)
    ids = [f"trg_burst_{i}" for i in range(BURST)]
    await asyncio.gather(*(queue.send(OutgoingMessage(t, 1_700_000_000_000, 0)) for t in ids))
    messages, requests = (a - b for a, b in zip(await batch_stats(stack, "send"), before,
                                                 strict=True))
    assert await triggers_sent(stack) - triggers_before == BURST
    # One delay: they travel in packs, far fewer messages than triggers.
    assert messages <= BURST / 5, f"{messages:.0f} messages for {BURST} triggers"
    assert BURST / requests > 5, f"{requests:.0f} requests for {BURST} triggers"
    # All of them arrived, each once (received, then deleted in batches too: a pack's
    # message when its last trigger is deleted).
    assert await drain_main(stack, BURST) == set(ids)
    deleted, delete_requests = await batch_stats(stack, "delete")
    assert deleted == messages and delete_requests < BURST / 10


async def test_a_burst_of_registrations_shares_batches(stack: Stack) -> None:
    before, triggers_before = await batch_stats(stack, "send"), await triggers_sent(stack)
    # Due in a minute: SQS hides them for most of it, and the test cancels them at the end.
    answers = await asyncio.gather(*(stack.post(stack.body(delaySeconds=60))
                                     for _ in range(BURST)))
    assert all(status == 201 for status, _, _ in answers)
    await stack.service.drain()  # the sends that outlived their 201
    messages, requests = (a - b for a, b in zip(await batch_stats(stack, "send"), before,
                                                 strict=True))
    assert await triggers_sent(stack) - triggers_before == BURST and messages <= BURST
    # Shared, not necessarily full: on a loaded machine the 201s (and so the sends) spread
    # out, and a send that finds the batcher idle goes alone (95 requests for 200 seen once,
    # 21-23 usually). Alone, each would be a request of its own.
    assert BURST / requests > 2, f"{requests:.0f} requests for {BURST} registrations"
