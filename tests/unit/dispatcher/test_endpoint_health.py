"""Endpoint health in the dispatcher (``dispatcher.endpoint_health``), on a fake clock: a
herd of failures writes little, a success resets, continuous failure past disable_after_s
disables once with one event, and a disabled endpoint's due occurrences are parked."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import replace

import pytest

from dispatcher.endpoint_health import NOTIFY_GRACE_MS, EndpointWatch
from tests.unit.dispatcher.fakes import (
    CALLER,
    OK,
    ORIGIN,
    OTHER_CALLER,
    AlwaysLosingStore,
    Env,
    failed,
)
from trigger_service.adapters.memory.endpoint_health import MemoryEndpointHealth, MemoryOpsEvents
from trigger_service.config.callers import CallerRegistry
from trigger_service.core.dead_letters import DeadLetterReason
from trigger_service.core.endpoint_health import (
    ENDPOINT_DISABLED,
    EndpointHealth,
    EndpointState,
    ParkedTrigger,
)
from trigger_service.core.errors import StoreError
from trigger_service.core.model import Status
from trigger_service.core.ports.values import DeliveryResult
from trigger_service.core.urls import callback_origin

pytestmark = pytest.mark.timeout(10)
DISABLE_AFTER_S = 60


@pytest.fixture
def parts(env: Env) -> tuple[MemoryEndpointHealth, MemoryOpsEvents]:
    eh = env.settings.endpoint_health
    env.settings = replace(env.settings, endpoint_health=replace(
        eh, disable_after_s=DISABLE_AFTER_S, write_every_s=10, refresh_s=2))
    return MemoryEndpointHealth(env.clock), MemoryOpsEvents()


def _watch(env: Env, store: MemoryEndpointHealth, events: MemoryOpsEvents) -> EndpointWatch:
    return EndpointWatch(store, events, env.callers, env.settings.endpoint_health, env.clock,
                         env.metrics)


async def test_a_herd_of_failures_writes_at_the_transition_then_once_a_period(
        env: Env, parts: tuple[MemoryEndpointHealth, MemoryOpsEvents]) -> None:
    store, events = parts
    w = _watch(env, store, events)
    t = await env.add(0)
    for _ in range(200):
        await w.observe(t, failed())
    assert store.writes == 1  # the first failure only
    [h] = await store.endpoint_health()
    assert (h.caller, h.origin, h.failures, h.state) == (CALLER, ORIGIN, 1,
                                                         EndpointState.FAILING)
    env.clock.advance_ms(10_000)
    await w.observe(t, failed("timeout", None))
    assert store.writes == 2
    [h] = await store.endpoint_health()
    assert h.failures == 201 and h.last_error == "timeout"


class _SlowStore(MemoryEndpointHealth):
    """Answers the first failure's write after other tasks ran (as a real LWT does)."""

    async def note_first_failure(self, h: EndpointHealth, max_per_caller: int
                                 ) -> EndpointHealth | None:
        for _ in range(5):
            await asyncio.sleep(0)
        return await super().note_first_failure(h, max_per_caller)


async def test_failures_answering_together_make_one_write_and_are_all_counted(
        env: Env, parts: tuple[MemoryEndpointHealth, MemoryOpsEvents]) -> None:
    store, events = _SlowStore(), parts[1]
    w = _watch(env, store, events)
    t = await env.add(0)
    await asyncio.gather(*(w.observe(t, failed()) for _ in range(50)))
    assert store.writes == 1  # one transition write, not one LWT per concurrent failure
    env.clock.advance_ms(10_000)
    await w.observe(t, failed())
    [h] = await store.endpoint_health()
    assert h.failures == 51


async def test_a_success_resets_the_record_and_costs_nothing_when_there_is_none(
        env: Env, parts: tuple[MemoryEndpointHealth, MemoryOpsEvents]) -> None:
    store, events = parts
    w = _watch(env, store, events)
    t = await env.add(0)
    await w.observe(t, OK)
    await w.observe(t, DeliveryResult(False, 404, "HTTP 404"))  # answered: the origin is up
    assert store.writes == 0
    await w.observe(t, failed())
    await w.observe(t, DeliveryResult(False, 400, "HTTP 400"))
    assert await store.endpoint_health() == [] and store.writes == 2
    # A refused URL says nothing about the origin.
    await w.observe(t, DeliveryResult(False, None, "refused", refused=True))
    assert await store.endpoint_health() == []


