"""Packs on the real stack (``adapters.sqs_packs``): triggers sent together with one delay
travel as one SQS message, and each is still delivered once, a cancelled one never, the
message deleted with its last trigger, and nothing lost when a dispatcher dies holding a
pack whose other triggers it has delivered."""

from __future__ import annotations

import asyncio
import os
import re
import time

import pytest

from tests.integration.conftest import Stack
from tests.integration.helpers import dispatcher_process, sigkill
from tests.integration.test_batch import create_due_at

pytestmark = pytest.mark.integration

PACKED = 20


async def sent_counts(stack: Stack) -> tuple[float, float]:
    """(SQS messages sent, triggers they carried) so far, from the API's /metrics."""
    page = await (await stack.client.get("/metrics")).text()

    def value(pattern: str) -> float:
        found = re.search(pattern, page, re.MULTILINE)
        return float(found.group(1)) if found else 0.0

    return (value(r'^trigger_sqs_batch_messages_sum\{operation="send"\} (\S+)$'),
            value(r"^trigger_sqs_triggers_sent_total (\S+)$"))


async def main_queue_messages(stack: Stack) -> int:
    """Messages on the main queue's lanes, visible or not (SQS's approximate counts)."""
    client = stack.sqs._client
    total = 0
    for name in stack.sqs.lane_queues():
        url = await stack.sqs.url(name)
        attrs = (await client.get_queue_attributes(QueueUrl=url, AttributeNames=[
            "ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]))
        total += sum(int(v) for v in attrs["Attributes"].values())
    return total


async def packed_triggers(stack: Stack, due_in_ms: int) -> list[str]:
    """``PACKED`` triggers due at one instant, created in one batch request: their sends
    leave together, with one delay, as a pack (checked)."""
    before = await sent_counts(stack)
    url = stack.receiver.base_url + "cb"
    ids = await create_due_at(stack, PACKED, int(time.time() * 1000) + due_in_ms,
                              lambda _: url)
    await stack.service.drain()  # the sends that outlived their 200
    messages, triggers = (a - b for a, b in zip(await sent_counts(stack), before, strict=True))
    assert triggers == PACKED and messages <= PACKED / 2, (messages, triggers)
    return ids


async def test_a_packs_triggers_are_delivered_once_each_a_cancelled_one_never(
        stack: Stack) -> None:
    ids = await packed_triggers(stack, 3_000)
    cancelled = ids[7]
    resp = await stack.client.delete(f"/v1/triggers/{cancelled}", headers=stack.auth())
    assert resp.status == 200
    d = await stack.start_dispatcher()
    rec = stack.receiver
    kept = [t for t in ids if t != cancelled]
    assert await rec.wait_for(lambda: all(rec.for_trigger(t) for t in kept), 20)
    await asyncio.sleep(1.5)
    assert [len(rec.for_trigger(t)) for t in kept] == [1] * len(kept)
    assert rec.for_trigger(cancelled) == []
    # The pack's message went with its last trigger (a delete waits up to 250 ms).
    assert await rec.wait_for(lambda: d.dispatcher.inflight == 0, 5)
    for _ in range(20):  # SQS's counts are approximate: settled within seconds
        if not await main_queue_messages(stack):
            break
        await asyncio.sleep(0.5)
    assert await main_queue_messages(stack) == 0


async def test_a_dispatcher_killed_holding_a_pack_loses_none_and_repeats_only_the_unfinished(
        stack: Stack) -> None:
    """One trigger of the pack hangs at the receiver; the others are delivered and FIRED;
    the dispatcher is killed. The pack was not deleted (a trigger was still in hand): it
    comes back whole to the next dispatcher, which drops the finished ones and delivers
    the one left (attempt 2)."""
    env = {**os.environ, **stack.env, "TRIGGER_DISPATCH_RECEIVERS": "1",
           "TRIGGER_DISPATCH_METRICS_PORT": "0"}
    rec = stack.receiver
    async with dispatcher_process(env) as proc:
        ids = await packed_triggers(stack, 2_000)
        hung, done = ids[3], [t for t in ids if t != ids[3]]
        rec.script[hung] = ["hang", 200]
        rec.hang_s = 10
        assert await rec.wait_for(lambda: all(rec.for_trigger(t) for t in ids), 30)
        for t in done:
            assert (await stack.wait_status(t, "FIRED"))["status"] == "FIRED"
        await sigkill(proc)
    await stack.start_dispatcher()
    assert await rec.wait_for(lambda: len(rec.for_trigger(hung)) >= 2, 60)
    assert (await stack.wait_status(hung, "FIRED"))["status"] == "FIRED"
    assert [a.attempt for a in rec.for_trigger(hung)] == [1, 2]
    assert [len(rec.for_trigger(t)) for t in done] == [1] * len(done)
