"""What the store's writes leave in Cassandra's cells (CQL ``WRITETIME``/``TTL``): a creation
writes no nulls, a claim rewrites only the cells it changes (never the payload), a terminal
write rewrites every cell with the TTL so the whole row expires (its pointer too), and a
value that goes away is deleted. And how the rows of one partition share Paxos rounds:
concurrent conditional writes to one (minute, shard) go as one conditional batch, and a batch
that loses on some rows applies the others."""

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
from trigger_service.core.model import Status, Trigger, row_partition
from trigger_service.core.ports.values import NEWEST
from trigger_service.core.time.timing import DAY_MS

pytestmark = pytest.mark.integration


def pointer(store: CassandraStore, trigger_id: str) -> dict[str, Any]:
    """The ``triggers`` row of a trigger of this release: where its row is, and its TTL."""
    row = store._session.execute(
        f"SELECT {schema.COL_HOME_AT_MS}, {schema.COL_SHARD}, {schema.COL_STATUS}, "
        f"TTL({schema.COL_HOME_AT_MS}) AS ttl FROM {KEYSPACE}.{schema.TABLE_TRIGGERS} "
        f"WHERE {schema.COL_TRIGGER_ID} = %s", [trigger_id]).one()
    assert row is not None
    return dict(row)


def cells(store: CassandraStore, trigger_id: str, *cols: str) -> dict[str, Any]:
    """Each column's value, write time and TTL in the trigger's row, read with plain CQL."""
    where = pointer(store, trigger_id)
    home = where[schema.COL_HOME_AT_MS]
    what = ", ".join(f"{c}, WRITETIME({c}) AS wt_{c}, TTL({c}) AS ttl_{c}" for c in cols)
    row = store._session.execute(
        f"SELECT {what} FROM {KEYSPACE}.{schema.TABLE_BY_SECOND} WHERE "
        f"{schema.COL_HOME_SECOND} = %s AND {schema.COL_ROW_SHARD} = %s AND "
        f"{schema.COL_HOME_AT_MS} = %s AND {schema.COL_TRIGGER_ID} = %s",
        [*row_partition(home, where[schema.COL_SHARD]), home, trigger_id]).one()
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

    claimed = replace(t, status=Status.IN_FLIGHT, claim_id="c1", claimed_at_ms=t.fire_at_ms,
                            attempts=1)
    assert await store.compare_and_set(t, claimed)
    after_claim = cells(store, t.trigger_id, "payload", "status", "claim_id")
    assert after_claim["wt_payload"] == created["wt_payload"]  # the payload was not rewritten
    assert after_claim["wt_status"] > created["wt_status"]
    assert after_claim["claim_id"] == "c1" and after_claim["ttl_payload"] is None

    fired = replace(claimed, status=Status.FIRED, fired_at_ms=t.fire_at_ms + 5, claim_id=None)
    assert await store.compare_and_set(claimed, fired, ttl_s=3600)
    done = cells(store, t.trigger_id, "payload", "status", "claim_id", "fired_at_ms")
    # Every cell that has a value carries the TTL (the row goes as a whole); the claim is gone.
    assert done["ttl_payload"] is not None and done["ttl_status"] is not None
    assert done["ttl_fired_at_ms"] is not None
    assert done["claim_id"] is None
    assert await store.get(t.trigger_id) == fired
    # The row is in the partition of the minute it was created for; the pointer to it is
    # all that `triggers` holds, and it expires with the row.
    where = pointer(store, t.trigger_id)
    assert where[schema.COL_HOME_AT_MS] == t.fire_at_ms and where[schema.COL_STATUS] is None
    assert where["ttl"] is not None


