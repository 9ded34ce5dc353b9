"""A registration whose row write times out, against the real Cassandra.

A second store on the test keyspace sends the trigger row with a request timeout of a
microsecond: the driver sends the write and gives up on its answer at once, which is what a
real timeout is (the write was sent; whether it applied is unknown, and here it does). The
registration is written again, then answered ``OutcomeUnknown`` naming the trigger id; the
trigger exists, so "nothing was accepted" would have been a lie, and a retry with the same
Idempotency-Key (on a store whose answers arrive) is answered that one trigger.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import pytest
from cassandra.cluster import EXEC_PROFILE_DEFAULT

from tests.integration.conftest import KEYSPACE, Stack
from tests.keys import fixture_cipher
from trigger_service.adapters.cassandra import driver
from trigger_service.adapters.cassandra.sealing import RowSealer
from trigger_service.adapters.cassandra.store import CassandraStore
from trigger_service.app.creation import UNKNOWN_OUTCOME_ATTEMPTS
from trigger_service.app.registration import NewTrigger
from trigger_service.app.triggers import TriggerService
from trigger_service.config.settings import Settings
from trigger_service.core.errors import OutcomeUnknown, StoreTimeout
from trigger_service.core.model import Trigger, keyed_trigger_id
from trigger_service.core.ports import Clock
from trigger_service.http.parsing import request_hash

pytestmark = pytest.mark.integration


class HastyRowStore(CassandraStore):
    """Sends the trigger row with a 1 µs timeout (the index entries with the normal one)."""

    def _compose(self, statements: driver.Statements, sealer: RowSealer, clock: Clock) -> None:
        super()._compose(statements, sealer, clock)
        write_row = self.triggers._write_row

        async def hasty(t: Trigger, ts_us: int) -> None:
            profile = self._cluster.profile_manager.profiles[EXEC_PROFILE_DEFAULT]
            normal_s, profile.request_timeout = profile.request_timeout, 1e-6
            try:
                await write_row(t, ts_us)
            finally:
                profile.request_timeout = normal_s

        self.triggers._write_row = hasty  # type: ignore[method-assign]


@pytest.fixture
async def hasty_store() -> AsyncIterator[CassandraStore]:
    store = await HastyRowStore.connect(
        replace(Settings.from_env().cassandra, keyspace=KEYSPACE), fixture_cipher(),
        seal_payloads=True)
    try:
        yield store
    finally:
        await store.close()


async def get_when_there(stack: Stack, trigger_id: str) -> Any:
    """The trigger's view once a GET finds it (the write was sent; give it a moment)."""
    deadline = time.monotonic() + 10
    while True:
        resp = await stack.client.get(f"/v1/triggers/{trigger_id}", headers=stack.auth())
        if resp.status == 200 or time.monotonic() > deadline:
            assert resp.status == 200, await resp.text()
            return await resp.json()
        await asyncio.sleep(0.1)


async def test_a_timed_out_registration_is_outcome_unknown_and_its_key_settles_it(
        stack: Stack, hasty_store: CassandraStore) -> None:
    rt = stack.runtime
    service = TriggerService(stack.settings, hasty_store, hasty_store, rt.queue, rt.cache,
                             rt.clock, rt.metrics)
    body = stack.body(delaySeconds=3600)
    now_ms = rt.clock.now_ms()
    new = NewTrigger(body["callbackUrl"], '{"n":1}', now_ms + 3_600_000, now_ms)
    with pytest.raises(OutcomeUnknown) as caught:
        await service.register_planned(stack.caller, new, "k-unknown", request_hash(body))
    assert isinstance(caught.value.__cause__, StoreTimeout)
    counts = rt.metrics.snapshot()
    assert counts["registration_write_retries_total"] == UNKNOWN_OUTCOME_ATTEMPTS - 1
    assert counts["registration_outcome_unknown_total"] == 1
    trigger_id = caught.value.to_json()["triggerId"]
    assert trigger_id == keyed_trigger_id(stack.caller, "k-unknown")
    # The 503 could not vouch for it, and it is there: it would fire.
    assert (await get_when_there(stack, trigger_id))["status"] == "PENDING"
    # The caller's retry with the key, through the API: that trigger, not a second one.
    status, created, headers = await stack.post(body, **{"Idempotency-Key": "k-unknown"})
    assert status == 201, created
    assert created["triggerId"] == trigger_id and headers["Idempotent-Replayed"] == "true"
