"""``EndpointHealthStore`` (``MemoryEndpointHealth``, ``CassandraEndpointHealth``) against one
contract: the first failure is kept (a second first failure gets it back), rewrites and the
disable apply only to the same record, the disable applies once, a success deletes a failing
record but not a disabled one, an enable deletes either; a caller has at most its cap of
records, every write renews a record's TTL (every column of it), and every caller's records
come back whatever the page size. The records of the table before 027 are moved on the first
read, and first failures made together past a caller's cap are taken back (Cassandra only)."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import pytest

from tests.contract.conftest import KEYSPACE
from tests.contract.support import unique
from trigger_service.adapters import schema
from trigger_service.adapters.cassandra.endpoint_health import CassandraEndpointHealth
from trigger_service.adapters.cassandra.store import CassandraStore
from trigger_service.adapters.memory.endpoint_health import MemoryEndpointHealth
from trigger_service.config.endpoint_health import EndpointHealthSettings
from trigger_service.core.endpoint_health import (
    EndpointHealth,
    EndpointState,
    failed_again,
    first_failure,
)
from trigger_service.core.ports.endpoint_health import EndpointHealthStore
from trigger_service.core.time.clock import ManualClock

T0 = 1_700_000_000_000
ORIGIN = "https://hooks.example.com:443"


CAP = 100
TTL_S = 86_400
PAGE = 2
SETTINGS = EndpointHealthSettings(record_ttl_s=TTL_S, page_size=PAGE)
# (caller, origin) → the seconds each column of its record has left to live
TtlsOf = Callable[[str, str], list[int]]
Health = MemoryEndpointHealth | CassandraEndpointHealth


@pytest.fixture(params=[pytest.param("memory"),
                        pytest.param("cassandra", marks=pytest.mark.integration)])
def health_ttls(request: pytest.FixtureRequest) -> tuple[Health, TtlsOf]:
    if request.param == "memory":
        fake = MemoryEndpointHealth(ManualClock(T0), ttl_s=TTL_S, page_size=PAGE)
        return fake, lambda caller, origin: [fake.expires_in_s(caller, origin)]
    real: CassandraStore = request.getfixturevalue("cassandra_store")
    cols = list(schema.ENDPOINT_HEALTH_COLUMNS)
    cql = (f"SELECT {', '.join(f'TTL({c}) AS t{n}' for n, c in enumerate(cols))}, {cols[3]}, "
           f"{cols[4]}, {cols[5]} FROM {KEYSPACE}.{schema.TABLE_ENDPOINT_HEALTH} "
           f"WHERE {schema.COL_CALLER} = %s AND {schema.COL_ORIGIN} = %s")

    def ttls(caller: str, origin: str) -> list[int]:
        row = real._session.execute(cql, (caller, origin)).one()
        # A null column has no TTL (none to renew).
        return [row[f"t{n}"] for n, c in enumerate(cols) if n < 3 or row[c] is not None]
    return CassandraEndpointHealth.of(real.statements, SETTINGS), ttls


@pytest.fixture
def health(health_ttls: tuple[Health, TtlsOf]) -> EndpointHealthStore:
    return health_ttls[0]


async def made(health: EndpointHealthStore, h: EndpointHealth) -> EndpointHealth:
    """The record stored for ``h`` (tracked: within the cap)."""
    stored = await health.note_first_failure(h, CAP)
    assert stored is not None
    return stored


async def test_the_first_failure_is_kept_and_given_back(health: EndpointHealthStore) -> None:
    caller = unique("eh-")
    h = first_failure(caller, ORIGIN, T0, "HTTP 503")
    assert await health.note_first_failure(h, CAP) == h
    later = first_failure(caller, ORIGIN, T0 + 50, "timeout")
    assert await health.note_first_failure(later, CAP) == h  # another process's transition
    assert await health.endpoint_health(caller) == [h]
    assert h in await health.endpoint_health()  # every caller's


async def test_rewrites_apply_only_to_the_same_record(health: EndpointHealthStore) -> None:
    caller = unique("eh-")
    h = await made(health, first_failure(caller, ORIGIN, T0, "HTTP 503"))
    more = failed_again(h, T0 + 9, "HTTP 502", 40)
    assert await health.note_failures(more)
    assert await health.endpoint_health(caller) == [more]
    assert not await health.note_failures(replace(more, first_failure_at_ms=T0 + 1))
    assert await health.clear_failing(caller, ORIGIN)
    assert not await health.note_failures(more)  # reset meanwhile: not recreated
    assert await health.endpoint_health(caller) == []


async def test_the_disable_applies_once_and_survives_a_success(
        health: EndpointHealthStore) -> None:
    caller = unique("eh-")
    h = await made(health, first_failure(caller, ORIGIN, T0, "HTTP 503"))
    assert not await health.mark_disabled(replace(h, first_failure_at_ms=T0 - 1), T0 + 5)
    assert await health.mark_disabled(h, T0 + 10)
    assert not await health.mark_disabled(h, T0 + 11)
    await health.mark_notified(h, T0 + 12)  # not the disabled record: not marked
    [got] = await health.endpoint_health(caller)
    assert got.notified_at_ms is None
    await health.mark_notified(replace(h, disabled_at_ms=T0 + 10), T0 + 12)
    [got] = await health.endpoint_health(caller)
    assert (got.state, got.disabled_at_ms, got.notified_at_ms) == (
        EndpointState.DISABLED, T0 + 10, T0 + 12)
    assert not await health.clear_failing(caller, ORIGIN)  # kept: disabled
    assert await health.clear(caller, ORIGIN) == got
    assert await health.clear(caller, ORIGIN) is None
    assert await health.endpoint_health(caller) == []
    assert await health.clear_failing(caller, ORIGIN)  # nothing there: fine


async def test_records_are_per_caller_and_origin(health: EndpointHealthStore) -> None:
    a, b = unique("eh-a"), unique("eh-b")
    for caller, origin in ((a, ORIGIN), (a, "http://127.0.0.1:9000"), (b, ORIGIN)):
        await health.note_first_failure(first_failure(caller, origin, T0, None), CAP)
    assert [h.origin for h in await health.endpoint_health(a)] == sorted(
        [ORIGIN, "http://127.0.0.1:9000"])
    assert [h.caller for h in await health.endpoint_health(b)] == [b]


async def test_a_caller_has_at_most_its_cap_of_records(health: EndpointHealthStore) -> None:
    a, b = unique("eh-a"), unique("eh-b")
    kept = [await health.note_first_failure(first_failure(a, f"https://o{n}.x:443", T0, None), 3)
            for n in range(3)]
    assert await health.note_first_failure(first_failure(a, ORIGIN, T0, None), 3) is None
    assert await health.note_first_failure(  # a tracked origin still gets its record back
        first_failure(a, "https://o1.x:443", T0 + 5, None), 3) == kept[1]
    assert await health.note_first_failure(first_failure(b, ORIGIN, T0, None), 3) is not None
    assert await health.endpoint_health(a) == kept
    assert await health.clear(a, "https://o0.x:443") is not None  # room again
    assert await health.note_first_failure(first_failure(a, ORIGIN, T0, None), 3) is not None


async def test_every_caller_s_records_come_back_in_pages_of_any_size(
        health: EndpointHealthStore) -> None:
    callers = [unique("eh-p") for _ in range(3)]
    records = [await made(health, first_failure(c, f"https://o{n}.x:443", T0, None))
               for c in callers for n in range(3)]
    every = await health.endpoint_health()  # pages of PAGE (2) rows
    assert [h for h in every if h.caller in callers] == sorted(records, key=lambda h: h.key)


async def test_every_write_renews_the_ttl_of_every_column(
        health_ttls: tuple[Health, TtlsOf]) -> None:
    health, ttls = health_ttls
    caller = unique("eh-")
    h = await made(health, first_failure(caller, ORIGIN, T0, "HTTP 503"))
    for ttl_s, write in ((2 * TTL_S, health.note_failures(failed_again(h, T0 + 9, None))),
                         (3 * TTL_S, health.mark_disabled(failed_again(h, T0 + 9, None), T0)),
                         (4 * TTL_S, health.mark_notified(replace(
                             failed_again(h, T0 + 9, None), disabled_at_ms=T0), T0))):
        assert health.ttl_s < ttl_s
        health.ttl_s = ttl_s
        assert await write is not False
        left = ttls(caller, ORIGIN)
        assert left and all(ttl_s - 60 < t <= ttl_s for t in left), (ttl_s, left)
    [got] = await health.endpoint_health(caller)
    assert (got.failures, got.last_error, got.disabled_at_ms, got.notified_at_ms) == (
        2, "HTTP 503", T0, T0)


async def test_a_rewrite_of_a_record_disabled_meanwhile_is_refused(
        health: EndpointHealthStore) -> None:
    caller = unique("eh-")
    h = await made(health, first_failure(caller, ORIGIN, T0, None))
    assert await health.mark_disabled(h, T0 + 1)
    assert not await health.note_failures(failed_again(h, T0 + 2, None))  # disabled meanwhile
    [got] = await health.endpoint_health(caller)
    assert got.disabled_at_ms == T0 + 1 and got.failures == 1


@pytest.mark.integration
async def test_the_records_of_the_table_before_027_move_on_the_first_read(
        cassandra_store: CassandraStore) -> None:
    caller = unique("eh-old")
    cassandra_store._session.execute(
        f"INSERT INTO {KEYSPACE}.{schema.TABLE_ENDPOINT_HEALTH_LEGACY} (k, caller, origin, "
        f"first_failure_at_ms, last_failure_at_ms, failures, disabled_at_ms) "
        f"VALUES (%s, %s, %s, %s, %s, %s, %s)",
        (schema.ENDPOINT_HEALTH_KEY, caller, ORIGIN, T0, T0 + 5, 7, T0 + 6))
    health = CassandraEndpointHealth.of(cassandra_store.statements, SETTINGS)
    moved = [h for h in await health.endpoint_health() if h.caller == caller]
    assert [(h.origin, h.failures, h.disabled_at_ms) for h in moved] == [(ORIGIN, 7, T0 + 6)]
    assert await health.endpoint_health(caller) == moved
    left = cassandra_store._session.execute(
        f"SELECT caller FROM {KEYSPACE}.{schema.TABLE_ENDPOINT_HEALTH_LEGACY} WHERE k = %s",
        (schema.ENDPOINT_HEALTH_KEY,)).all()
    assert caller not in [r["caller"] for r in left]


@pytest.mark.integration
async def test_first_failures_made_together_past_the_cap_never_leave_more_than_it(
        cassandra_store: CassandraStore) -> None:
    """Every dispatcher checks the caller's count before its insert, and they all do so
    before any inserts (the interleaving injected): the check after the insert takes back
    what went past the cap, so the bound holds (the ones taken back try at their next
    failure)."""
    cql = copy.copy(cassandra_store.statements)  # the store's session and statements
    health = CassandraEndpointHealth.of(cql, SETTINGS)
    caller, cap = unique("eh-race"), 2
    await made(health, first_failure(caller, ORIGIN, T0, None))  # one of the cap taken
    run, together = cql.run, 4
    checked = asyncio.Event()

    async def inserts_after_every_check(name: str, params: Sequence[Any]) -> list[dict[str, Any]]:
        nonlocal together
        if name == "eh_first":
            together -= 1
            if together == 0:
                checked.set()
            await checked.wait()
        return await run(name, params)

    cql.run = inserts_after_every_check  # type: ignore[method-assign]
    got = await asyncio.gather(*(health.note_first_failure(
        first_failure(caller, f"https://o{n}.x:443", T0, None), cap) for n in range(4)))
    stored = await health.endpoint_health(caller)
    assert len(stored) <= cap
    assert sorted(h.origin for h in got if h is not None) == sorted(
        h.origin for h in stored if h.origin != ORIGIN)
