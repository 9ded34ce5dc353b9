"""Sweeper on the in-memory fakes and a ManualClock: leases, scans, promotion, cursors."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass, replace

import pytest

from sweeper.sweeper import Sweeper
from trigger_service.adapters.memory.store import MemoryLease, MemoryQueue, MemoryStore
from trigger_service.config.settings import Settings
from trigger_service.core.errors import QueueError, StoreError
from trigger_service.core.model import Route, Status, Trigger, new_trigger_id, shard_of
from trigger_service.core.ports.values import OutgoingMessage
from trigger_service.core.time.clock import ManualClock
from trigger_service.core.time.timing import sqs_delay_s
from trigger_service.platform.metrics import InMemoryMetrics

START_MS = 1_700_000_000_000
SHARDS = 8
GROUP = Settings().sweep.group
HORIZON_MS = Settings().sweep.horizon_s * 1000
AHEAD_MS = Settings().sweep.promote_ahead_s * 1000
LOOKBACK_MS = Settings().sweep.lookback_s * 1000
LEAD_S = Settings().sqs.enqueue_lead_s
ALL = set(range(SHARDS))


@dataclass
class Rig:
    settings: Settings
    clock: ManualClock
    store: MemoryStore
    queue: MemoryQueue
    lease: MemoryLease
    metrics: InMemoryMetrics

    def sweeper(self, owner: str = "sw-a") -> Sweeper:
        return Sweeper(self.settings, self.store, self.queue, self.lease, self.clock,
                       self.metrics, owner=owner)

    def sent_ids(self) -> list[str]:
        return [m.trigger_id for m in self.queue.sent]

    def count(self, name: str) -> int:
        return self.metrics.snapshot().get(name, 0)


def make_rig(*, lease_ttl_s: float, enqueue_lead_s: int = LEAD_S) -> Rig:
    base = Settings()
    settings = replace(base, shards=SHARDS,
                       sweep=replace(base.sweep, lease_ttl_s=lease_ttl_s),
                       sqs=replace(base.sqs, enqueue_lead_s=enqueue_lead_s))
    clock = ManualClock(START_MS)
    return Rig(settings, clock, MemoryStore(), MemoryQueue(clock),
               MemoryLease(clock, int(lease_ttl_s * 1000)), InMemoryMetrics())


@pytest.fixture
def rig() -> Rig:
    """Leases that outlive every test's clock moves unless a test says otherwise (the lease
    loop is not running in run_once-driven tests)."""
    return make_rig(lease_ttl_s=600.0)


def id_in_shard(shard: int, at_ms: int) -> str:
    while True:
        trigger_id = new_trigger_id(at_ms)
        if shard_of(trigger_id, SHARDS) == shard:
            return trigger_id


async def put(store: MemoryStore, fire_at_ms: int, *, shard: int = 0,
              route: Route = Route.SWEEP) -> Trigger:
    """A PENDING trigger registered long before its fire time (as the API would)."""
    created_ms = fire_at_ms - 1_000_000
    t = Trigger(id_in_shard(shard, created_ms), "caller-a", "https://example.test/hook", "{}",
                fire_at_ms, created_ms, shard, route)
    await store.create(t, 3600)
    return t


async def set_status(store: MemoryStore, t: Trigger, status: Status) -> None:
    assert await store.compare_and_set(t, replace(t, status=status))


async def settle(rounds: int = 20) -> None:
    for _ in range(rounds):
        await asyncio.sleep(0)


def assert_disjoint_and_leased(lease: MemoryLease, sweepers: Iterable[Sweeper]) -> None:
    seen: set[int] = set()
    for sw in sweepers:
        assert not seen & sw.owned, "two sweepers own the same shard"
        seen |= sw.owned
        for shard in sw.owned:
            assert lease.holders[shard][0] == sw.owner


async def rounds(rig: Rig, sweepers: list[Sweeper], n: int) -> None:
    for _ in range(n):
        for sw in sweepers:
            await sw.maintain_leases()
            assert_disjoint_and_leased(rig.lease, sweepers)
        rig.clock.advance_ms(1000)


# --- leases -------------------------------------------------------------------------------
async def test_a_lone_sweeper_takes_every_shard_and_joins_the_members(rig: Rig) -> None:
    sw = rig.sweeper("a")
    await sw.maintain_leases()
    stranded = {s for s, (owner, _, _) in rig.lease.holders.items() if owner == "a"} - sw.owned
    assert stranded == set()
    assert sw.owned == ALL
    assert {s: h[0] for s, h in rig.lease.holders.items()} == dict.fromkeys(ALL, "a")
    assert rig.lease.members == {"a": START_MS}
    assert rig.count("shard_acquisitions_total") == SHARDS


async def test_two_sweepers_split_the_shards_evenly_without_overlap(rig: Rig) -> None:
    a, b = rig.sweeper("a"), rig.sweeper("b")
    await rounds(rig, [a, b], 3)
    assert len(a.owned) == len(b.owned) == SHARDS // 2
    assert a.owned | b.owned == ALL
    before = rig.count("shard_acquisitions_total")
    await rounds(rig, [a, b], 3)  # balanced: no more churn
    assert rig.count("shard_acquisitions_total") == before == SHARDS + SHARDS // 2


async def test_a_third_sweeper_joining_gets_a_share_over_rounds(rig: Rig) -> None:
    a, b, c = rig.sweeper("a"), rig.sweeper("b"), rig.sweeper("c")
    await rounds(rig, [a, b], 3)
    await rounds(rig, [a, b, c], 3)
    assert sorted(len(sw.owned) for sw in (a, b, c)) == [2, 3, 3]
    assert a.owned | b.owned | c.owned == ALL


async def test_a_dead_sweepers_shards_are_taken_within_a_lease_ttl_of_its_lease_expiry() -> None:
    rig = make_rig(lease_ttl_s=10.0)
    a, b = rig.sweeper("a"), rig.sweeper("b")
    await rounds(rig, [a, b], 3)
    await b.maintain_leases()  # b's last heartbeat and renewal, then it dies
    died_ms = rig.clock.now_ms()
    orphaned = set(b.owned)
    ttl_ms = int(rig.settings.sweep.lease_ttl_s * 1000)
    taken_ms: int | None = None
    while taken_ms is None and rig.clock.now_ms() < died_ms + 5 * ttl_ms:
        rig.clock.advance_ms(1000)
        await a.maintain_leases()
        if orphaned <= a.owned:
            taken_ms = rig.clock.now_ms()
    assert taken_ms is not None
    assert died_ms + ttl_ms <= taken_ms <= died_ms + ttl_ms + ttl_ms
    assert a.owned == ALL
    assert "b" not in rig.lease.members


async def test_a_lease_taken_by_another_owner_is_forgotten_and_its_timers_cancelled(
    rig: Rig,
) -> None:
    sw = rig.sweeper("a")
    t = await put(rig.store, START_MS + 100_000, shard=3)
    await sw.run_once()
    assert sw.pending == 1
    fence = rig.lease.fences[3] = rig.lease.fences[3] + 1
    rig.lease.holders[3] = ("intruder", fence, START_MS + 3_600_000)
    await sw.maintain_leases()
    assert sw.owned == ALL - {3}
    assert sw.pending == 0
    rig.clock.set_ms(t.fire_at_ms)
    await sw.run_once()
    assert rig.queue.sent == []
    assert sw.owned == ALL - {3}


async def test_giving_a_shard_up_saves_its_cursor_for_the_next_owner(rig: Rig) -> None:
    a, b = rig.sweeper("a"), rig.sweeper("b")
    await a.maintain_leases()
    await a.sweep()  # every window is empty: promoted up to now + horizon, not yet saved
    assert rig.store.cursors == {}
    await b.maintain_leases()
    await a.maintain_leases()  # two members now: a gives half back
    given_up = ALL - a.owned
    assert len(given_up) == SHARDS // 2
    assert rig.store.cursors == {(GROUP, s): START_MS + HORIZON_MS for s in given_up}
    assert all(s not in rig.lease.holders for s in given_up)


async def test_a_rebalanced_trigger_is_promoted_once_by_the_new_owner(rig: Rig) -> None:
    a, b = rig.sweeper("a"), rig.sweeper("b")
    # a gives back its highest shards when b joins; put the trigger in one of them
    t = await put(rig.store, START_MS + 100_000, shard=SHARDS - 1)
    await a.run_once()
    assert a.pending == 1
    rig.clock.advance_ms(1000)
    await b.maintain_leases()
    await a.maintain_leases()
    assert SHARDS - 1 not in a.owned
    assert a.pending == 0
    await b.run_once()
    assert SHARDS - 1 in b.owned and b.pending == 1
    rig.clock.set_ms(t.fire_at_ms - AHEAD_MS)
    await a.run_once()
    await b.run_once()
    assert rig.sent_ids() == [t.trigger_id]


async def test_lease_acquired_then_cursor_load_failure_does_not_strand_the_shard(
    rig: Rig,
) -> None:
    sw = rig.sweeper("a")
    rig.store.failures["load_cursors"] = StoreError("cassandra down")
    with pytest.raises(StoreError):
        await sw.maintain_leases()
    del rig.store.failures["load_cursors"]
    rig.clock.advance_ms(1000)
    await sw.maintain_leases()
    stranded = {s for s, (owner, _, _) in rig.lease.holders.items() if owner == "a"} - sw.owned
    assert stranded == set()
    assert sw.owned == ALL


# --- scanning -----------------------------------------------------------------------------
async def test_sweep_reads_sweep_entries_up_to_now_plus_horizon_and_ignores_direct(
    rig: Rig,
) -> None:
    sw = rig.sweeper()
    edge = await put(rig.store, START_MS + HORIZON_MS, shard=1)
    beyond = await put(rig.store, START_MS + HORIZON_MS + 1, shard=1)
    await put(rig.store, START_MS + 60_000, shard=2, route=Route.DIRECT)
    await sw.maintain_leases()  # taking the shards sweeps them at once
    assert sw.pending == 1
    assert await sw.sweep() == 0  # nothing read twice
    rig.clock.advance_ms(1)
    assert await sw.sweep() == 1
    rig.clock.set_ms(beyond.fire_at_ms)
    await sw.run_once()
    assert sorted(rig.sent_ids()) == sorted([edge.trigger_id, beyond.trigger_id])


async def test_a_shard_without_a_cursor_is_swept_from_now_minus_lookback(rig: Rig) -> None:
    sw = rig.sweeper()
    await put(rig.store, START_MS - LOOKBACK_MS - 1000, shard=4)
    recent = await put(rig.store, START_MS - LOOKBACK_MS + 1000, shard=4)
    await sw.run_once()
    assert rig.queue.sent == [OutgoingMessage(recent.trigger_id, recent.fire_at_ms, 0)]


async def test_a_shard_with_a_saved_cursor_resumes_from_it(rig: Rig) -> None:
    rig.store.cursors[(GROUP, 2)] = START_MS - 50_000
    sw = rig.sweeper()
    await put(rig.store, START_MS - 60_000, shard=2)  # promoted by an earlier owner
    after = await put(rig.store, START_MS - 40_000, shard=2)
    other = await put(rig.store, START_MS - 60_000, shard=3)  # shard 3: no cursor
    await sw.run_once()
    assert sorted(rig.sent_ids()) == sorted([after.trigger_id, other.trigger_id])


# --- promotion ----------------------------------------------------------------------------
@pytest.mark.parametrize("lead_s", [0, 3, 45])
async def test_promotion_happens_at_fire_at_minus_promote_ahead_with_the_sqs_delay(
    lead_s: int,
) -> None:
    rig = make_rig(lease_ttl_s=600.0, enqueue_lead_s=lead_s)
    sw = rig.sweeper()
    t = await put(rig.store, START_MS + 100_000, shard=6)
    await sw.run_once()
    rig.clock.set_ms(t.fire_at_ms - AHEAD_MS - 1)
    await sw.run_once()
    assert rig.queue.sent == []
    rig.clock.advance_ms(1)
    await sw.run_once()
    delay_s = sqs_delay_s(t.fire_at_ms, rig.clock.now_ms(), lead_s)
    assert delay_s == max(0, AHEAD_MS // 1000 - lead_s)
    assert rig.queue.sent == [OutgoingMessage(t.trigger_id, t.fire_at_ms, delay_s)]
    assert rig.count("promoted_total") == 1
    assert sw.pending == 0


async def test_cancelled_fired_and_vanished_triggers_are_skipped_and_never_sent(
    rig: Rig,
) -> None:
    sw = rig.sweeper()
    fire_ms = START_MS + 100_000
    live, cancelled, fired, gone = [await put(rig.store, fire_ms, shard=5) for _ in range(4)]
    await sw.run_once()
    assert sw.pending == 4
    await set_status(rig.store, cancelled, Status.CANCELLED)
    await set_status(rig.store, fired, Status.FIRED)
    del rig.store.triggers[gone.trigger_id]
    rig.clock.set_ms(fire_ms - AHEAD_MS)
    await sw.run_once()
    assert rig.sent_ids() == [live.trigger_id]
    assert rig.count("promoted_total") == 1
    assert rig.count("promotion_skipped_total") == 3
    # every trigger of the window was dealt with: the cursor moves past it
    assert rig.store.cursors[(GROUP, 5)] == rig.clock.now_ms() + HORIZON_MS


async def test_a_big_batch_is_read_in_chunks_and_each_trigger_sent_once(rig: Rig) -> None:
    sw = rig.sweeper()
    fire_ms = START_MS + 100_000
    ids = {(await put(rig.store, fire_ms, shard=0)).trigger_id for _ in range(150)}
    await sw.run_once()
    rig.clock.set_ms(fire_ms - AHEAD_MS)
    await sw.run_once()
    assert sorted(rig.sent_ids()) == sorted(ids)
    assert rig.store.calls["get_many"] >= 2
    assert rig.count("promoted_total") == 150


# --- cursors ------------------------------------------------------------------------------
async def test_the_cursor_waits_for_an_unpromoted_window_then_moves_past_it(rig: Rig) -> None:
    sw = rig.sweeper()
    t = await put(rig.store, START_MS + 100_000, shard=5)
    await sw.run_once()
    others = {s: START_MS + HORIZON_MS for s in ALL - {5}}
    assert {s: ms for (_, s), ms in rig.store.cursors.items()} == others
    rig.clock.advance_ms(10_000)
    await sw.run_once()  # an empty window behind the outstanding one does not help
    assert (GROUP, 5) not in rig.store.cursors
    assert rig.store.cursors[(GROUP, 0)] == START_MS + 10_000 + HORIZON_MS
    rig.clock.set_ms(t.fire_at_ms - AHEAD_MS)
    await sw.run_once()
    assert rig.store.cursors[(GROUP, 5)] == t.fire_at_ms - AHEAD_MS + HORIZON_MS


async def test_cursors_are_written_only_when_they_moved(rig: Rig) -> None:
    sw = rig.sweeper()
    await sw.run_once()
    assert rig.store.calls["save_cursor"] == SHARDS
    await sw.run_once()
    assert rig.store.calls["save_cursor"] == SHARDS
    rig.clock.advance_ms(5_000)
    await sw.run_once()
    assert rig.store.calls["save_cursor"] == 2 * SHARDS


async def walk(rig: Rig, sw: Sweeper, to_ms: int, step_ms: int = 5_000) -> None:
    """What the sweeper's loops do, on the ManualClock: a round every ``step_ms``."""
    while rig.clock.now_ms() < to_ms:
        rig.clock.advance_ms(min(step_ms, to_ms - rig.clock.now_ms()))
        await sw.run_once()