async def test_created_hours_is_written_once_per_process_and_hour_unless_outlived(
        store: CassandraStore, monkeypatch: pytest.MonkeyPatch) -> None:
    caller = unique("hours-")
    run = store.statements.run_unlogged
    written: list[tuple[str, list[Any]]] = []

    async def spy(writes: Sequence[tuple[str, Sequence[Any]]]) -> None:
        written.extend((name, list(params)) for name, params in writes
                       if name == "created_hour_put" and params[0] == caller)
        await run(writes)

    monkeypatch.setattr(store.statements, "run_unlogged", spy)
    first = make_trigger(caller, utc_ms(2031, 3, 2))
    await store.create(first, INDEX_TTL_S)
    same = make_trigger(caller, utc_ms(2031, 3, 1))  # same creation hour, expires sooner
    await store.create(same, INDEX_TTL_S - 60)
    later = make_trigger(caller, utc_ms(2031, 4, 1))  # expires later: the row again
    await store.create(later, INDEX_TTL_S + 3_600)
    assert [p[2] for _, p in written] == [INDEX_TTL_S, INDEX_TTL_S + 3_600]
    page = await store.list_by_caller(caller, start=NEWEST, last_month=203112, limit=10,
                                      status=None)
    assert [t.trigger_id for t in page.triggers] == [
        later.trigger_id, same.trigger_id, first.trigger_id]


async def test_concurrent_registrations_share_batches_and_each_row_is_complete(
        store: CassandraStore, monkeypatch: pytest.MonkeyPatch) -> None:
    caller = unique("coalesce-")
    run = store.statements.run_unlogged
    requests: list[list[str]] = []

    async def spy(writes: Sequence[tuple[str, Sequence[Any]]]) -> None:
        requests.append([name for name, _ in writes])
        await run(writes)

    monkeypatch.setattr(store.statements, "run_unlogged", spy)
    triggers = [make_trigger(caller, utc_ms(2031, 5, 1) + i) for i in range(40)]
    await asyncio.gather(*(store.create(t, INDEX_TTL_S) for t in triggers))
    # 40 registrations, each an index write then a row write, in far fewer requests; each
    # request holds whole registrations (two index entries each, or one row each).
    assert len(requests) < 40
    assert sum(r.count("row_create") for r in requests) == 40
    assert sum(r.count("bucket") for r in requests) == 40
    assert all(r.count("bucket") == r.count("created_put") == r.count("home_put")
               for r in requests)
    for t in triggers:
        assert await store.get(t.trigger_id) == t
    page = await store.list_by_caller(caller, start=NEWEST, last_month=203112,
                                      limit=100, status=None)
    assert sorted(x.trigger_id for x in page.triggers) == sorted(t.trigger_id for t in triggers)


async def test_a_large_payload_row_is_written_alone(
        store: CassandraStore, monkeypatch: pytest.MonkeyPatch) -> None:
    run_unlogged = store.statements.run_unlogged
    batched: list[str] = []

    async def spy(writes: Sequence[tuple[str, Sequence[Any]]]) -> None:
        batched.extend(name for name, _ in writes)
        await run_unlogged(writes)

    monkeypatch.setattr(store.statements, "run_unlogged", spy)
    big = replace(make_trigger(unique("big-"), utc_ms(2031, 5, 2)),
                  payload_json='"' + "x" * 4000 + '"')
    await store.create(big, INDEX_TTL_S)
    assert "row_create" not in batched and "bucket" in batched
    assert await store.get(big.trigger_id) == big


