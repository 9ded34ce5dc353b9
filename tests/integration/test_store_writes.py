"""What the store's writes leave in Cassandra's cells (CQL ``WRITETIME``/``TTL``): a creation
writes no nulls, a claim rewrites only the cells it changes (never the payload), a terminal
write rewrites every cell with the TTL so the whole row expires, and a value that goes away
is deleted."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pytest

from tests.contract.support import INDEX_TTL_S, make_trigger, unique, utc_ms
from tests.integration.conftest import KEYSPACE
from trigger_service.adapters import schema
from trigger_service.adapters.cassandra.store import CassandraStore
from trigger_service.core.model import Status

pytestmark = pytest.mark.integration


def cells(store: CassandraStore, trigger_id: str, *cols: str) -> dict[str, Any]:
    """Each column's value, write time and TTL, read with plain CQL."""
    what = ", ".join(f"{c}, WRITETIME({c}) AS wt_{c}, TTL({c}) AS ttl_{c}" for c in cols)
    row = store._session.execute(
        f"SELECT {what} FROM {KEYSPACE}.{schema.TABLE_TRIGGERS} "
        f"WHERE {schema.COL_TRIGGER_ID} = %s", [trigger_id]).one()
    assert row is not None
    return dict(row)


def tombstone_free(store: CassandraStore, trigger_id: str) -> None:
    """No cell of the row is a null written on purpose: absent columns have no write time."""
    got = cells(store, trigger_id, "last_error", "claim_id", "fired_at_ms", "snoozed_from")
    assert all(got[f"wt_{c}"] is None for c in ("last_error", "claim_id", "fired_at_ms",
                                                "snoozed_from")), got


async def test_a_claim_rewrites_only_what_it_changes_and_fired_expires_the_whole_row(
        store: CassandraStore) -> None:
    t = make_trigger(unique("lean-"), utc_ms(2031, 1, 2, 3, 4, 5))
    await store.create(t, INDEX_TTL_S)
    tombstone_free(store, t.trigger_id)
    created = cells(store, t.trigger_id, "payload", "status")

    claimed = t.with_status(Status.IN_FLIGHT, claim_id="c1", claimed_at_ms=t.fire_at_ms,
                            attempts=1)
    assert await store.compare_and_set(t, claimed)
    after_claim = cells(store, t.trigger_id, "payload", "status", "claim_id")
    assert after_claim["wt_payload"] == created["wt_payload"]  # the payload was not rewritten
    assert after_claim["wt_status"] > created["wt_status"]
    assert after_claim["claim_id"] == "c1" and after_claim["ttl_payload"] is None

    fired = claimed.with_status(Status.FIRED, fired_at_ms=t.fire_at_ms + 5, claim_id=None)
    assert await store.compare_and_set(claimed, fired, ttl_s=3600)
    done = cells(store, t.trigger_id, "payload", "status", "claim_id", "fired_at_ms")
    # Every cell that has a value carries the TTL (the row goes as a whole); the claim is gone.
    assert done["ttl_payload"] is not None and done["ttl_status"] is not None
    assert done["ttl_fired_at_ms"] is not None
    assert done["claim_id"] is None
    assert await store.get(t.trigger_id) == fired


async def test_caller_months_is_written_once_per_process_and_month(
        store: CassandraStore, monkeypatch: pytest.MonkeyPatch) -> None:
    caller = unique("months-")
    run = store._run_unlogged
    written: list[tuple[str, list[Any]]] = []

    async def spy(writes: Sequence[tuple[str, Sequence[Any]]]) -> None:
        written.extend((name, list(params)) for name, params in writes
                       if name == "month_put" and params[0] == caller)
        await run(writes)

    monkeypatch.setattr(store, "_run_unlogged", spy)
    first = make_trigger(caller, utc_ms(2031, 3, 2))
    await store.create(first, INDEX_TTL_S)
    later = make_trigger(caller, utc_ms(2031, 3, 30))  # same month, created after
    await store.create(later, INDEX_TTL_S)
    next_month = make_trigger(caller, utc_ms(2031, 4, 1))
    await store.create(next_month, INDEX_TTL_S)
    # One write per month, each with a TTL that covers every entry of its month.
    assert [p[1] for _, p in written] == [203103, 203104]
    assert written[0][1][2] > INDEX_TTL_S + (later.fire_at_ms - first.fire_at_ms) // 1000
    page = await store.list_by_caller(caller, start=(203101, -(2**63), ""), last_month=203112,
                                      limit=10, status=None)
    assert [t.trigger_id for t in page.triggers] == [
        first.trigger_id, later.trigger_id, next_month.trigger_id]


async def test_concurrent_registrations_share_batches_and_each_row_is_complete(
        store: CassandraStore, monkeypatch: pytest.MonkeyPatch) -> None:
    caller = unique("coalesce-")
    run = store._run_unlogged
    requests: list[list[str]] = []

    async def spy(writes: Sequence[tuple[str, Sequence[Any]]]) -> None:
        requests.append([name for name, _ in writes])
        await run(writes)

    monkeypatch.setattr(store, "_run_unlogged", spy)
    triggers = [make_trigger(caller, utc_ms(2031, 5, 1) + i) for i in range(40)]
    await asyncio.gather(*(store.create(t, INDEX_TTL_S) for t in triggers))
    # 40 registrations, each an index write then a row write, in far fewer requests; each
    # request holds whole registrations (two index entries each, or one row each).
    assert len(requests) < 40
    assert sum(r.count("create") for r in requests) == 40
    assert sum(r.count("bucket") for r in requests) == 40
    assert all(r.count("bucket") == r.count("by_caller") for r in requests)
    for t in triggers:
        assert await store.get(t.trigger_id) == t
    page = await store.list_by_caller(caller, start=(203101, -(2**63), ""), last_month=203112,
                                      limit=100, status=None)
    assert sorted(x.trigger_id for x in page.triggers) == sorted(t.trigger_id for t in triggers)


async def test_a_large_payload_row_is_written_alone(
        store: CassandraStore, monkeypatch: pytest.MonkeyPatch) -> None:
    run_unlogged = store._run_unlogged
    batched: list[str] = []

    async def spy(writes: Sequence[tuple[str, Sequence[Any]]]) -> None:
        batched.extend(name for name, _ in writes)
        await run_unlogged(writes)

    monkeypatch.setattr(store, "_run_unlogged", spy)
    big = replace(make_trigger(unique("big-"), utc_ms(2031, 5, 2)),
                  payload_json='"' + "x" * 4000 + '"')
    await store.create(big, INDEX_TTL_S)
    assert "create" not in batched and "bucket" in batched
    assert await store.get(big.trigger_id) == big
