"""Tags, labels, filtered listings and cancel-by-filter jobs on the real stack:
Cassandra's term index, the API, SQS and a dispatcher delivering what was not cancelled."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from tests.integration.conftest import Stack
from tests.integration.test_cli import cli, cli_json
from trigger_client import AsyncTriggerClient, Status, TriggerClient

pytestmark = pytest.mark.integration


async def _create(stack: Stack, n: int, **fields: Any) -> list[str]:
    ids: list[str] = []
    for start in range(0, n, 25):  # a few at once, as clients do
        answers = await asyncio.gather(*(stack.post(stack.body(**fields))
                                         for _ in range(start, min(n, start + 25))))
        for status, body, _ in answers:
            assert status == 201, body
            ids.append(body["triggerId"])
    return ids


async def _listed(stack: Stack, query: str) -> list[str]:
    ids: list[str] = []
    cursor = ""
    for _ in range(200):
        resp = await stack.client.get(f"/v1/triggers?{query}{cursor}", headers=stack.auth())
        body = await resp.json()
        assert resp.status == 200, body
        ids += [t["triggerId"] for t in body["items"]]
        if body["nextCursor"] is None:
            return ids
        cursor = f"&cursor={body['nextCursor']}"
    raise AssertionError("the listing never ended")


async def test_filters_combine_and_follow_an_edit(stack: Stack) -> None:
    a = await _create(stack, 3, delaySeconds=3600, tags=["a"], labels={"team": "x"})
    b = await _create(stack, 2, delaySeconds=3600, tags=["a", "b"], labels={"team": "y"})
    await _create(stack, 2, delaySeconds=3600)
    assert sorted(await _listed(stack, "tag=a")) == sorted(a + b)
    assert sorted(await _listed(stack, "tag=a&label=team:x")) == sorted(a)
    assert sorted(await _listed(stack, "label=team:y&status=PENDING")) == sorted(b)
    resp = await stack.client.delete(f"/v1/triggers/{a[0]}", headers=stack.auth())
    assert resp.status == 200
    assert await _listed(stack, "tag=a&status=CANCELLED") == [a[0]]
    resp = await stack.client.patch(f"/v1/triggers/{b[0]}", json={"tags": ["c"]},
                                    headers=stack.auth())
    assert resp.status == 200, await resp.json()
    assert b[0] not in await _listed(stack, "tag=b")
    assert await _listed(stack, "tag=c") == [b[0]]
    view = await (await stack.client.get(f"/v1/triggers/{b[0]}", headers=stack.auth())).json()
    assert view["tags"] == ["c"] and view["labels"] == {"team": "y"}


async def test_a_small_page_walks_a_tag_to_the_end(stack: Stack) -> None:
    tagged = await _create(stack, 40, delaySeconds=3600, tags=["walk"])
    await _create(stack, 10, delaySeconds=3600, tags=["other"])
    found = await _listed(stack, "tag=walk&limit=3")
    assert sorted(found) == sorted(tagged) and len(found) == len(set(found))


async def test_a_cancel_by_tag_job_cancels_hundreds_and_none_of_them_delivers(
        stack: Stack) -> None:
    fire_in_s = 25
    doomed = await _create(stack, 300, delaySeconds=fire_in_s, tags=["promo"])
    kept = await _create(stack, 5, delaySeconds=fire_in_s, tags=["keep"])
    await stack.start_dispatcher()
    resp = await stack.client.post("/v1/triggers/jobs", headers=stack.auth(),
                                   json={"action": "cancel", "filter": {"tag": "promo"}})
    job = await resp.json()
    assert resp.status == 202, job
    assert job["matched"] == 300
    deadline = time.monotonic() + 20
    while job["state"] != "done" and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
        job = await (await stack.client.get(f"/v1/triggers/jobs/{job['jobId']}",
                                            headers=stack.auth())).json()
        assert job["done"] + job["failed"] <= job["matched"]
    assert (job["state"], job["done"], job["failed"]) == ("done", 300, 0)
    assert sorted(await _listed(stack, "tag=promo&status=CANCELLED")) == sorted(doomed)
    # The kept ones fire; the cancelled ones, due at the same time, never do.
    assert await stack.receiver.wait_for(
        lambda: all(stack.receiver.for_trigger(t) for t in kept), timeout_s=fire_in_s + 30)
    await asyncio.sleep(2)  # time for a wrongly delivered one to arrive too
    assert [t for t in doomed if stack.receiver.for_trigger(t)] == []


async def test_the_sdks_and_triggerctl_filter_pause_resume_and_cancel_by_tag(stack: Stack) -> None:
    base = str(stack.client.make_url("")).rstrip("/")
    async with AsyncTriggerClient(base, stack.token) as aio:
        made = [await aio.triggers.create(callback_url=stack.receiver.base_url + "cb",
                                          delay_s=3600, tags=["sdk"], labels={"k": "v"})
                for _ in range(3)]
        listed = [t async for t in aio.triggers.list(tag="sdk", label="k:v", page_size=2)]
        assert sorted(t.trigger_id for t in listed) == sorted(c.trigger_id for c in made)
        assert listed[0].tags == ("sdk",) and listed[0].labels == {"k": "v"}
    sync = TriggerClient(base, stack.token)
    try:
        one = await asyncio.to_thread(sync.triggers.list_page, tag="sdk", limit=1)
        assert len(one.items) == 1 and one.next_cursor is not None
    finally:
        sync.close()
    code, table = await cli(stack, "ls", "--tag", "sdk")
    assert code == 0 and all(c.trigger_id[:12] in table for c in made), table
    job = await cli_json(stack, "pause", "--tag", "sdk", "--poll", "0.1")
    assert (job["action"], job["state"], job["done"]) == ("pause", "done", 3)
    code, text = await cli(stack, "resume", "--label", "k:v", "--policy", "latest",
                           "--poll", "0.1")
    assert code == 0 and "3 resumed, 0 failed of 3" in text, text
    async with AsyncTriggerClient(base, stack.token) as aio:
        assert {(await aio.triggers.get(c.trigger_id)).status for c in made} == {
            Status.PENDING}
    job = await cli_json(stack, "cancel", "--tag", "sdk", "--poll", "0.1")
    assert (job["state"], job["matched"], job["done"]) == ("done", 3, 3)
    code, text = await cli(stack, "cancel", "--label", "k:v", "--poll", "0.1")
    assert code == 0 and "0 cancelled, 0 failed of 0" in text  # all cancelled already
    code, _ = await cli(stack, "cancel")  # neither an id nor a filter
    assert code != 0
