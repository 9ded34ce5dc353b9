"""One row per keyed trigger id (``adapters.homes``), on the fake and on Cassandra: the
requests of one key with different fire times (a ``delaySeconds`` retry), a row write that
lands after its timeout, Redis gone so nothing orders them. Whatever the interleaving, the
id has one live row: the one ``get`` answers, the only one ``get_at`` answers at any home,
the one a cancel governs.

The interleavings are built from the store's own primitives (``store.keyed_rows``), with a
row write delayed and landed later, as a coordinator that timed out may still apply it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field, replace

from tests.contract.support import INDEX_TTL_S, Store, make_trigger, unique, utc_ms
from trigger_service.adapters.homes import Homes
from trigger_service.core.model import Status, Trigger, keyed_trigger_id, shard_of
from trigger_service.core.ports.homes import KeyedRows, Pointer

SHARDS = 64


def keyed(caller: str, key: str, fire_at_ms: int, created_at_ms: int,
          request_hash: str = "hash-1") -> Trigger:
    tid = keyed_trigger_id(caller, key)
    t = make_trigger(caller, fire_at_ms, idem_key=key)
    return replace(t, trigger_id=tid, shard=shard_of(tid, SHARDS), created_at_ms=created_at_ms,
                   request_hash=request_hash, registered_fire_at_ms=fire_at_ms)


@dataclass
class DelayedRows:
    """``KeyedRows`` whose row writes are delayed (the caller is told they timed out)
    until ``land``; everything else goes to the store's."""

    rows: KeyedRows
    delayed: list[Trigger] = field(default_factory=list)
    delaying: bool = True

    async def write_creation_index(self, t: Trigger, index_ttl_s: int) -> None:
        await self.rows.write_creation_index(t, index_ttl_s)

    async def pointer(self, trigger_id: str) -> Pointer | None:
        return await self.rows.pointer(trigger_id)

    async def row_at(self, trigger_id: str, home_at_ms: int, shard: int) -> Trigger | None:
        return await self.rows.row_at(trigger_id, home_at_ms, shard)

    async def write_row(self, t: Trigger) -> None:
        if self.delaying:
            self.delayed.append(t)
            return
        await self.rows.write_row(t)

    async def elect(self, trigger_id: str, home_at_ms: int, *, replacing: int | None) -> int:
        return await self.rows.elect(trigger_id, home_at_ms, replacing=replacing)

    async def seal(self, trigger_id: str, home_at_ms: int, shard: int) -> bool:
        return await self.rows.seal(trigger_id, home_at_ms, shard)

    async def drop_row(self, trigger_id: str, home_at_ms: int, shard: int) -> None:
        await self.rows.drop_row(trigger_id, home_at_ms, shard)

    async def land(self) -> None:
        for t in self.delayed:
            await self.rows.write_row(t)
        self.delayed.clear()


async def live_rows(store: Store, t: Trigger, homes: list[int]) -> list[Trigger]:
    """What ``get_at`` answers at each of ``homes``: the rows a delivery could claim."""
    found = [await store.get_at(t.trigger_id, h, t.shard) for h in homes]
    return [r for r in found if r is not None]


def times() -> tuple[int, int]:
    """A fire time next year (distinct per test) and a creation time now."""
    base = utc_ms(2027, 3, 1) + (hash(unique("t")) % 10_000_000) * 1000
    return base, make_trigger("c", base).created_at_ms


async def test_a_lone_creation_writes_one_row_by_plain_writes(store: Store) -> None:
    fire, now = times()
    t = keyed(unique("caller-"), "k", fire, now)
    done = await store.create_keyed(t, INDEX_TTL_S)
    assert done.created and done.trigger == t.with_home()
    assert await store.get(t.trigger_id) == t.with_home()
    again = await store.create_keyed(t, INDEX_TTL_S)  # a repeat of the same request
    assert again.created and await store.get(t.trigger_id) == t.with_home()
    p = await store.keyed_rows.pointer(t.trigger_id)
    assert p is not None and p.live_home is None and p.homes == {fire}  # no election


async def test_pointers_read_together_are_each_the_pointer_read_alone(store: Store) -> None:
    """Reads asked for at once (a batch create's, a received herd's) may share a request:
    each reader still gets its own id's pointer, none for an id never created, and the same
    for an id asked twice."""
    fire, now = times()
    caller = unique("caller-")
    made = [keyed(caller, f"k{i}", fire + i, now) for i in range(5)]
    for t in made:
        await store.create_keyed(t, INDEX_TTL_S)
    ids = [t.trigger_id for t in made] + [keyed(caller, "never", fire, now).trigger_id,
                                          made[0].trigger_id]
    together = await asyncio.gather(*(store.keyed_rows.pointer(i) for i in ids))
    alone = [await store.keyed_rows.pointer(i) for i in ids]
    assert together == alone
    assert [p.homes if p else None for p in together] == [
        {fire + i} for i in range(5)] + [None, {fire}]


async def test_rows_read_together_are_each_the_row_at_its_home(store: Store) -> None:
    """Row reads asked for at once may share a request (one partition's together): each
    reader gets the row at the home it asked for, not another home's row of its id in the
    same partition (one that lost an election), and none where no row is."""
    fire, now = times()
    base = fire - fire % 1000  # three homes in one second: one partition per shard group
    caller = unique("caller-")
    first, second = (keyed(caller, "k", base + i, now).with_home() for i in (0, 1))
    other = keyed(caller, "other", base + 2, now).with_home()
    for t in (first, second, other):
        await store.keyed_rows.write_row(t)
    asks = [(first.trigger_id, base, first.shard), (second.trigger_id, base + 1, first.shard),
            (other.trigger_id, base + 2, other.shard), (first.trigger_id, base + 2, first.shard)]
    together = await asyncio.gather(*(store.keyed_rows.row_at(*a) for a in asks))
    alone = [await store.keyed_rows.row_at(*a) for a in asks]
    assert together == alone == [first, second, other, None]


