"""Priority within one caller: its high-priority triggers go before its normal ones before its
low ones at every place they wait (the queue's lanes, the shares of the dispatcher, the claim
slots and lead, the bulkhead), while fair shares between callers stay as they were."""

from __future__ import annotations

import asyncio
import json

import pytest

from dispatcher.bulkheads import HIGH_FIRST_MAX_MS, Bulkheads
from dispatcher.claim_gate import ClaimGate
from dispatcher.fair_share import FairSlots
from dispatcher.ranked import RankedSlots
from tests.unit.dispatcher.fakes import (
    CALLER,
    OTHER_CALLER,
    START_MS,
    Env,
    make_callers,
    settle,
)
from trigger_service.adapters.memory.queue import MemoryQueue
from trigger_service.adapters.sqs_packs import pack_body, pack_members, packs_of
from trigger_service.adapters.sqs_wire import decode_message, encode_body
from trigger_service.core.lanes import Lanes
from trigger_service.core.model import Priority, Trigger
from trigger_service.core.ports.values import OutgoingMessage
from trigger_service.core.time.clock import ManualClock

pytestmark = pytest.mark.timeout(10)

HIGH, NORMAL, LOW = Priority.HIGH.rank, Priority.NORMAL.rank, Priority.LOW.rank


# --- waiting in rank order --------------------------------------------------------------------
async def test_ranked_slots_serve_high_then_normal_then_low_in_arrival_order_within() -> None:
    slots = RankedSlots(1)
    order: list[str] = []
    await slots.acquire(LOW)  # taken: everyone below waits

    async def use(name: str, rank: int) -> None:
        async with slots.held(rank):
            order.append(name)

    tasks = [asyncio.create_task(use(n, r)) for n, r in
             [("low1", LOW), ("normal1", NORMAL), ("high1", HIGH), ("low2", LOW),
              ("high2", HIGH), ("normal2", NORMAL)]]
    await settle()
    assert slots.waiting == 6
    slots.release()
    await asyncio.gather(*tasks)
    assert order == ["high1", "high2", "normal1", "normal2", "low1", "low2"]


async def test_a_cancelled_ranked_waiter_is_skipped_and_no_place_is_lost() -> None:
    slots = RankedSlots(1)
    await slots.acquire(NORMAL)
    gone = asyncio.create_task(slots.acquire(HIGH))
    stays = asyncio.create_task(slots.acquire(LOW))
    await settle()
    gone.cancel()
    with pytest.raises(asyncio.CancelledError):
        await gone
    assert slots.waiting == 1
    slots.release()
    await asyncio.wait_for(stays, 1)  # the low one got the place the high one left
    slots.release()
    await asyncio.wait_for(slots.acquire(NORMAL), 1)  # and the place is free again


async def test_fair_slots_order_a_callers_waiters_by_priority_callers_still_alternate() -> None:
    slots = FairSlots(1)
    order: list[tuple[str, int]] = []
    release = asyncio.Event()

    async def use(caller: str, rank: int) -> None:
        async with slots.slot(caller, rank):
            order.append((caller, rank))
            await release.wait()

    tasks = [asyncio.create_task(use("a", LOW)) for _ in range(4)]
    await settle()
    tasks += [asyncio.create_task(use("a", HIGH)) for _ in range(2)]
    tasks += [asyncio.create_task(use("b", LOW)) for _ in range(2)]
    await settle()
    release.set()
    await asyncio.gather(*tasks)
    # a's high ones jump a's low queue; b's turns are where they were without priority.
    assert order == [("a", LOW), ("b", LOW), ("a", HIGH), ("b", LOW), ("a", HIGH),
                     ("a", LOW), ("a", LOW), ("a", LOW)]


async def test_a_high_claim_is_taken_before_a_low_herd_due_with_it() -> None:
    clock = ManualClock(START_MS)
    gate = ClaimGate(clock, min_lead_ms=1_000, max_lead_ms=30_000, concurrency=1)
    due_ms = START_MS + 60_000
    claimed_at: dict[str, int] = {}
    go = asyncio.Event()

    async def claim(name: str, rank: int) -> None:
        async with gate.turn(due_ms, rank=rank):
            claimed_at[name] = clock.now_ms()
            await go.wait()

    tasks = [asyncio.create_task(claim(f"low{i}", LOW)) for i in range(50)]
    await settle()
    tasks.append(asyncio.create_task(claim("high", HIGH)))
    await settle()
    go.set()
    while clock.now_ms() < due_ms:
        clock.advance_ms(100)
        await settle()
    await asyncio.gather(*tasks)
    # The herd's leads grew with it (each claim ~100 ms apart); the high one, registered
    # last, counts the whole herd below it: claimed first, before the store is busy with
    # the herd's claims.
    lows = sorted(v for k, v in claimed_at.items() if k != "high")
    assert lows[-1] == due_ms - 1_000 and lows[0] < due_ms - 5_000
    assert claimed_at["high"] <= lows[0]


# --- the queue: lanes and bodies ------------------------------------------------------------
def test_a_high_message_goes_to_its_callers_high_lane_others_to_its_lane() -> None:
    lanes = Lanes(8, 2)
    assert lanes.total == 10
    for caller in ("a", "b", "c", "d"):
        assert lanes.of(caller, Priority.NORMAL) == lanes.of(caller, Priority.LOW) < 8
        assert 8 <= lanes.of(caller, Priority.HIGH) < 10
    assert Lanes(8, 0).of("a", Priority.HIGH) == Lanes(8, 0).of("a", Priority.NORMAL)


