"""Claims taken ahead of the fire time on the real stack, raced by cancels: Paxos decides
each race, so a cancel answered 200 is never followed by a callback, and one answered 409
always is. The API asks SQS to show messages 10 s early here (the suite's default is 1 s), so
the dispatcher holds them long enough to claim ahead."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.integration.conftest import Stack

pytestmark = pytest.mark.integration

CLAIM_LEAD_MS = 6_000
DELAY_S = 10
N = 60


@pytest.fixture
def extra_env() -> dict[str, str]:
    return {"TRIGGER_SQS_ENQUEUE_LEAD_S": "10"}


async def status_of(stack: Stack, tid: str) -> str:
    resp = await stack.client.get(f"/v1/triggers/{tid}", headers=stack.auth())
    assert resp.status == 200
    return str((await resp.json())["status"])


async def cancel(stack: Stack, tid: str) -> int:
    resp = await stack.client.delete(f"/v1/triggers/{tid}", headers=stack.auth())
    assert resp.status in (200, 409), await resp.text()
    if resp.status == 409:
        assert (await resp.json())["error"] == "not_cancellable"
    return resp.status


async def test_cancels_racing_claims_never_answer_200_for_a_delivered_trigger(
        stack: Stack) -> None:
    """60 triggers due together, claimed about 6 s ahead by two dispatchers (each message
    goes to one of them, their claims contend on the same partitions); each gets one cancel,
    spread from well before the claims to after them (the last ones only once their
    trigger is seen IN_FLIGHT). Every 200 is never delivered, every 409 is delivered, and
    both happen."""
    await stack.start_dispatcher(claim_lead_ms=CLAIM_LEAD_MS)
    await stack.start_dispatcher(claim_lead_ms=CLAIM_LEAD_MS)
    ids = []
    for _ in range(N):
        _, body, _ = await stack.post(stack.body(delaySeconds=DELAY_S))
        ids.append(body["triggerId"])
    started = time.monotonic()
    claims_at_s = DELAY_S - CLAIM_LEAD_MS / 1000  # after `started`, about

    async def one(i: int) -> int:
        if i < 5:
            return await cancel(stack, ids[i])  # long before any claim: must win
        if i >= N - 5:
            deadline = time.monotonic() + DELAY_S
            while await status_of(stack, ids[i]) != "IN_FLIGHT":
                assert time.monotonic() < deadline, "never claimed"
                await asyncio.sleep(0.05)
            return await cancel(stack, ids[i])  # after its claim: must lose
        # The middle: spread over the second around the claims.
        at_s = claims_at_s - 1.0 + 2.0 * (i - 5) / (N - 10)
        await asyncio.sleep(max(0.0, started + at_s - time.monotonic()))
        return await cancel(stack, ids[i])

    answers = dict(zip(ids, await asyncio.gather(*(one(i) for i in range(N))), strict=True))
    cancelled = [t for t, code in answers.items() if code == 200]
    refused = [t for t, code in answers.items() if code == 409]
    assert len(cancelled) >= 5 and len(refused) >= 5
    rec = stack.receiver
    assert await rec.wait_for(lambda: all(rec.for_trigger(t) for t in refused), 30)
    await asyncio.sleep(1.5)
    assert [t for t in cancelled if rec.for_trigger(t)] == []
    assert {await status_of(stack, t) for t in cancelled} == {"CANCELLED"}
    assert {await status_of(stack, t) for t in refused} == {"FIRED"}