async def test_a_retry_after_a_timed_out_row_write_that_lands_later_makes_one_row(
        store: Store) -> None:
    """The race this module is about: A's row write times out and lands after B (the retry, a
    later fire time) was answered; the cancel through the pointer governs every home."""
    fire, now = times()
    caller = unique("caller-")
    a = keyed(caller, "k", fire, now)
    b = keyed(caller, "k", fire + 3_000, now + 3_000)
    delayed = DelayedRows(store.keyed_rows)
    first = await Homes(delayed).create(a, INDEX_TTL_S)  # its row write "timed out"
    assert first.created and delayed.delayed == [a.with_home()]
    second = await store.create_keyed(b, INDEX_TTL_S)
    # B adopted A's home and fire time: the retry answers the first request's time.
    assert second.created and second.trigger.fire_at_ms == fire
    await delayed.land()
    row = await store.get(a.trigger_id)
    assert row is not None and row.fire_at_ms == fire
    assert await store.compare_and_set(row, replace(row, status=Status.CANCELLED))
    assert [r.status for r in await live_rows(store, a, [fire, fire + 3_000])] == [
        Status.CANCELLED]


async def test_two_creations_that_both_read_each_other_agree_on_one_home(
        store: Store) -> None:
    """Both index batches land before either reads back: both see two homes, Paxos elects
    the earliest, and both write that one row (with its fire time)."""
    fire, now = times()
    caller = unique("caller-")
    a = keyed(caller, "k", fire + 5_000, now + 5)
    b = keyed(caller, "k", fire, now)
    await store.keyed_rows.write_creation_index(a.with_home(), INDEX_TTL_S)
    done = await asyncio.gather(store.create_keyed(b, INDEX_TTL_S),
                                store.create_keyed(a, INDEX_TTL_S))
    assert {d.trigger.fire_at_ms for d in done} == {fire}
    assert [r.fire_at_ms for r in await live_rows(store, a, [fire, fire + 5_000])] == [fire]


async def test_a_lone_row_that_lands_after_another_home_won_is_never_answered(
        store: Store) -> None:
    """A read its home alone and its row write is slow; B, later, reads both homes, finds
    no row, and Paxos elects B's (earlier) home. A's row then lands: no reader answers it,
    and the first that meets it at its home drops it."""
    fire, now = times()
    caller = unique("caller-")
    a = keyed(caller, "k", fire + 5_000, now)
    b = keyed(caller, "k", fire, now + 5)
    delayed = DelayedRows(store.keyed_rows)
    assert (await Homes(delayed).create(a, INDEX_TTL_S)).created  # alone; its row delayed
    done = await store.create_keyed(b, INDEX_TTL_S)
    assert done.created and done.trigger.fire_at_ms == fire
    await delayed.land()
    assert await store.get_at(a.trigger_id, fire + 5_000, a.shard) is None
    got = await store.get(a.trigger_id)
    assert got is not None and got.fire_at_ms == fire
    assert await store.keyed_rows.row_at(a.trigger_id, fire + 5_000, a.shard) is None  # dropped


async def test_an_elected_home_whose_creation_stopped_gives_way_to_the_row_that_exists(
        store: Store) -> None:
    """B was elected and stopped before writing; A's lone row landed. A reader seals B's
    home (B's late write stays invisible) and elects A's: one row, the one answered."""
    fire, now = times()
    caller = unique("caller-")
    a = keyed(caller, "k", fire + 5_000, now)
    b = keyed(caller, "k", fire, now + 5)
    delayed_a, delayed_b = DelayedRows(store.keyed_rows), DelayedRows(store.keyed_rows)
    assert (await Homes(delayed_a).create(a, INDEX_TTL_S)).created  # alone; its row delayed
    assert (await Homes(delayed_b).create(b, INDEX_TTL_S)).created  # elected; row delayed
    await delayed_a.land()
    got = await store.get_at(a.trigger_id, fire + 5_000, a.shard)
    assert got is not None and got.fire_at_ms == fire + 5_000
    await delayed_b.land()  # B's write arrives after all: under the seal
    assert await store.get_at(a.trigger_id, fire, a.shard) is None
    assert await store.get(a.trigger_id) == got
    p = await store.keyed_rows.pointer(a.trigger_id)
    assert p is not None and p.live_home == fire + 5_000


async def test_two_bodies_without_redis_keep_one_row_whole(store: Store) -> None:
    """Two bodies raced with one key: each writes its own row only if it read its home
    alone; the other finds that row (its hash differs: the caller answers 422)."""
    fire, now = times()
    caller = unique("caller-")
    a = keyed(caller, "k", fire, now, request_hash="hash-a")
    b = replace(keyed(caller, "k", fire + 1, now + 1, request_hash="hash-b"),
                payload_json='{"other": true}')
    first = await store.create_keyed(a, INDEX_TTL_S)
    second = await store.create_keyed(b, INDEX_TTL_S)
    assert first.created and not second.created and second.trigger == a.with_home()
    assert await store.get(a.trigger_id) == a.with_home()