async def test_after_a_crash_the_next_owner_resumes_from_the_saved_cursor() -> None:
    rig = make_rig(lease_ttl_s=10.0)
    a = rig.sweeper("a")
    await a.run_once()  # nothing due: cursors saved at START + horizon
    first = await put(rig.store, START_MS + 130_000, shard=2)
    second = await put(rig.store, START_MS + 140_000, shard=2)
    await walk(rig, a, first.fire_at_ms - AHEAD_MS)  # reads both, promotes `first`
    assert rig.sent_ids() == [first.trigger_id]
    assert a.pending == 1
    assert first.fire_at_ms <= rig.store.cursors[(GROUP, 2)] < second.fire_at_ms
    del a  # crash: no shutdown, no release, the wheel is gone
    rig.clock.advance_ms(2 * int(rig.settings.sweep.lease_ttl_s * 1000))
    b = rig.sweeper("b")
    await b.run_once()
    assert b.owned == ALL
    assert rig.sent_ids() == [first.trigger_id, second.trigger_id]
    assert rig.queue.sent[1] == OutgoingMessage(
        second.trigger_id, second.fire_at_ms,
        sqs_delay_s(second.fire_at_ms, rig.clock.now_ms(), LEAD_S))


# --- failures -----------------------------------------------------------------------------
@pytest.mark.parametrize("failing", ["queue.send", "store.get_many"])
async def test_a_failed_promotion_is_retried_later_and_nothing_is_lost(
    rig: Rig, failing: str,
) -> None:
    fake, method = failing.split(".")
    failures = rig.queue.failures if fake == "queue" else rig.store.failures
    error = QueueError("sqs down") if fake == "queue" else StoreError("cassandra down")
    sw = rig.sweeper()
    t = await put(rig.store, START_MS + 100_000, shard=1)
    await sw.run_once()
    rig.clock.set_ms(t.fire_at_ms - AHEAD_MS)
    failures[method] = error
    await sw.run_once()
    assert rig.queue.sent == []
    assert rig.count("promotion_retries_total") == 1
    assert sw.pending == 1
    assert (GROUP, 1) not in rig.store.cursors  # the window is not done
    del failures[method]
    rig.clock.advance_ms(999)
    await sw.run_once()
    assert rig.queue.sent == []  # the retry waits its turn
    rig.clock.advance_ms(1)
    await sw.run_once()
    assert rig.queue.sent == [OutgoingMessage(
        t.trigger_id, t.fire_at_ms, sqs_delay_s(t.fire_at_ms, rig.clock.now_ms(), LEAD_S))]
    assert rig.store.cursors[(GROUP, 1)] == rig.clock.now_ms() + HORIZON_MS
    assert sw.pending == 0


