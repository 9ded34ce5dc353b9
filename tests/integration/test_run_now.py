"""Run now (``POST /v1/triggers/{id}/run``) on the real stack (Cassandra, LocalStack SQS,
Redis, a dispatcher): a one-time trigger an hour out, a series and a paused trigger each fire
now, through the SDK (async and sync) and ``triggerctl``, with the occurrence ids promised;
a keyed run repeated runs once."""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest

from tests.integration.conftest import Stack, api_url
from tests.integration.test_cli import cli
from trigger_client import AsyncTriggerClient, Conflict, Status, TriggerClient

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def _occurrence_ids(stack: Stack, trigger_id: str) -> list[str]:
    return [a.headers["X-Trigger-Occurrence-Id"] for a in stack.receiver.for_trigger(trigger_id)]


async def test_a_one_time_trigger_a_series_and_a_paused_one_fire_now(
        stack: Stack, sdk: AsyncTriggerClient) -> None:
    await stack.start_dispatcher()
    url = stack.receiver.base_url + "cb"
    one = await sdk.triggers.create(callback_url=url, payload={"k": "one"}, delay_s=3600)
    series = await sdk.triggers.create(callback_url=url, payload={"k": "series"},
                                       delay_s=3600, rrule="FREQ=DAILY")
    paused = await sdk.triggers.create(callback_url=url, payload={"k": "paused"},
                                       delay_s=3600, rrule="FREQ=DAILY")
    await sdk.triggers.pause(paused.trigger_id)

    key = f"run-{uuid.uuid4()}"
    ran_one = await sdk.triggers.run(one.trigger_id, idempotency_key=key)
    again = await sdk.triggers.run(one.trigger_id, idempotency_key=key)
    assert ran_one.run_trigger_id == one.trigger_id
    assert ran_one.occurrence_id == f"{one.trigger_id}.1" and not ran_one.replayed
    assert again.replayed and again.occurrence_id == ran_one.occurrence_id
    sync = TriggerClient(api_url(stack), stack.token)
    try:
        ran_series = await asyncio.to_thread(sync.triggers.run, series.trigger_id)
    finally:
        await asyncio.to_thread(sync.close)
    ran_paused = await sdk.triggers.run(paused.trigger_id)
    copies = {ran_series.run_trigger_id: series.trigger_id,
              ran_paused.run_trigger_id: paused.trigger_id}
    assert set(copies).isdisjoint({series.trigger_id, paused.trigger_id})

    expected = {one.trigger_id: [ran_one.occurrence_id],
                ran_series.run_trigger_id: [ran_series.occurrence_id],
                ran_paused.run_trigger_id: [ran_paused.occurrence_id]}
    assert await stack.receiver.wait_for(
        lambda: all(_occurrence_ids(stack, t) for t in expected), timeout_s=30)
    await asyncio.sleep(2)  # anything more (a second delivery of the run) would come now
    assert {t: _occurrence_ids(stack, t) for t in expected} == expected
    assert stack.receiver.for_trigger(one.trigger_id)[0].body["payload"] == {"k": "one"}
    for copy, original in copies.items():
        assert _occurrence_ids(stack, original) == []  # the schedule itself did not fire
        got = stack.receiver.for_trigger(copy)[0].body["payload"]
        assert got == {"k": "series" if original == series.trigger_id else "paused"}
        assert (await sdk.triggers.get(copy)).raw["snoozedFrom"] == original
    assert (await sdk.triggers.get(series.trigger_id)).status is Status.PENDING
    assert (await sdk.triggers.get(paused.trigger_id)).status is Status.PAUSED
    assert (await sdk.triggers.get(one.trigger_id)).status is Status.FIRED
    # The key's record outlives the delivery; another key finds the trigger finished.
    assert (await sdk.triggers.run(one.trigger_id, idempotency_key=key)).replayed
    with pytest.raises(Conflict) as e:
        await sdk.triggers.run(one.trigger_id)
    assert e.value.error == "not_runnable" and e.value.trigger_status == "FIRED"


async def test_triggerctl_run(stack: Stack, sdk: AsyncTriggerClient) -> None:
    series = await sdk.triggers.create(callback_url=stack.receiver.base_url + "cb",
                                       delay_s=3600, rrule="FREQ=DAILY")
    code, out = await cli(stack, "run", series.trigger_id, "--idempotency-key", "r1",
                          "--output", "json")
    assert code == 0, out
    first = json.loads(out)
    assert first["triggerId"] == series.trigger_id != first["runTriggerId"]
    code, out = await cli(stack, "run", series.trigger_id, "--idempotency-key", "r1")
    assert code == 0 and first["occurrenceId"] in out and "replayed" in out, out
    code, out = await cli(stack, "run", "trg_nope")
    assert code != 0, out  # the error itself goes to stderr
