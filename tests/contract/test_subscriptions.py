"""``SubscriptionStore`` (``MemorySubscriptions``, ``CassandraSubscriptions``) against one
contract: create or replace (a replacement keeps its creation time; new past the cap: None,
nothing written), each caller's own, delete with its failed events, failed events newest
first and bounded."""

from __future__ import annotations

import asyncio

import pytest

from tests.contract.support import unique
from trigger_service.adapters.cassandra.store import CassandraStore
from trigger_service.adapters.cassandra.subscriptions import CassandraSubscriptions
from trigger_service.adapters.memory.caller_events import MemorySubscriptions
from trigger_service.core.caller_events import EventType, FailedEvent, Subscription
from trigger_service.core.ports.caller_events import SubscriptionStore

T0 = 1_700_000_000_000
TTL_S = 3_600
URL = "https://hooks.example.com/events"


@pytest.fixture(params=[pytest.param("memory"),
                        pytest.param("cassandra", marks=pytest.mark.integration)])
def subs(request: pytest.FixtureRequest) -> SubscriptionStore:
    if request.param == "memory":
        return MemorySubscriptions()
    real: CassandraStore = request.getfixturevalue("cassandra_store")
    return CassandraSubscriptions(real.statements)


def sub(caller: str, name: str, *types: EventType, at_ms: int = T0,
        url: str = URL) -> Subscription:
    return Subscription(caller, name, url, frozenset(types), at_ms, at_ms)


async def test_put_creates_then_replaces_keeping_the_creation_time(
        subs: SubscriptionStore) -> None:
    caller = unique("subs-")
    first = sub(caller, "a", EventType.TRIGGER_FAILED)
    assert await subs.put_subscription(first, 5) == (first, True)
    later = sub(caller, "a", EventType.TRIGGER_FIRED, EventType.SERIES_FINISHED,
                at_ms=T0 + 5, url=URL + "/2")
    stored, created = await subs.put_subscription(later, 5) or (None, None)
    assert created is False and stored == Subscription(
        caller, "a", URL + "/2", later.events, T0, T0 + 5)
    assert await subs.subscriptions(caller) == [stored]
    assert await subs.subscriptions(unique("subs-")) == []


async def test_a_new_one_past_the_cap_writes_nothing(subs: SubscriptionStore) -> None:
    caller = unique("subs-")
    for name in ("b", "a"):
        assert await subs.put_subscription(sub(caller, name, EventType.TRIGGER_FAILED), 2)
    assert await subs.put_subscription(sub(caller, "c", EventType.TRIGGER_FAILED), 2) is None
    assert [s.name for s in await subs.subscriptions(caller)] == ["a", "b"]
    # A replacement at the cap is no new one.
    assert await subs.put_subscription(sub(caller, "a", EventType.TRIGGER_FIRED), 2)


async def test_delete_takes_its_failed_events_and_is_idempotent(
        subs: SubscriptionStore) -> None:
    caller = unique("subs-")
    await subs.put_subscription(sub(caller, "a", EventType.TRIGGER_DEAD_LETTERED), 5)
    await subs.put_subscription(sub(caller, "b", EventType.TRIGGER_DEAD_LETTERED), 5)
    for n in range(3):
        await subs.put_failed_event(FailedEvent(
            caller, "a", f"evt_{n}", EventType.TRIGGER_DEAD_LETTERED, T0, T0 + n, 8,
            "HTTP 500", f'{{"n":{n}}}'), TTL_S)
    got = await subs.failed_events(caller, "a", 2)
    assert [(f.event_id, f.failed_at_ms, f.data_json) for f in got] == [
        ("evt_2", T0 + 2, '{"n":2}'), ("evt_1", T0 + 1, '{"n":1}')]
    assert got[0] == FailedEvent(caller, "a", "evt_2", EventType.TRIGGER_DEAD_LETTERED, T0,
                                 T0 + 2, 8, "HTTP 500", '{"n":2}')
    assert await subs.failed_events(caller, "b", 10) == []
    assert await subs.delete_subscription(caller, "a") is True
    assert await subs.delete_subscription(caller, "a") is False
    assert await subs.failed_events(caller, "a", 10) == []
    assert [s.name for s in await subs.subscriptions(caller)] == ["b"]


async def test_concurrent_creations_leave_exactly_the_cap(subs: SubscriptionStore) -> None:
    caller, cap = unique("subs-"), 3
    got = await asyncio.gather(*(subs.put_subscription(sub(caller, f"n{n}"), cap)
                                 for n in range(10)))
    created = [r[0].name for r in got if r is not None]
    assert len(created) == cap and all(r is None or r[1] for r in got)
    assert sorted(x.name for x in await subs.subscriptions(caller)) == sorted(created)
    # A put of a name there is a replacement: never refused for the cap, even at it and
    # concurrently with refused creations.
    again = await asyncio.gather(
        *(subs.put_subscription(sub(caller, created[0], at_ms=T0 + n), cap) for n in range(4)),
        *(subs.put_subscription(sub(caller, f"m{n}"), cap) for n in range(4)))
    assert [r is not None and not r[1] for r in again[:4]] == [True] * 4
    assert again[4:] == [None] * 4
    # A delete frees a place, which one creation of those racing for it takes.
    assert await subs.delete_subscription(caller, created[1])
    after = await asyncio.gather(*(subs.put_subscription(sub(caller, f"k{n}"), cap)
                                   for n in range(5)))
    assert sum(r is not None for r in after) == 1
    assert len(await subs.subscriptions(caller)) == cap


async def test_concurrent_creations_of_one_name_make_it_once(subs: SubscriptionStore) -> None:
    caller = unique("subs-")
    got = await asyncio.gather(*(subs.put_subscription(sub(caller, "a", at_ms=T0 + n), 2)
                                 for n in range(6)))
    assert all(r is not None for r in got)
    assert sum(r[1] for r in got if r is not None) == 1
    assert [x.name for x in await subs.subscriptions(caller)] == ["a"]
