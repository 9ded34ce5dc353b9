"""Idempotency-Key on the real stack: every promise of ``app.idempotency`` (the trigger row,
its id derived from the key, is the record; Redis' ``SET NX GET`` orders a key's requests).

Replays and key reuse, concurrent duplicates (one row, one delivery), a retry after the API
was SIGKILLed between the row and Redis' ``done``, after a store timeout and after Redis lost
everything, Redis down, and keys recorded by the earlier releases' code
path (the ``idempotency`` table).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from dataclasses import replace
from typing import Any

import aiohttp
import pytest

from tests.integration.conftest import Stack
from tests.integration.helpers import free_port, wait_ready
from trigger_service.adapters.cassandra.store import CassandraStore
from trigger_service.adapters.redis.client import open_client
from trigger_service.adapters.redis.idempotency import RedisIdempotencyCache
from trigger_service.app.registration import NewTrigger
from trigger_service.app.triggers import TriggerService
from trigger_service.core.errors import StoreError
from trigger_service.core.model import (
    Route,
    Trigger,
    keyed_trigger_id,
    new_trigger_id,
    shard_of,
)
from trigger_service.core.ports.idempotency import IdempotencyRecord
from trigger_service.core.ports.values import KeyedCreation
from trigger_service.core.time.timing import format_rfc3339_ms, parse_rfc3339_ms
from trigger_service.http.parsing import request_hash

pytestmark = pytest.mark.integration


def key(h: dict[str, str] | None = None, **more: str) -> dict[str, str]:
    return {"Idempotency-Key": more.pop("k", "k1"), **(h or {}), **more}


async def test_same_key_and_body_replays_and_another_body_is_refused(stack: Stack) -> None:
    body = stack.body(delaySeconds=600)
    s1, b1, h1 = await stack.post(body, **key())
    await asyncio.sleep(0.05)  # a delaySeconds body sent again later: the first fireAt
    s2, b2, h2 = await stack.post(body, **key())
    assert s1 == s2 == 201 and b1 == b2
    assert b1["triggerId"] == keyed_trigger_id(stack.caller, "k1")
    assert "Idempotent-Replayed" not in h1 and h2["Idempotent-Replayed"] == "true"
    s3, b3, _ = await stack.post(stack.body(delaySeconds=601), **key())
    assert s3 == 422 and b3["error"] == "idempotency_key_reused"
    s4, b4, _ = await stack.post(body, **key(k="k" * 256))
    assert s4 == 400 and b4["error"] == "invalid_request"
    # The same key from another caller is another key.
    resp = await stack.client.post("/v1/triggers", json=body, headers=stack.auth(
        stack.token + "-other") | key())
    assert resp.status == 201 and (await resp.json())["triggerId"] != b1["triggerId"]
    row = await stack.runtime.store.get(b1["triggerId"])
    assert row is not None and row.request_hash == request_hash(body)
    assert row.registered_fire_at_ms == parse_rfc3339_ms(b1["fireAt"])


async def test_concurrent_duplicates_make_one_row_and_one_delivery(stack: Stack) -> None:
    body = stack.body(delaySeconds=1)
    results = await asyncio.gather(*(stack.post(body, **key(k="same")) for _ in range(20)))
    assert {s for s, _, _ in results} == {201}
    assert {b["triggerId"] for _, b, _ in results} == {keyed_trigger_id(stack.caller, "same")}
    assert len({b["fireAt"] for _, b, _ in results}) == 1
    assert sum(1 for _, _, h in results if h.get("Idempotent-Replayed") != "true") == 1
    resp = await stack.client.get("/v1/triggers", headers=stack.auth())
    assert len((await resp.json())["items"]) == 1
    tid = results[0][1]["triggerId"]
    await stack.start_dispatcher()
    assert await stack.receiver.wait_for(lambda: bool(stack.receiver.for_trigger(tid)), 15)
    await asyncio.sleep(3)  # room for a duplicate to show up
    assert len(stack.receiver.for_trigger(tid)) == 1
    assert (await stack.wait_status(tid, "FIRED"))["status"] == "FIRED"


async def test_redis_flushed_between_identical_requests_still_one(stack: Stack) -> None:
    """FLUSHDB (the service's whole database; FLUSHALL would also empty other databases of
    the shared Redis and show nothing more): the row answers."""
    body = stack.body(delaySeconds=600)
    _, b1, _ = await stack.post(body, **key(k="flush-me"))
    await stack.redis.flushdb()
    s2, b2, h2 = await stack.post(body, **key(k="flush-me"))
    assert s2 == 201 and b2 == b1 and h2["Idempotent-Replayed"] == "true"
    s3, b3, _ = await stack.post(stack.body(delaySeconds=5), **key(k="flush-me"))
    assert s3 == 422 and b3["error"] == "idempotency_key_reused"
    resp = await stack.client.get("/v1/triggers", headers=stack.auth())
    assert [i["triggerId"] for i in (await resp.json())["items"]] == [b1["triggerId"]]




async def test_a_retry_after_the_api_was_killed_before_the_done_entry_replays(
    stack: Stack,
) -> None:
    """A real API process SIGKILLed after the row and the SQS message, before Redis' done
    (tests/integration/dying_api.py): the retry waits out the dead owner's claim, finds the
    row and answers the original trigger id and fireAt."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, **stack.env, "TRIGGER_API_PORT": str(port), "TRIGGER_API_WORKERS": "1"}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.integration.dying_api", env=env,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
    body = stack.body(delaySeconds=600)
    try:
        await wait_ready(url, proc)
        async with aiohttp.ClientSession() as http:
            with pytest.raises(aiohttp.ClientError):
                async with http.post(url + "/v1/triggers", json=body,
                                     headers=stack.auth() | key(k="killed")) as resp:
                    await resp.read()
        assert await asyncio.wait_for(proc.wait(), 10) == -9
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    tid = keyed_trigger_id(stack.caller, "killed")
    row = await stack.runtime.store.get(tid)
    assert row is not None and row.registered_fire_at_ms is not None
    claim = json.loads(await stack.redis.get(f"idem:{stack.caller}:killed"))
    assert claim["state"] == "pending"  # the dead owner's claim, until its TTL
    await asyncio.sleep(0.05)
    started = time.monotonic()
    status, got, headers = await stack.post(body, **key(k="killed"))
    assert status == 201 and headers["Idempotent-Replayed"] == "true"
    assert got["triggerId"] == tid
    assert got["fireAt"] == format_rfc3339_ms(row.registered_fire_at_ms)
    assert time.monotonic() - started < 5  # the 2 s wait, not the claim's 10 s
    resp = await stack.client.get("/v1/triggers", headers=stack.auth())
    assert [i["triggerId"] for i in (await resp.json())["items"]] == [tid]