async def test_conditional_writes_to_one_partition_share_a_paxos_round(
        store: CassandraStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """A wave's claims in one (minute, shard): one conditional batch, not one LWT each; and
    the outcomes after them too."""
    caller = unique("wave-")
    fire_ms = utc_ms(2031, 7, 1, 9)
    wave = [make_trigger(caller, fire_ms + i, shard=3) for i in range(12)]
    await asyncio.gather(*(store.create(t, INDEX_TTL_S) for t in wave))
    rounds = spy_conditional(store, monkeypatch)
    got = [await read(store, t.trigger_id) for t in wave]
    claimed = [replace(t, status=Status.IN_FLIGHT, claim_id=f"c{i}", claimed_at_ms=fire_ms,
                             attempts=1) for i, t in enumerate(wave)]
    assert all(await asyncio.gather(*(store.compare_and_set(old, new) for old, new
                                      in zip(got, claimed, strict=True))))
    assert sum(rounds) == 12 and len(rounds) < 12 and max(rounds) > 1
    rounds.clear()
    fired = [replace(c, status=Status.FIRED, fired_at_ms=fire_ms + 7, claim_id=None)
             for c in claimed]
    assert all(await asyncio.gather(*(store.compare_and_set(c, f, ttl_s=3600) for c, f
                                      in zip(claimed, fired, strict=True))))
    assert len(rounds) < 12
    assert [await store.get(t.trigger_id) for t in wave] == fired


async def test_a_batch_that_loses_on_some_rows_applies_the_others(
        store: CassandraStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two of six claims race a cancel that came first: those two lose (and only those),
    the four others apply; a second write to one row in the same wave waits for the first
    (two conditions on one row are never judged in one batch)."""
    caller = unique("lose-")
    fire_ms = utc_ms(2031, 7, 2, 9)
    wave = [make_trigger(caller, fire_ms + i, shard=5) for i in range(6)]
    await asyncio.gather(*(store.create(t, INDEX_TTL_S) for t in wave))
    got = [await read(store, t.trigger_id) for t in wave]
    for t in got[:2]:
        assert await store.compare_and_set(t, replace(t, status=Status.CANCELLED))
    rounds = spy_conditional(store, monkeypatch)
    claims = [replace(t, status=Status.IN_FLIGHT, claim_id="c", claimed_at_ms=fire_ms, attempts=1)
              for t in wave]
    # got[2] twice: a claim and a cancel of the same row, computed from the same read.
    cancel_2 = replace(wave[2], status=Status.CANCELLED)
    results = await asyncio.gather(
        *(store.compare_and_set(old, new) for old, new in zip(got, claims, strict=True)),
        store.compare_and_set(got[2], cancel_2))
    assert results[:6] == [False, False, True, True, True, True]
    assert results[6] is False  # the claim came first in the wave: the cancel then lost
    assert max(rounds) > 1
    now = [await store.get(t.trigger_id) for t in wave]
    assert [x.status if x else None for x in now] == [
        Status.CANCELLED, Status.CANCELLED] + [Status.IN_FLIGHT] * 4


async def read(store: CassandraStore, trigger_id: str) -> Trigger:
    t = await store.get(trigger_id)
    assert t is not None
    return t


def spy_conditional(store: CassandraStore, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Rows per conditional request the store sends (1: a lone LWT), as they go."""
    from trigger_service.adapters.cassandra import driver
    rounds: list[int] = []
    real = driver.execute_conditional

    async def spy(session: Any, name: str, statements: Sequence[Any]) -> list[dict[str, Any]]:
        rounds.append(len(statements))
        return await real(session, name, statements)

    monkeypatch.setattr(driver, "execute_conditional", spy)
    return rounds


async def test_a_row_of_an_earlier_release_is_read_and_moved_where_it_is(
        store: CassandraStore) -> None:
    """A trigger created before rows moved to triggers_by_minute (its whole row in
    `triggers`) is read, listed, claimed and finished there; so is a copy of this release's
    trigger that does not say where its row is (the pointer does)."""
    from cassandra.query import UNSET_VALUE

    from trigger_service.adapters.cassandra.statements import row_values
    caller = unique("legacy-")
    old = make_trigger(caller, utc_ms(2031, 8, 1, 9))
    await store.triggers._write_index(old, INDEX_TTL_S, old.created_at_ms * 1000)
    values = [UNSET_VALUE if v is None else v for v in row_values(old).values()]
    await store.statements.run("legacy_create", [old.created_at_ms * 1000, *values, old.trigger_id])
    got = await read(store, old.trigger_id)
    assert got == old and got.home_at_ms is None
    assert await store.get_many([old.trigger_id, "trg_missing"]) == [old, None]
    page = await store.list_by_caller(caller, start=NEWEST, last_month=203112, limit=10,
                                      status=None)
    assert page.triggers == [old]
    claimed = replace(got, status=Status.IN_FLIGHT, claim_id="c", claimed_at_ms=1, attempts=1)
    assert await store.compare_and_set(got, claimed)
    assert not await store.compare_and_set(got, claimed)  # the state moved on
    fired = replace(claimed, status=Status.FIRED, fired_at_ms=2, claim_id=None)
    assert await store.compare_and_set(claimed, fired, ttl_s=3600)
    assert await store.get(old.trigger_id) == fired

    new = make_trigger(caller, utc_ms(2031, 8, 2, 9))
    await store.create(new, INDEX_TTL_S)
    unread = replace(new, home_at_ms=None)  # as built, not as read
    assert await store.compare_and_set(unread, replace(unread, status=Status.CANCELLED))
    assert (await read(store, new.trigger_id)).status is Status.CANCELLED
    assert pointer(store, new.trigger_id)[schema.COL_STATUS] is None


async def legacy_row(store: CassandraStore, caller: str, fire_at_ms: int) -> Trigger:
    """A trigger as an earlier release wrote it: its whole row in ``triggers``."""
    from cassandra.query import UNSET_VALUE

    from trigger_service.adapters.cassandra.statements import row_values
    old = make_trigger(caller, fire_at_ms)
    await store.triggers._write_index(old, INDEX_TTL_S, old.created_at_ms * 1000)
    values = [UNSET_VALUE if v is None else v for v in row_values(old).values()]
    await store.statements.run("legacy_create", [old.created_at_ms * 1000, *values, old.trigger_id])
    return await read(store, old.trigger_id)


async def test_a_series_of_an_earlier_release_moves_at_its_next_step(
        store: CassandraStore) -> None:
    """Its next occurrence's row is made in triggers_by_second and the whole row becomes a
    pointer to it, in one step that applies once; from then on it is this release's."""
    old = await legacy_row(store, unique("legacy-"), utc_ms(2031, 9, 1, 9))
    assert old.home_at_ms is None
    stepped = replace(old, status=Status.PENDING, fire_at_ms=old.fire_at_ms + DAY_MS,
                              revision=(old.revision or 0) + 1)
    assert await store.advance(old, stepped, INDEX_TTL_S, stepped.created_at_ms)
    where = pointer(store, old.trigger_id)
    assert where[schema.COL_STATUS] is None
    assert where[schema.COL_HOME_AT_MS] == stepped.fire_at_ms
    leftover = store._session.execute(
        f"SELECT payload, revision FROM {KEYSPACE}."
        f"{schema.TABLE_TRIGGERS} WHERE {schema.COL_TRIGGER_ID} = %s", [old.trigger_id]).one()
    # Nothing of the old row is left.
    assert leftover is not None and list(leftover.values()) == [None, None]
    now = await read(store, old.trigger_id)
    assert now == stepped and now.home_at_ms == stepped.fire_at_ms
    assert not await store.advance(old, stepped, INDEX_TTL_S, stepped.created_at_ms)
    claimed = replace(now, status=Status.IN_FLIGHT, claim_id="c", claimed_at_ms=1, attempts=1)
    assert await store.compare_and_set(now, claimed)
    assert await store.get_at(old.trigger_id, stepped.fire_at_ms, old.shard) == claimed


async def test_a_step_of_an_earlier_release_that_loses_leaves_no_row_behind(
        store: CassandraStore) -> None:
    """A cancel ordered before the step's move: the step loses, the whole row stays
    cancelled where it is, and the row made for the move is gone again."""
    old = await legacy_row(store, unique("legacy-"), utc_ms(2031, 9, 2, 9))
    assert await store.compare_and_set(old, replace(old, status=Status.CANCELLED,
                                                            revision=(old.revision or 0) + 1))
    stepped = replace(old, status=Status.PENDING, fire_at_ms=old.fire_at_ms + DAY_MS,
                              revision=(old.revision or 0) + 1)
    assert not await store.advance(old, stepped, INDEX_TTL_S, stepped.created_at_ms)
    assert pointer(store, old.trigger_id)[schema.COL_STATUS] == Status.CANCELLED.value
    assert (await read(store, old.trigger_id)).status is Status.CANCELLED
    assert await store.get_at(old.trigger_id, stepped.fire_at_ms, old.shard) is None


async def test_a_copy_without_its_home_steps_where_its_pointer_says(
        store: CassandraStore) -> None:
    """A trigger of this release, stepped from a copy built without its home: no move."""
    t = make_trigger(unique("homeless-"), utc_ms(2031, 9, 3, 9))
    await store.create(t, INDEX_TTL_S)
    unread = replace(t, home_at_ms=None)
    stepped = replace(unread, status=Status.PENDING, fire_at_ms=t.fire_at_ms + DAY_MS,
                                 revision=(t.revision or 0) + 1)
    assert await store.advance(unread, stepped, INDEX_TTL_S, stepped.created_at_ms)
    assert pointer(store, t.trigger_id)[schema.COL_HOME_AT_MS] == t.fire_at_ms
    assert await store.get_at(t.trigger_id, stepped.fire_at_ms, t.shard) is None
    assert (await read(store, t.trigger_id)).fire_at_ms == stepped.fire_at_ms


def open_entries(store: CassandraStore, caller: str, hour: int) -> list[str]:
    """The ids in ``open_triggers`` for one caller and fire hour, every part, read raw."""
    return sorted(r[schema.COL_TRIGGER_ID] for part in range(schema.OPEN_PARTS)
                  for r in store._session.execute(
                      f"SELECT {schema.COL_TRIGGER_ID} FROM {KEYSPACE}.{schema.TABLE_OPEN} "
                      f"WHERE {schema.COL_CALLER} = %s AND {schema.COL_FIRE_HOUR} = %s "
                      f"AND {schema.COL_PART} = %s", [caller, hour, part]))


def open_hours(store: CassandraStore, caller: str) -> list[int]:
    return [r[schema.COL_FIRE_HOUR] for r in store._session.execute(
        f"SELECT {schema.COL_FIRE_HOUR} FROM {KEYSPACE}.{schema.TABLE_OPEN_HOURS} "
        f"WHERE {schema.COL_CALLER} = %s", [caller])]


async def test_the_open_index_holds_exactly_the_open_triggers_and_forgets_empty_hours(
        store: CassandraStore) -> None:
    """Not only filtered on read: an entry is deleted when its trigger finishes or moves,
    and a reader that finds an hour empty deletes the hour's row (its backdated delete
    cannot shadow an hour row written lately: here the rows were written by creations
    whose time is fixed in the past)."""
    hour_ms = 3_600_000
    caller = unique("open-")
    at = utc_ms(2031, 6, 1, 10)
    created_ms = utc_ms(2026, 1, 1)
    a, b, c = (replace(make_trigger(caller, at + i * 60_000, shard=i), created_at_ms=created_ms)
               for i in (1, 2, 3))
    for t in (a, b, c):
        await store.create(t, INDEX_TTL_S)
    hour = at // hour_ms
    assert open_entries(store, caller, hour) == sorted([a.trigger_id, b.trigger_id,
                                                          c.trigger_id])
    assert open_hours(store, caller) == [hour]
    assert await store.compare_and_set(a, replace(a, status=Status.CANCELLED), ttl_s=60)
    claimed = replace(b, status=Status.IN_FLIGHT, claim_id="k", claimed_at_ms=1, attempts=1)
    assert await store.compare_and_set(b, claimed)  # still open: the entry stays
    moved = replace(c, fire_at_ms=at + hour_ms, revision=1)
    assert await store.advance(c, moved, INDEX_TTL_S, created_ms)
    assert open_entries(store, caller, hour) == [b.trigger_id]
    assert open_entries(store, caller, hour + 1) == [c.trigger_id]
    assert await store.compare_and_set(claimed, replace(claimed, status=Status.FIRED),
                                       ttl_s=60)
    assert open_entries(store, caller, hour) == []
    page = await store.list_by_caller(caller, start=(203106, -(2**63), ""),
                                      last_month=203106, limit=10, status=Status.PENDING)
    assert [t.trigger_id for t in page.triggers] == [c.trigger_id]
    assert open_hours(store, caller) == [hour + 1]


async def test_the_backfill_indexes_the_triggers_of_an_earlier_release(
        store: CassandraStore) -> None:
    """Triggers an earlier release listed by fire month (``triggers_by_caller``), without
    entries in the listing indexes: after the backfill the open ones are listed as PENDING
    and all of them newest first."""
    from trigger_service.adapters.cassandra.backfill import backfill_listings
    from trigger_service.config.settings import Settings

    caller = unique("backfill-")
    at = utc_ms(2031, 8, 1, 12)
    old = [make_trigger(caller, at + i * 60_000, shard=i) for i in range(4)]
    for t in old:
        await store.create(t, INDEX_TTL_S)
    assert await store.compare_and_set(old[3], replace(old[3], status=Status.FIRED), ttl_s=60)
    fired = await store.get(old[3].trigger_id)
    assert fired is not None
    ks, hour = KEYSPACE, at // 3_600_000
    for t in old:  # as an earlier release left them: listed by fire month only
        store._session.execute(
            f"INSERT INTO {ks}.{schema.TABLE_BY_CALLER} ({schema.COL_CALLER}, "
            f"{schema.COL_FIRE_MONTH}, {schema.COL_FIRE_AT_MS}, {schema.COL_TRIGGER_ID}) "
            "VALUES (%s, %s, %s, %s) USING TTL 3600", [caller, 203108, t.fire_at_ms, t.trigger_id])
        for table, col, key in ((schema.TABLE_OPEN, schema.COL_FIRE_HOUR, hour),
                                (schema.TABLE_BY_CREATED, schema.COL_CREATED_HOUR,
                                 t.created_at_ms // 3_600_000)):
            store._session.execute(
                f"DELETE FROM {ks}.{table} WHERE {schema.COL_CALLER} = %s AND {col} = %s "
                f"AND {schema.COL_PART} = %s", [caller, key, t.shard % schema.OPEN_PARTS])
    store._session.execute(
        f"INSERT INTO {ks}.{schema.TABLE_CALLER_MONTHS} ({schema.COL_CALLER}, "
        f"{schema.COL_FIRE_MONTH}) VALUES (%s, %s) USING TTL 3600", [caller, 203108])
    start, last = (203108, -(2**63), ""), 203108
    page = await store.list_by_caller(caller, start=start, last_month=last, limit=10,
                                      status=Status.PENDING)
    assert page.triggers == []
    everything = await store.list_by_caller(caller, start=NEWEST, last_month=last, limit=10,
                                            status=None)
    assert everything.triggers == []
    assert caller in await store.triggers.listed_callers()
    settings = Settings.from_env({"TRIGGER_CASSANDRA_KEYSPACE": KEYSPACE})
    assert await backfill_listings(store.triggers, settings, utc_ms(2031, 7, 1), [caller]) == 3
    page = await store.list_by_caller(caller, start=start, last_month=last, limit=10,
                                      status=Status.PENDING)
    assert [t.trigger_id for t in page.triggers] == [t.trigger_id for t in old[:3]]
    assert open_entries(store, caller, hour) == sorted(t.trigger_id for t in old[:3])
    everything = await store.list_by_caller(caller, start=NEWEST, last_month=last, limit=10,
                                            status=None)
    assert everything.triggers == sorted([*old[:3], fired],
                                         key=lambda t: (t.created_at_ms, t.trigger_id),
                                         reverse=True)
