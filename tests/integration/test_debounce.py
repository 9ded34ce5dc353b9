"""Debounce on create on the real stack (Cassandra's LWTs on the heads, LocalStack SQS,
Redis, a dispatcher): ten requests 200 ms apart give one callback with the last payload;
ten at once make one trigger; the next request after it fired starts another; the same
from ``triggerctl``."""

from __future__ import annotations

import asyncio
import json

import pytest

from tests.integration.conftest import Stack
from tests.integration.test_cli import cli
from trigger_client import AsyncTriggerClient, Debounce, Status

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


async def test_ten_requests_200_ms_apart_give_one_callback_with_the_last_payload(
        stack: Stack, sdk: AsyncTriggerClient) -> None:
    await stack.start_dispatcher()
    url = stack.receiver.base_url + "cb"
    digest = Debounce("digest", "replace", max_wait_s=60)
    answers = []
    # Each request moves the fire time 5 s past itself: far beyond the dispatcher's claim lead
    # (a request within it finds the trigger being delivered, and starts the next one).
    for n in range(10):
        answers.append(await sdk.triggers.create(callback_url=url, payload={"n": n},
                                                 delay_s=5, debounce=digest))
        await asyncio.sleep(0.2)
    tid = answers[0].trigger_id
    assert [a.trigger_id for a in answers] == [tid] * 10
    assert [a.debounced for a in answers] == [False] + [True] * 9
    assert answers[-1].fire_at > answers[0].fire_at  # trailing: the last request's time
    assert await stack.receiver.wait_for(lambda: bool(stack.receiver.for_trigger(tid)),
                                         timeout_s=30)
    await asyncio.sleep(1.5)  # a second callback would come now
    got = stack.receiver.for_trigger(tid)
    assert len(got) == 1 and got[0].body["payload"] == {"n": 9}
    assert (await sdk.triggers.get(tid)).status is Status.FIRED
    # It went out: the next request starts a new trigger.
    after = await sdk.triggers.create(callback_url=url, payload={"n": 10}, delay_s=3600,
                                      debounce=digest)
    assert after.trigger_id != tid and after.debounced is False


async def test_ten_at_once_make_one_trigger_and_keep_keeps_the_first(
        stack: Stack, sdk: AsyncTriggerClient) -> None:
    url = stack.receiver.base_url + "cb"
    keep = Debounce("burst", "keep")
    answers = await asyncio.gather(*(
        sdk.triggers.create(callback_url=url, payload={"n": n}, delay_s=3600, debounce=keep)
        for n in range(10)))
    ids = {a.trigger_id for a in answers}
    assert len(ids) == 1  # one trigger, whatever the interleaving
    (tid,) = ids
    # Requests that wrote the row at once may each be answered 201 (none found the other's
    # row first): at least one is, and every answer gives the row's fire time.
    assert any(not a.debounced for a in answers)
    t = await sdk.triggers.get(tid)
    assert {a.fire_at for a in answers} == {t.fire_at} and t.status is Status.PENDING
    listed = [x.trigger_id async for x in sdk.triggers.list(status=Status.PENDING)]
    assert listed.count(tid) == 1 and len(listed) == 1


async def test_triggerctl_create_with_debounce(stack: Stack) -> None:
    url = stack.receiver.base_url + "cb"
    argv = ["create", "--url", url, "--in", "1h", "--debounce", "ctl",
            "--debounce-mode", "keep", "--output", "json"]
    code, out = await cli(stack, *argv)
    assert code == 0, out
    first = json.loads(out)
    code, out = await cli(stack, *argv)
    assert code == 0, out
    again = json.loads(out)
    assert again["triggerId"] == first["triggerId"] and again["debounced"] is True