class TimingOutStore(CassandraStore):
    """The real store whose keyed creation writes, then reports a timeout (a write that
    landed after the driver gave up on it)."""

    async def create_keyed(self, trigger: Trigger, index_ttl_s: int) -> KeyedCreation:
        await super().create_keyed(trigger, index_ttl_s)
        raise StoreError("cassandra create timed out")


def _timing_out(store: CassandraStore) -> CassandraStore:
    out = object.__new__(TimingOutStore)
    out.__dict__.update(store.__dict__)  # the same session and prepared statements
    return out


async def test_a_retry_after_a_store_timeout_replays_the_write_that_landed(
    stack: Stack,
) -> None:
    rt = stack.runtime
    assert isinstance(rt.store, CassandraStore)
    store = _timing_out(rt.store)
    flaky = TriggerService(stack.settings, store, store, rt.queue, rt.cache, rt.clock,
                           rt.metrics)
    now_ms = rt.clock.now_ms()
    new = NewTrigger(stack.body()["callbackUrl"], "null", now_ms + 600_000, now_ms)
    with pytest.raises(StoreError):
        await flaky.register_planned(stack.caller, new, "timed-out", "h")
    await asyncio.sleep(0.05)
    later = replace(new, fire_at_ms=rt.clock.now_ms() + 600_000,
                    received_at_ms=rt.clock.now_ms())  # the same body sent again later
    started = time.monotonic()
    retry = await stack.service.register_planned(stack.caller, later, "timed-out", "h")
    assert time.monotonic() - started < 1  # the failed owner gave the key back
    assert retry.replayed and retry.trigger_id == keyed_trigger_id(stack.caller, "timed-out")
    assert retry.fire_at_ms == new.fire_at_ms != later.fire_at_ms


