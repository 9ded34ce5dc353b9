"""The index of held triggers of ``EndpointHealthStore`` (``MemoryEndpointHealth``,
``CassandraEndpointHealth``) against one contract: a (caller, origin)'s entries come back
from a due time on, by due time then id, in pages to the end, and only its own; writing an
entry again keeps one; a forgotten entry is gone (forgetting is idempotent), however many go
at once; an entry expires after its TTL."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from tests.contract.support import unique
from trigger_service.adapters.cassandra.endpoint_health import CassandraEndpointHealth
from trigger_service.adapters.cassandra.store import CassandraStore
from trigger_service.adapters.memory.endpoint_health import MemoryEndpointHealth
from trigger_service.config.endpoint_health import EndpointHealthSettings
from trigger_service.core.endpoint_health import ParkedTrigger
from trigger_service.core.ports.endpoint_health import EndpointHealthStore
from trigger_service.core.time.clock import ManualClock

T0 = 1_700_000_000_000
ORIGIN = "https://hooks.example.com:443"
OTHER_ORIGIN = "http://127.0.0.1:9000"
PAGE = 2
MANY = 130  # entries forgotten in one call: more than two of the Cassandra adapter's batches
TTL_S = 86_400
# Lets the given seconds pass for the store's TTLs (a fake clock, or the real one).
PassTime = Callable[[float], Awaitable[None]]


@pytest.fixture(params=[pytest.param("memory"),
                        pytest.param("cassandra", marks=pytest.mark.integration)])
def holds(request: pytest.FixtureRequest) -> tuple[EndpointHealthStore, PassTime]:
    if request.param == "memory":
        clock = ManualClock(T0)

        async def advance(seconds: float) -> None:
            clock.advance_ms(int(seconds * 1000))
        return MemoryEndpointHealth(clock, page_size=PAGE), advance
    real: CassandraStore = request.getfixturevalue("cassandra_store")
    return (CassandraEndpointHealth.of(real.statements, EndpointHealthSettings(page_size=PAGE)),
            asyncio.sleep)


async def read(store: EndpointHealthStore, caller: str, origin: str, since_ms: int
               ) -> list[list[ParkedTrigger]]:
    return [page async for page in store.parked_since(caller, origin, since_ms)]


async def test_entries_come_back_from_a_due_time_by_due_then_id_in_pages(
        holds: tuple[EndpointHealthStore, PassTime]) -> None:
    store = holds[0]
    caller, other = unique("eh-"), unique("eh-")
    mine = [ParkedTrigger(f"t{n}", T0 + due) for n, due in enumerate((30, 10, 20, 20, 40, 50))]
    for h in mine:
        await store.note_parked(caller, ORIGIN, h, TTL_S)
    await store.note_parked(caller, OTHER_ORIGIN, ParkedTrigger("x1", T0 + 30), TTL_S)
    await store.note_parked(other, ORIGIN, ParkedTrigger("x2", T0 + 30), TTL_S)
    pages = await read(store, caller, ORIGIN, T0 + 20)
    assert [h for page in pages for h in page] == [
        ParkedTrigger("t2", T0 + 20), ParkedTrigger("t3", T0 + 20), ParkedTrigger("t0", T0 + 30),
        ParkedTrigger("t4", T0 + 40), ParkedTrigger("t5", T0 + 50)]
    assert all(len(page) <= PAGE for page in pages) and len(pages) >= 3
    assert [h for p in await read(store, caller, ORIGIN, T0 + 51) for h in p] == []


async def test_an_entry_written_again_is_one_and_a_forgotten_one_is_gone(
        holds: tuple[EndpointHealthStore, PassTime]) -> None:
    store = holds[0]
    caller = unique("eh-")
    a, b = ParkedTrigger("ta", T0 + 1), ParkedTrigger("tb", T0 + 2)
    for h in (a, a, b):
        await store.note_parked(caller, ORIGIN, h, TTL_S)
    assert [h for p in await read(store, caller, ORIGIN, T0) for h in p] == [a, b]
    await store.forget_parked(caller, ORIGIN, [a, ParkedTrigger("never", T0 + 3)])
    await store.forget_parked(caller, ORIGIN, [a])  # again: nothing
    await store.forget_parked(caller, OTHER_ORIGIN, [b])  # another origin's: not this one
    assert [h for p in await read(store, caller, ORIGIN, T0) for h in p] == [b]


async def test_many_entries_forgotten_at_once_are_all_gone_and_only_they(
        holds: tuple[EndpointHealthStore, PassTime]) -> None:
    store = holds[0]
    caller = unique("eh-")
    entries = [ParkedTrigger(f"t{n:03}", T0 + n) for n in range(MANY)]
    await asyncio.gather(*(store.note_parked(caller, ORIGIN, h, TTL_S) for h in entries))
    kept = entries[::10]
    await store.forget_parked(caller, ORIGIN, [h for h in entries if h not in kept])
    assert [h for p in await read(store, caller, ORIGIN, T0) for h in p] == kept


async def test_an_entry_expires_after_its_ttl(
        holds: tuple[EndpointHealthStore, PassTime]) -> None:
    store, pass_time = holds
    caller = unique("eh-")
    await store.note_parked(caller, ORIGIN, ParkedTrigger("short", T0), 1)
    await store.note_parked(caller, ORIGIN, ParkedTrigger("long", T0), TTL_S)
    assert {h.trigger_id for p in await read(store, caller, ORIGIN, T0) for h in p} == {
        "short", "long"}
    await pass_time(2.2)
    assert [h.trigger_id for p in await read(store, caller, ORIGIN, T0) for h in p] == [
        "long"]