def test_a_body_carries_its_priority_and_an_earlier_releases_body_reads_normal() -> None:
    body = encode_body("trg_x", 5, 1, 2, "a", Priority.HIGH)
    got = decode_message({"MessageId": "m", "ReceiptHandle": "r", "Body": body})
    assert got.priority is Priority.HIGH and got.caller == "a"
    assert "priority" not in json.loads(encode_body("trg_x", 5, 1, 2, "a"))
    old = json.dumps({"triggerId": "trg_x", "fireAtMs": 5})
    assert decode_message({"MessageId": "m", "ReceiptHandle": "r",
                           "Body": old}).priority is Priority.NORMAL
    odd = json.dumps({"triggerId": "trg_x", "fireAtMs": 5, "priority": "urgent"})
    assert decode_message({"MessageId": "m", "ReceiptHandle": "r",
                           "Body": odd}).priority is Priority.NORMAL


def test_packs_hold_one_priority_each_and_say_it() -> None:
    msgs = [OutgoingMessage(f"t{i}", 5, 30, caller="a", priority=p)
            for i, p in enumerate([Priority.LOW, Priority.HIGH, Priority.LOW, Priority.NORMAL])]
    packs = packs_of(msgs, 50)
    assert sorted(packs) == [[0, 2], [1], [3]]
    members = pack_members(json.loads(pack_body([msgs[0], msgs[2]])))
    assert members is not None and {m.priority for m in members} == {Priority.LOW}
    members = pack_members(json.loads(pack_body([msgs[3]])))
    assert members is not None and members[0].priority is Priority.NORMAL


# --- the dispatcher ---------------------------------------------------------------------------
async def add(env: Env, n: int, priority: Priority, caller: str = CALLER) -> list[Trigger]:
    return [await env.add(10_000, caller=caller, priority=priority) for _ in range(n)]


async def send(env: Env, triggers: list[Trigger]) -> None:
    await env.queue.send_many([OutgoingMessage.of(t, 0) for t in triggers])


async def test_a_callers_high_ones_are_held_beside_its_herd_and_sent_first(env: Env) -> None:
    env.queue = MemoryQueue(env.clock, lanes=2, high_lanes=1)
    env.with_dispatch(max_inflight=4, default_max_concurrency=1)
    herd = await add(env, 8, Priority.LOW)
    normal = await add(env, 1, Priority.NORMAL)
    high = await add(env, 2, Priority.HIGH)
    await send(env, herd[:1] + normal + herd[1:] + high)
    d = env.dispatcher()
    for _ in range(2):
        for lane in range(env.queue.lanes):
            await d.run_once(lane)
            await settle()
    # The herd is over its share (hidden again), the high ones are not: shares of their own.
    assert d.high_shares.in_hand(CALLER) == 2 and d.shares.in_hand(CALLER) < 9
    env.channel.gate = asyncio.Event()  # the first send holds the only place meanwhile
    env.clock.set_ms(START_MS + 10_000)
    for _ in range(10):
        await settle()
    env.channel.gate.set()
    for _ in range(10):
        await settle()
    sent = env.channel.ids()
    # The first in hand took the free place; behind it the high ones, then the normal one,
    # then the low ones.
    assert sent[0] == herd[0].trigger_id
    assert set(sent[1:3]) == {t.trigger_id for t in high}, sent
    assert sent[3] == normal[0].trigger_id and len(sent) == 6


async def test_priority_never_takes_another_callers_share(env: Env) -> None:
    env.with_dispatch(max_inflight=2)
    await send(env, await add(env, 4, Priority.HIGH))
    await send(env, await add(env, 2, Priority.NORMAL, caller=OTHER_CALLER))
    d = env.dispatcher()
    for _ in range(2):
        await d.run_once()
        await settle()
    # One lane here (no high lanes). The high ones have a cap of their own: the caller
    # holds its share of it and no more, and the other caller's share is as it would be
    # without them.
    assert d.high_shares.in_hand(CALLER) == 2 and d.shares.in_hand(CALLER) == 0
    assert d.shares.in_hand(OTHER_CALLER) == 2
    assert sum(n for k, n in env.metrics.snapshot().items()
               if k.startswith("fair_share_deferrals_total")) == 2
    env.clock.set_ms(START_MS + 10_000)
    await d.drain()


async def test_a_callers_others_wait_for_its_high_send_at_most_a_second() -> None:
    clock = ManualClock(START_MS)
    bulkheads = Bulkheads(make_callers(), clock, default_size=100, max_waiting=100)
    high_done = asyncio.Event()
    started: list[str] = []

    async def send(name: str, caller: str, priority: Priority,
                   until: asyncio.Event | None = None) -> None:
        async with bulkheads.held(caller, priority.rank):
            started.append(name)
            if until is not None:
                await until.wait()

    high = asyncio.create_task(send("high", CALLER, Priority.HIGH, high_done))
    await settle()
    low = asyncio.create_task(send("low", CALLER, Priority.LOW))
    other = asyncio.create_task(send("other", OTHER_CALLER, Priority.LOW))
    await settle()
    # Places are free, but the caller's low send waits while its high one is sent; another
    # caller's does not.
    assert started == ["high", "other"]
    high_done.set()
    await asyncio.gather(high, low, other)
    assert started == ["high", "other", "low"]
    # A high send that takes long holds the others back a second, no more.
    slow = asyncio.Event()
    high = asyncio.create_task(send("slow-high", CALLER, Priority.HIGH, slow))
    await settle()
    low = asyncio.create_task(send("late-low", CALLER, Priority.NORMAL))
    await settle()
    clock.advance_ms(HIGH_FIRST_MAX_MS - 1)
    await settle()
    assert "late-low" not in started
    clock.advance_ms(1)
    await settle()
    assert started[-1] == "late-low"
    slow.set()
    await asyncio.gather(high, low)