async def test_redis_down_still_makes_one_trigger_under_concurrency(stack: Stack) -> None:
    rt = stack.runtime
    nowhere = open_client("redis://127.0.0.1:1/0")
    try:
        offline = TriggerService(stack.settings, rt.store, rt.store, rt.queue,
                                 RedisIdempotencyCache(nowhere), rt.clock, rt.metrics)
        now_ms = rt.clock.now_ms()
        new = NewTrigger(stack.body()["callbackUrl"], "null", now_ms + 600_000, now_ms)
        # Received a millisecond apart (a delaySeconds body: 20 fire times). Requests of
        # one body received in one millisecond are one creation, each answered as first.
        results = await asyncio.gather(*(offline.register_planned(
            stack.caller, replace(new, fire_at_ms=new.fire_at_ms + i,
                                  received_at_ms=now_ms + i), "no-redis", "h")
            for i in range(20)))
    finally:
        await nowhere.aclose()
    tid = keyed_trigger_id(stack.caller, "no-redis")
    assert {r.trigger_id for r in results} == {tid}
    # One live row. Most requests are answered its fire time; a request that wrote its row
    # alone may have been answered its own if that row landed after the others elected
    # another home (its row then lost: adapters/homes.py).
    row = await rt.store.get(tid)
    assert row is not None
    assert sum(r.fire_at_ms == row.fire_at_ms for r in results) >= len(results) - 1
    assert sum(not r.replayed for r in results) <= 2
    resp = await stack.client.get("/v1/triggers", headers=stack.auth())
    # (The newest-first listing may show the id once per request that wrote the one row:
    # each wrote its creation's entry.)
    assert {i["triggerId"] for i in (await resp.json())["items"]} == {tid}
    # Redis back: the row answers, and another body is refused.
    status, _, _ = await stack.post(stack.body(delaySeconds=5), **key(k="no-redis"))
    assert status == 422


def _old_release_trigger(stack: Stack, body: dict[str, Any], idem_key: str) -> Trigger:
    """What the earlier releases created for a key: a random id."""
    now = int(time.time() * 1000)
    tid = new_trigger_id(now)
    return Trigger(tid, stack.caller, body["callbackUrl"], json.dumps(body["payload"]),
                   now + 600_000, now, shard_of(tid, stack.settings.shards), Route.DIRECT,
                   idem_key=idem_key)


async def test_a_key_recorded_by_the_old_code_path_is_honoured(stack: Stack) -> None:
    """The earlier releases' path: the key's LWT into ``idempotency``, then the trigger with
    a random id. The new code answers it, and refuses another body."""
    store = stack.runtime.store
    body = stack.body(delaySeconds=600)
    old = _old_release_trigger(stack, body, "old-key")
    assert await store.put_if_absent(IdempotencyRecord(
        stack.caller, "old-key", request_hash(body), old), 3600) is None
    await store.create(old, 3600)
    status, got, headers = await stack.post(body, **key(k="old-key"))
    assert status == 201 and headers["Idempotent-Replayed"] == "true"
    assert got["triggerId"] == old.trigger_id != keyed_trigger_id(stack.caller, "old-key")
    assert got["fireAt"] == format_rfc3339_ms(old.fire_at_ms)
    await stack.redis.flushdb()
    s2, b2, _ = await stack.post(stack.body(delaySeconds=5), **key(k="old-key"))
    assert s2 == 422 and b2["error"] == "idempotency_key_reused"
    assert await store.get(keyed_trigger_id(stack.caller, "old-key")) is None


async def test_an_old_record_whose_writer_died_is_repaired(stack: Stack) -> None:
    """The first request of an earlier release recorded the key and died before writing the
    trigger: the retry creates it (its id) instead of replaying a trigger that is not there."""
    body = stack.body(delaySeconds=600)
    ghost = _old_release_trigger(stack, body, "died")
    at = format_rfc3339_ms(ghost.fire_at_ms)
    response = {"triggerId": ghost.trigger_id, "fireAt": at, "nextFireAt": at,
                "status": "PENDING"}
    existing = await stack.runtime.store.put_if_absent(IdempotencyRecord(
        stack.caller, "died", request_hash(body), ghost), 3600)
    assert existing is None
    assert await stack.runtime.store.get(ghost.trigger_id) is None
    status, got, headers = await stack.post(body, **key(k="died"))
    assert status == 201 and got == response and headers["Idempotent-Replayed"] == "true"
    t = await stack.runtime.store.get(ghost.trigger_id)
    assert t is not None and t.status.value == "PENDING" and t.fire_at_ms == ghost.fire_at_ms
