"""A cancel answered 200 is never delivered, on the real stack, when a key's requests race
while Redis is lost: 150 keys, each sent three times at once with the same ``delaySeconds``
body while Redis' database is flushed every 30 ms (no request of a key waits for another:
each owns it), then every trigger cancelled, then a sweeper and two dispatchers run past the
fire times. One trigger per key, with one live row; none delivered.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from redis.exceptions import RedisError

from tests.integration.conftest import Stack
from trigger_service.adapters.cassandra.store import CassandraStore
from trigger_service.core.model import Status, keyed_trigger_id

pytestmark = pytest.mark.integration

KEYS = 150
COPIES = 3
DELAY_S = 20  # room for 450 requests and 150 cancels on a loaded machine


async def test_keyed_creates_raced_while_redis_is_flushed_then_cancelled_never_fire(
        stack: Stack) -> None:
    store = stack.runtime.store
    assert isinstance(store, CassandraStore)
    keys = [f"storm-{i}" for i in range(KEYS)] + ["control"]  # not cancelled: it fires
    body = stack.body(delaySeconds=DELAY_S)
    flushing = asyncio.Event()
    flushes = 0

    async def flush() -> None:
        nonlocal flushes
        while not flushing.is_set():
            try:
                await stack.redis.flushdb()
                flushes += 1
            except RedisError:
                # The 450 requests share this event loop: a connect can outlast Redis'
                # 2 s timeout. A flush missed is not the test's failure; the next one runs.
                pass
            await asyncio.sleep(0.03)

    flusher = asyncio.create_task(flush())
    started = time.monotonic()
    results = await asyncio.gather(*(stack.post(body, **{"Idempotency-Key": k})
                                     for k in keys for _ in range(COPIES)))
    flushing.set()
    await flusher
    assert flushes >= 3
    by_key: dict[str, set[str]] = {}
    for k, (status, answer, _) in zip([k for k in keys for _ in range(COPIES)], results,
                                      strict=True):
        assert status == 201, answer
        by_key.setdefault(k, set()).add(answer["triggerId"])
    assert by_key == {k: {keyed_trigger_id(stack.caller, k)} for k in keys}

    control = keyed_trigger_id(stack.caller, "control")
    ids = [keyed_trigger_id(stack.caller, k) for k in keys[:-1]]
    cancels = await asyncio.gather(*(stack.client.delete(f"/v1/triggers/{tid}",
                                                         headers=stack.auth()) for tid in ids))
    cancelled = [tid for tid, r in zip(ids, cancels, strict=True) if r.status == 200]
    assert time.monotonic() - started < DELAY_S - 2, "slower than the fire times"
    assert len(cancelled) == KEYS  # all before their fire time
    # One live row per id: at every home its key's requests wrote, at most one row answers.
    for tid in ids:
        p = await store.keyed_rows.pointer(tid)
        assert p is not None and p.shard is not None and p.homes
        live = [r for h in p.homes if (r := await store.get_at(tid, h, p.shard)) is not None]
        assert len(live) == 1 and live[0].status is Status.CANCELLED, (tid, p, live)

    await stack.start_sweeper()
    await stack.start_dispatcher()
    await stack.start_dispatcher()
    await asyncio.sleep(DELAY_S + 6 - (time.monotonic() - started))
    delivered = [tid for tid in cancelled if stack.receiver.for_trigger(tid)]
    assert delivered == []
    assert await stack.receiver.wait_for(lambda: bool(stack.receiver.for_trigger(control)), 10)
    assert {a.trigger_id for a in stack.receiver.for_trigger(control)} == {control}