async def test_a_store_error_while_scanning_propagates_and_the_next_sweep_rereads(
    rig: Rig,
) -> None:
    sw = rig.sweeper()
    await sw.maintain_leases()
    rig.clock.advance_ms(1)
    t = await put(rig.store, START_MS + HORIZON_MS + 1, shard=3)
    rig.store.failures["bucket_entries"] = StoreError("cassandra down")
    with pytest.raises(StoreError):
        await sw.sweep()
    assert sw.pending == 0
    del rig.store.failures["bucket_entries"]
    rig.clock.set_ms(t.fire_at_ms - AHEAD_MS)
    await sw.run_once()
    assert rig.sent_ids() == [t.trigger_id]


# --- the run loop ---------------------------------------------------------------------------
async def start(sw: Sweeper) -> tuple[asyncio.Event, asyncio.Task[None]]:
    stop = asyncio.Event()
    task = asyncio.create_task(sw.run(stop))
    await settle()
    return stop, task


async def test_run_promotes_on_the_clock_and_stop_saves_releases_and_leaves(rig: Rig) -> None:
    a = rig.sweeper("a")
    t = await put(rig.store, START_MS + 100_000, shard=1)
    stop, task = await start(a)
    assert a.owned == ALL and a.pending == 1
    rig.clock.set_ms(t.fire_at_ms - AHEAD_MS - 1)
    await settle()
    assert rig.queue.sent == []
    rig.clock.advance_ms(1)
    await settle()
    assert rig.sent_ids() == [t.trigger_id]
    assert (GROUP, 1) not in rig.store.cursors  # the next periodic save is 30 s away
    stop.set()
    await task
    assert rig.store.cursors[(GROUP, 1)] == START_MS + HORIZON_MS
    assert rig.lease.holders == {}
    assert rig.lease.members == {}
    assert a.owned == set()
    b = rig.sweeper("b")  # takes over at once and resumes past the promoted trigger
    await b.run_once()
    assert b.owned == ALL
    assert rig.sent_ids() == [t.trigger_id]


