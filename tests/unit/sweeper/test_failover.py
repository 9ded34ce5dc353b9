"""A killed sweeper's shards move to a live one within about 1.3 lease TTLs, and the
successor sweeps them at once from the dead owner's cursor: no waiting for its next sweep."""

from __future__ import annotations

from tests.unit.sweeper.test_sweeper import AHEAD_MS, ALL, START_MS, make_rig, put
from trigger_service.config.settings import Settings


async def test_the_default_lease_ttl_is_at_most_two_seconds() -> None:
    assert Settings().sweep.lease_ttl_s <= 2


async def test_a_successor_takes_a_dead_owners_shards_and_sweeps_them_at_once() -> None:
    rig = make_rig(lease_ttl_s=2.0)
    # Registered long ago, due in a minute, one per shard.
    due = {shard: await put(rig.store, START_MS + 60_000, shard=shard) for shard in ALL}
    a, b = rig.sweeper("sw-a"), rig.sweeper("sw-b")
    for _ in range(3):
        for s in (a, b):
            await s.maintain_leases()
    assert a.owned | b.owned == ALL and not a.owned & b.owned
    assert (a.pending, b.pending) == (len(a.owned), len(b.owned))
    shard = min(a.owned)
    t = due[shard]
    # a dies now (SIGKILL: nothing released or saved); only its wheel held its triggers.
    taken_at_ms = None
    for step in range(1, 20):  # b's lease loop every TTL/3
        rig.clock.advance_ms(667)
        await b.maintain_leases()
        if shard in b.owned:
            taken_at_ms = step * 667
            break
    assert taken_at_ms is not None and taken_at_ms <= 2_000 + 2 * 667
    assert b.owned == ALL
    assert b.pending == len(ALL)  # swept at once from a's cursor, not at b's next sweep
    rig.clock.set_ms(t.fire_at_ms - AHEAD_MS)
    await b.run_once()
    assert sorted(rig.sent_ids()) == sorted(x.trigger_id for x in due.values())
