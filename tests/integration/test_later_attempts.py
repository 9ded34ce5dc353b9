"""Later attempts on time on the real stack (LocalStack SQS with its lanes, each long-polled):
a retry due a second after a failure arrives about a second later, and an escalation step
about at its time, not after the message has been round SQS; a dead letter is listed as soon
as its last attempt is made.

The enqueue lead is the default here (15 s), as under ``make up``: a short retry is due well
inside it.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from tests.integration.conftest import Stack
from tests.integration.test_channels import (  # noqa: F401 (fixtures)
    ESCALATION,
    Providers,
    create,
    ladder,
    providers,
    stand_by,
    until,
    view,
)

pytestmark = pytest.mark.integration

# Generous: a retry due 1 s after its failure that went round SQS came 6-21 s late.
RETRY_BOUND_MS = 5_000


@pytest.fixture
def extra_env() -> dict[str, str]:
    return {"TRIGGER_SQS_ENQUEUE_LEAD_S": "15"}


async def listed(stack: Stack) -> dict[str, int]:
    """The caller's dead letters now: trigger id -> when this test first saw it (ms)."""
    resp = await stack.client.get("/v1/dead-letters", headers=stack.auth(),
                                  params={"limit": "500"})
    assert resp.status == 200, await resp.text()
    seen = time.time_ns() // 1_000_000
    items: list[dict[str, Any]] = (await resp.json())["items"]
    return {i["triggerId"]: seen for i in items}


async def test_a_retry_due_a_second_after_a_500_arrives_about_then(stack: Stack) -> None:
    await stack.start_dispatcher()  # backoff 1 s (conftest)
    rec = stack.receiver
    tids = []
    for i in range(8):
        _, body, _ = await stack.post(stack.body(delaySeconds=2 + i * 0.3))
        tids.append(body["triggerId"])
        rec.script[body["triggerId"]] = [500]
    assert await rec.wait_for(lambda: all(len(rec.for_trigger(t)) >= 2 for t in tids), 40)
    gaps = [rec.for_trigger(t)[1].at_ms - rec.for_trigger(t)[0].at_ms for t in tids]
    assert all(1_000 <= g < RETRY_BOUND_MS for g in gaps), gaps  # never early, not late
    assert [[a.attempt for a in rec.for_trigger(t)] for t in tids] == [[1, 2]] * len(tids)
    for t in tids:
        assert (await stack.wait_status(t, "FIRED"))["status"] == "FIRED"


async def test_dead_letters_are_listed_as_their_last_attempt_is_made(stack: Stack) -> None:
    await stack.start_dispatcher(max_attempts=2)
    rec = stack.receiver
    _, gone, _ = await stack.post(stack.body(delaySeconds=2))
    _, tired, _ = await stack.post(stack.body(delaySeconds=2))
    rec.script[gone["triggerId"]] = [410]
    rec.script[tired["triggerId"]] = [500, 503]
    tids = [gone["triggerId"], tired["triggerId"]]
    first_seen: dict[str, int] = {}
    deadline = time.monotonic() + 30
    while len(first_seen) < 2 and time.monotonic() < deadline:
        first_seen |= {t: at for t, at in (await listed(stack)).items()
                       if t in tids and t not in first_seen}
        await asyncio.sleep(0.1)
    assert set(first_seen) == set(tids), first_seen
    assert [a.attempt for a in rec.for_trigger(gone["triggerId"])] == [1]
    first, last = rec.for_trigger(tired["triggerId"])
    assert last.attempt == 2 and last.at_ms - first.at_ms < RETRY_BOUND_MS
    for t in tids:
        last_ms = rec.for_trigger(t)[-1].at_ms
        assert first_seen[t] - last_ms < 3_000, (t, first_seen[t] - last_ms)


async def test_an_escalation_step_is_sent_about_at_its_time(
        stack: Stack, providers: Providers) -> None:  # noqa: F811 (the fixture)
    tid = await create(stack, channels=ladder(stack), escalation=ESCALATION, delaySeconds=1)

    async def fired() -> bool:
        return bool((await view(stack, tid))["status"] == "FIRED")

    assert await until(fired, 20)
    [push], [sms] = providers.push.requests, providers.sms.requests
    assert 2_900 <= sms.at_ms - push.at_ms < RETRY_BOUND_MS  # the step is 3 s after