async def test_fencing_nothing_is_sent_once_another_owner_holds_the_lease(rig: Rig) -> None:
    a = rig.sweeper("a")
    t = await put(rig.store, START_MS + 100_000, shard=6)
    stop, task = await start(a)
    assert a.pending == 1
    # the lease changes hands between renewals (a stalled, b took the shard over)
    fence = rig.lease.fences[6] = rig.lease.fences[6] + 1
    rig.lease.holders[6] = ("b", fence, START_MS + 3_600_000)
    rig.clock.set_ms(t.fire_at_ms - AHEAD_MS)
    await settle()
    assert rig.queue.sent == []
    assert 6 not in a.owned
    # it was the check right before the send that caught it, not a renewal
    assert rig.lease.calls.get("renew") is None and rig.lease.calls["held"] == 1
    stop.set()
    await task
    assert rig.lease.holders[6][0] == "b"  # a did not release b's lease
    assert rig.lease.holders.keys() == {6}


async def test_fencing_nothing_is_sent_after_our_lease_expired_unrenewed() -> None:
    rig = make_rig(lease_ttl_s=10.0)
    a = rig.sweeper("a")
    t = await put(rig.store, START_MS + 100_000, shard=6)
    stop, task = await start(a)
    assert a.pending == 1
    rig.clock.set_ms(t.fire_at_ms - AHEAD_MS)  # far past the TTL, the lease loop asleep
    await settle()
    assert rig.queue.sent == []
    assert 6 not in a.owned
    stop.set()
    await task
