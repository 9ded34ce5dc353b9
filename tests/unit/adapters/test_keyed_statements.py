"""The CQL a keyed registration runs, seen by a spy in place of the Cassandra session: the
normal path (a first request, its replays) runs no conditional statement, with or without
Redis; a request of the key that finds another's creation (a replay Redis forgot, with
another fire time) runs one, the election of the home (``adapters.homes``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

from cassandra.query import UNSET_VALUE

from tests.keys import throwaway_cipher
from tests.unit.app.support import CALLBACK, NOW_MS, SETTINGS
from trigger_service.adapters import schema
from trigger_service.adapters.cassandra.sealing import RowSealer
from trigger_service.adapters.cassandra.statements import all_statements
from trigger_service.adapters.cassandra.store import CassandraStore
from trigger_service.adapters.memory.idempotency import MemoryIdempotencyCache
from trigger_service.adapters.memory.store import MemoryQueue
from trigger_service.app.registration import NewTrigger
from trigger_service.app.triggers import TriggerService
from trigger_service.core.errors import CacheError
from trigger_service.core.time.clock import ManualClock, SystemClock
from trigger_service.platform.metrics import InMemoryMetrics

KEYSPACE = "ks"


class SpyStatements:
    """``driver.Statements`` without a session: records each statement's name and keeps the
    trigger rows it is given."""

    def __init__(self) -> None:
        self.ran: list[str] = []
        self.pointers: dict[str, dict[str, Any]] = {}  # triggers: id -> where its row is
        self.rows: dict[tuple[Any, ...], dict[str, Any]] = {}  # triggers_by_minute, by key

    async def run(self, name: str, params: Sequence[Any]) -> list[dict[str, Any]]:
        self.ran.append(name)
        if name == "home_put_keyed":
            p = self.pointers.setdefault(params[-1], {
                schema.COL_HOME_AT_MS: params[1], schema.COL_SHARD: params[2],
                schema.COL_STATUS: None, schema.COL_CREATIONS: set(),
                schema.COL_LIVE_HOME: None})
            p[schema.COL_CREATIONS] |= params[3]
        elif name == "home_elect":
            p = self.pointers[params[-1]]
            if p[schema.COL_LIVE_HOME] is not None:
                return [{schema.LWT_APPLIED: False} | p]
            p[schema.COL_LIVE_HOME] = params[0]
            return [{schema.LWT_APPLIED: True}]
        elif name == "row_create":
            key = tuple(params[-4:])
            row = dict(zip(schema.TRIGGER_COLUMNS,
                           [None if v is UNSET_VALUE else v for v in params[1:-4]],
                           strict=True))
            self.rows[key] = row | {schema.COL_HOME_AT_MS: key[2]}
        elif name == "get" and params[0] in self.pointers:
            return [self.pointers[params[0]]]
        elif name == "row_get" and tuple(params) in self.rows:
            return [self.rows[tuple(params)]]
        return []

    async def pages(self, name: str, params: Sequence[Any], page_size: int | None = None
                    ) -> AsyncIterator[list[dict[str, Any]]]:
        if rows := await self.run(name, params):
            yield rows

    async def run_unlogged(self, writes: Sequence[tuple[str, Sequence[Any]]]) -> None:
        for name, params in writes:
            await self.run(name, params)

    async def run_conditional(self, writes: Sequence[tuple[str, Sequence[Any]]]
                              ) -> list[dict[str, Any]]:
        return [row for name, params in writes for row in await self.run(name, params)]


class SpyStore(CassandraStore):
    """The real store's parts and row mapping, on ``SpyStatements`` instead of a session."""

    def __init__(self) -> None:  # no cluster: nothing here talks to one
        self.texts = all_statements(KEYSPACE)
        self.spy = SpyStatements()
        self.ran = self.spy.ran
        # A system clock: a lone registration's writes go at once.
        self._compose(self.spy, RowSealer(throwaway_cipher(), seal_payloads=True),
                      SystemClock())

    def conditional(self) -> list[str]:
        return [name for name in self.ran if " IF " in self.texts[name]]


def service(store: SpyStore, cache: MemoryIdempotencyCache,
            clock: ManualClock) -> TriggerService:
    return TriggerService(SETTINGS, store, store, MemoryQueue(clock), cache, clock,
                          InMemoryMetrics())


def in_ten_minutes(clock: ManualClock) -> NewTrigger:
    now_ms = clock.now_ms()
    return NewTrigger(CALLBACK, "null", now_ms + 600_000, now_ms)


async def test_the_normal_keyed_path_runs_no_conditional_statement() -> None:
    clock = ManualClock(NOW_MS)
    store, cache = SpyStore(), MemoryIdempotencyCache(clock)
    svc = service(store, cache, clock)
    first = await svc.register_planned("orders", in_ten_minutes(clock), "k1", "h1")
    again = await svc.register_planned("orders", in_ten_minutes(clock), "k1", "h1")
    assert not first.replayed and again.replayed and first.trigger_id == again.trigger_id
    # The index batch with the pointer, one read of the pointer back, the row. The legacy
    # table is asked whether it holds anything (it does not), not read per key.
    assert [n for n in store.ran if n.startswith(("home_", "get", "row_"))] == [
        "home_put_keyed", "get", "row_create"]
    assert store.ran.count("idem_any") == 1 and "idem_get" not in store.ran
    assert store.conditional() == []
    clock.advance_ms(1_000)
    cache.entries.clear()  # Redis lost the key: a request a second later, another home
    lost = await svc.register_planned("orders", in_ten_minutes(clock), "k1", "h1")
    assert lost.replayed and lost.trigger_id == first.trigger_id
    assert lost.fire_at_ms == first.fire_at_ms
    assert store.conditional() == ["home_elect"]  # the one row there, elected once
    assert store.ran.count("row_create") == 1


async def test_without_redis_a_lone_request_runs_no_conditional_statement() -> None:
    clock = ManualClock(NOW_MS)
    store, cache = SpyStore(), MemoryIdempotencyCache(clock)
    cache.failures["claim"] = CacheError("redis down")
    svc = service(store, cache, clock)
    first = await svc.register_planned("orders", in_ten_minutes(clock), "k1", "h1")
    assert not first.replayed and store.conditional() == []
    clock.advance_ms(1_000)
    again = await svc.register_planned("orders", in_ten_minutes(clock), "k1", "h1")
    assert again.replayed and store.conditional() == ["home_elect"]