async def test_another_dispatchers_record_is_reset_by_a_success_here(
        env: Env, parts: tuple[MemoryEndpointHealth, MemoryOpsEvents]) -> None:
    store, events = parts
    t = await env.add(0)
    await _watch(env, store, events).observe(t, failed())
    here = _watch(env, store, events)
    await here.refresh()
    await here.observe(t, OK)
    assert await store.endpoint_health() == []


async def test_continuous_failure_past_disable_after_disables_once_with_one_event(
        env: Env, parts: tuple[MemoryEndpointHealth, MemoryOpsEvents]) -> None:
    store, events = parts
    a, b = _watch(env, store, events), _watch(env, store, events)
    t = await env.add(0)
    await a.observe(t, failed())
    await b.observe(t, failed())  # b finds a's record
    env.clock.advance_ms(DISABLE_AFTER_S * 1000 - 1)
    await a.observe(t, failed())
    assert not (await store.endpoint_health())[0].disabled_at_ms
    env.clock.advance_ms(1)
    await a.observe(t, failed())
    await b.observe(t, failed())
    await a.drain()
    await b.drain()
    [h] = await store.endpoint_health()
    assert h.state is EndpointState.DISABLED
    assert h.first_failure_at_ms < (h.disabled_at_ms or 0)
    assert [e.type.value for e in events.sent] == ["endpoint.disabled"]
    assert events.sent[0].failures >= 3 and h.notified_at_ms is not None
    assert await a.disabled(CALLER, ORIGIN) and await b.disabled(CALLER, ORIGIN)
    # A success while disabled (a send that was under way) does not enable it.
    await a.observe(t, OK)
    assert (await store.endpoint_health())[0].state is EndpointState.DISABLED


async def test_an_event_not_sent_by_the_disabler_is_sent_by_a_later_read(
        env: Env, parts: tuple[MemoryEndpointHealth, MemoryOpsEvents]) -> None:
    store, events = parts
    events.fail = 1  # the disabler's send fails (its retries are the adapter's)
    w = _watch(env, store, events)
    t = await env.add(0)
    await w.observe(t, failed())
    env.clock.advance_ms(DISABLE_AFTER_S * 1000)
    await w.observe(t, failed())
    await w.drain()
    assert events.sent == [] and (await store.endpoint_health())[0].notified_at_ms is None
    other = _watch(env, store, events)
    await other.refresh()
    await other.drain()
    assert events.sent == []  # within the grace the disabler may still be retrying
    env.clock.advance_ms(NOTIFY_GRACE_MS)
    await other.refresh()
    await other.drain()
    assert [e.type.value for e in events.sent] == ["endpoint.disabled"]
    assert (await store.endpoint_health())[0].notified_at_ms is not None


async def _disable(env: Env, store: MemoryEndpointHealth, events: MemoryOpsEvents,
                   caller: str = CALLER) -> None:
    w = _watch(env, store, events)
    t = await env.add(0, caller=caller)
    await w.observe(t, failed())
    env.clock.advance_ms(DISABLE_AFTER_S * 1000)
    await w.observe(t, failed())
    await w.drain()


async def test_a_disabled_endpoints_due_occurrences_are_parked_not_attempted(
        env: Env, parts: tuple[MemoryEndpointHealth, MemoryOpsEvents]) -> None:
    store, events = parts
    await _disable(env, store, events)
    mine, other = await env.add(0), await env.add(0, caller=OTHER_CALLER)
    d = env.dispatcher_with(endpoints=(store, events))
    await d.handle(await env.receive_one(mine))
    await d.handle(await env.receive_one(other))
    assert env.row(mine).status is Status.PAUSED
    assert env.row(mine).last_error == ENDPOINT_DISABLED
    assert env.channel.ids() == [other.trigger_id]
    assert env.row(other).status is Status.FIRED
    assert await env.receive() == []  # the parked one's message is deleted
    # Entered in the index of the endpoint's parked triggers, for the trigger retention.
    assert store.parked_entries(CALLER, ORIGIN) == {
        ParkedTrigger(mine.trigger_id, mine.due_at_ms()): env.settings.retention_s}
    assert store.parked_entries(OTHER_CALLER, callback_origin(other.callback_url)) == {}


