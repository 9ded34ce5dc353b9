"""An enable with a replay (``app.endpoints``) on the fakes: the parked triggers are found
through the index of the endpoint's parked triggers, never by listing the caller's triggers;
a parked trigger resumed, cancelled or due before the time meanwhile is not replayed, and the
entry of one no longer parked is deleted."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from tests.unit.app.support import NOW_MS, Env, drive, make_env, request
from trigger_service.adapters.memory.endpoint_health import MemoryEndpointHealth, MemoryOpsEvents
from trigger_service.app.dead_letters import DeadLetterService
from trigger_service.app.endpoints import Enabled, EndpointService
from trigger_service.app.trigger_jobs import TriggerJobRunner
from trigger_service.core.endpoint_health import ENDPOINT_DISABLED, ParkedTrigger
from trigger_service.core.model import Status, Trigger
from trigger_service.core.pause import paused
from trigger_service.core.ports.values import ListCursor, ListPage
from trigger_service.core.tags import TriggerFilter
from trigger_service.core.urls import callback_origin

pytestmark = pytest.mark.timeout(10)
CALLER = "orders"
ORIGIN_URL = "http://127.0.0.1:9000/cb"
OTHER_URL = "http://127.0.0.1:9001/cb"
ORIGIN = callback_origin(ORIGIN_URL)


class Parts:
    def __init__(self, env: Env) -> None:
        self.env = env
        self.health = MemoryEndpointHealth(env.clock)
        self.runner = TriggerJobRunner(env.settings, env.service, env.store, env.clock,
                                       owner="a")
        letters = DeadLetterService(env.settings, env.store, env.service, env.clock,
                                    env.metrics)
        self.endpoints = EndpointService(env.settings.endpoint_health, self.health,
                                         MemoryOpsEvents(), env.store, self.runner, letters,
                                         env.clock)
        self.listings = 0
        listing = env.service.list_triggers

        async def counted(caller: str, *, status: Status | None, limit: int,
                          cursor: ListCursor | None, flt: TriggerFilter | None = None
                          ) -> ListPage:
            self.listings += 1
            return await listing(caller, status=status, limit=limit, cursor=cursor, flt=flt)
        env.service.list_triggers = counted  # type: ignore[method-assign]

    async def new(self, delay_ms: int, url: str = ORIGIN_URL) -> Trigger:
        r = await self.env.service.register_planned(
            CALLER, request(self.env, delay_ms, url=url), None, "h")
        return await self.env.service.get(CALLER, r.trigger_id)

    async def park(self, t: Trigger, *, entered: bool = True) -> Trigger:
        """As the dispatcher parks ``t`` (``entered=False``: before the index existed)."""
        if entered:
            await self.health.note_parked(CALLER, callback_origin(t.callback_url),
                                          ParkedTrigger(t.trigger_id, t.due_at_ms()), 86_400)
        parked = replace(paused(t), last_error=ENDPOINT_DISABLED)
        assert await self.env.store.compare_and_set(t, parked)
        return parked

    async def enable(self, since_ms: int) -> Enabled:
        task = asyncio.ensure_future(self.endpoints.enable(CALLER, ORIGIN, since_ms, "test"))
        await drive(self.env.clock, task)
        return task.result()


async def test_an_enable_replays_the_parked_triggers_through_the_index_alone() -> None:
    p = Parts(make_env())
    unrelated = [await p.new(60_000 + n) for n in range(20)]  # the caller's other triggers
    await p.park(await p.new(60_000, OTHER_URL))  # parked for another endpoint
    parked = [await p.park(await p.new(60_000 + n)) for n in range(3)]
    resumed = await p.park(await p.new(61_000))
    await p.env.service.resume(CALLER, resumed.trigger_id, None)  # by hand, meanwhile
    cancelled = await p.park(await p.new(62_000))
    await p.env.service.cancel(CALLER, cancelled.trigger_id)
    early = await p.park(await p.new(1_000))  # due before the replay's time
    done = await p.enable(NOW_MS + 30_000)
    assert done.trigger_job is not None and done.trigger_job.total == len(parked)
    assert p.listings == 0  # the caller's triggers were never listed
    await p.runner.run_once()
    for t in parked:
        assert (await p.env.service.get(CALLER, t.trigger_id)).status is Status.PENDING
    assert (await p.env.service.get(CALLER, early.trigger_id)).status is Status.PAUSED
    for t in unrelated:
        assert (await p.env.service.get(CALLER, t.trigger_id)).status is Status.PENDING
    # The cancelled one's entry is gone; the others stay until a later enable or the TTL.
    assert {h.trigger_id for h in p.health.parked_entries(CALLER, ORIGIN)} == {
        t.trigger_id for t in (*parked, resumed, early)}


async def test_nothing_parked_through_the_index_starts_no_job() -> None:
    p = Parts(make_env())
    old = await p.park(await p.new(60_000), entered=False)  # parked before the index
    done = await p.enable(NOW_MS)
    assert done.trigger_job is None and p.listings == 0
    assert (await p.env.service.get(CALLER, old.trigger_id)).status is Status.PAUSED