@pytest.mark.parametrize("cas", ["lost", "failed"])
async def test_the_index_entry_is_written_before_the_parking_lwt(
        env: Env, parts: tuple[MemoryEndpointHealth, MemoryOpsEvents], cas: str) -> None:
    """Whatever becomes of the LWT (lost to a cancel, or the store failing), the entry is
    there: the other order could lose a parked trigger from the replay."""
    store, events = parts
    if cas == "lost":  # another process's transition lands first, every time
        env.store = AlwaysLosingStore()
    await _disable(env, store, events)
    t = await env.add(0)
    d = env.dispatcher_with(endpoints=(store, events))
    msg = await env.receive_one(t)
    if cas == "failed":
        env.store.failures["compare_and_set"] = StoreError("down")
    with contextlib.suppress(StoreError):
        await d.handle(msg)
    assert env.row(t).status is Status.PENDING and env.channel.calls == []
    assert cas == "failed" or env.store.calls["compare_and_set"] >= 1  # tried, and lost
    assert ParkedTrigger(t.trigger_id, t.due_at_ms()) in store.parked_entries(CALLER, ORIGIN)


class _UnwrittenEntries(MemoryEndpointHealth):
    async def note_parked(self, caller: str, origin: str, parked: ParkedTrigger, ttl_s: int
                          ) -> None:
        raise StoreError("down")


async def test_a_trigger_whose_entry_is_not_written_is_not_parked(
        env: Env, parts: tuple[MemoryEndpointHealth, MemoryOpsEvents]) -> None:
    store, events = _UnwrittenEntries(env.clock), parts[1]
    await _disable(env, store, events)
    t = await env.add(0)
    d = env.dispatcher_with(endpoints=(store, events))
    with contextlib.suppress(StoreError):
        await d.handle(await env.receive_one(t))
    assert env.row(t).status is Status.PENDING and env.channel.calls == []


async def test_a_dead_letter_caller_gets_its_occurrences_dead_lettered(
        env: Env, parts: tuple[MemoryEndpointHealth, MemoryOpsEvents]) -> None:
    store, events = parts
    env.callers = CallerRegistry.from_mapping({"callers": {CALLER: {
        "token_sha256": "a" * 64, "callback_prefixes": ["https://orders.internal/"],
        "on_disabled": "dead_letter", "disable_after_s": DISABLE_AFTER_S}}})
    await _disable(env, store, events)
    t = await env.add(0)
    d = env.dispatcher_with(endpoints=(store, events))
    await d.handle(await env.receive_one(t))
    assert env.row(t).status is Status.FAILED and env.channel.calls == []
    [letter] = env.store.dead_letters.values()
    assert letter.reason is DeadLetterReason.ENDPOINT_DISABLED


async def test_a_callers_own_disable_after_s_overrides_the_setting(
        env: Env, parts: tuple[MemoryEndpointHealth, MemoryOpsEvents]) -> None:
    store, events = parts
    env.callers = CallerRegistry.from_mapping({"callers": {CALLER: {
        "token_sha256": "a" * 64, "callback_prefixes": ["https://orders.internal/"],
        "disable_after_s": 5}}})
    w = _watch(env, store, events)
    t = await env.add(0)
    await w.observe(t, failed())
    env.clock.advance_ms(5_000)
    await w.observe(t, failed())
    await w.drain()
    assert (await store.endpoint_health())[0].state is EndpointState.DISABLED


class _GatedReads(MemoryEndpointHealth):
    """Reads wait for ``gate`` (a store slow under load)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.gate.set()
        self.reads = 0

    async def endpoint_health(self, caller: str | None = None) -> list[EndpointHealth]:
        self.reads += 1
        await self.gate.wait()
        return await super().endpoint_health(caller)


async def test_a_caller_during_a_read_waits_for_its_answer_not_the_older_copy(
        env: Env, parts: tuple[MemoryEndpointHealth, MemoryOpsEvents]) -> None:
    store, events = _GatedReads(), parts[1]
    await _disable(env, store, events)
    w = _watch(env, store, events)
    assert await w.disabled(CALLER, ORIGIN)  # the copy: disabled
    assert await store.clear(CALLER, ORIGIN) is not None  # enabled (by the API)
    env.clock.advance_ms(2_000)  # the copy is old: the next ask reads
    store.gate.clear()
    reads = store.reads
    first = asyncio.ensure_future(w.disabled(CALLER, ORIGIN))
    second = asyncio.ensure_future(w.disabled(CALLER, ORIGIN))  # asks while it reads
    for _ in range(5):
        await asyncio.sleep(0)
    assert not second.done()  # not answered from the copy before the read
    store.gate.set()
    assert await first is False and await second is False
    assert store.reads == reads + 1  # one read, shared
