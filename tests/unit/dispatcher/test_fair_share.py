"""``dispatcher.fair_share``: shares of the in-flight cap, weighted round robin, fair slots;
and the claim gate serving a late caller's claims between a herd's."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from dispatcher.claim_gate import ClaimGate
from dispatcher.fair_share import DrainPace, FairSlots, RoundRobin, Shares, short_wait_s
from tests.unit.dispatcher.fakes import settle
from trigger_service.core.time.clock import ManualClock

WEIGHTS = {"a": 1, "b": 1, "heavy": 2}


def weight(caller: str) -> int:
    return WEIGHTS.get(caller, 1)


# --- Shares -------------------------------------------------------------------------------
def test_below_the_cap_everyone_is_admitted() -> None:
    s = Shares(4)
    for _ in range(3):
        assert s.admits("a")
        s.enter("a")
    assert s.admits("a") and s.admits("b")


def test_at_the_cap_a_caller_under_its_share_is_admitted_and_one_at_it_is_not() -> None:
    s = Shares(4)
    for _ in range(4):
        s.enter("a")
    assert not s.admits("a")  # alone, its share is the whole cap, which it holds
    assert s.admits("b") and s.share("b") == 2
    s.enter("b")
    assert s.admits("b")
    s.enter("b")
    assert not s.admits("b") and not s.admits("a")  # a holds 4, over its share of 2
    for _ in range(3):
        s.leave(("a", 0))
    assert s.total == 3 and s.admits("a")  # below the cap again


def test_weights_divide_the_cap() -> None:
    s = Shares(9, weight)
    for _ in range(9):
        s.enter("a")
    assert s.share("heavy") == 6 and s.share("a") == 9
    s.enter("heavy")
    assert s.share("a") == 3 and s.share("heavy") == 6


def test_the_cap_is_never_exceeded_more_than_twice() -> None:
    s = Shares(10, weight)
    callers = ["a"] * 30 + ["b", "heavy", "c", "d", "e"] * 30
    for c in callers:
        if s.admits(c):
            s.enter(c)
    assert s.total <= 20 and s.in_hand("a") == 10


def test_leaving_forgets_an_idle_callers_weight() -> None:
    s = Shares(4, weight)
    s.enter("heavy")
    s.leave(("heavy", 0))
    for _ in range(4):
        s.enter("a")
    assert s.share("b") == 2  # heavy no longer counts


def test_uncounted_messages_do_not_fill_the_cap() -> None:
    s = Shares(2)
    for _ in range(3):
        s.enter("a")
    assert not s.admits("a") and s.admits("a", uncounted=2)


# --- RoundRobin ---------------------------------------------------------------------------
def test_round_robin_alternates_between_waiting_callers() -> None:
    rr = RoundRobin()
    for _ in range(5):
        rr.push("a")
    for _ in range(2):
        rr.push("b")
    assert [rr.pop() for _ in range(8)] == ["a", "b", "a", "b", "a", "a", "a", None]


def test_round_robin_gives_a_heavier_caller_turns_in_proportion() -> None:
    rr = RoundRobin(weight)
    for _ in range(30):
        rr.push("a")
        rr.push("heavy")
    first = Counter(rr.pop() for _ in range(30))
    assert first == {"heavy": 20, "a": 10}


def test_a_caller_that_comes_late_is_not_behind_a_herd_nor_ahead_with_credit() -> None:
    rr = RoundRobin()
    for _ in range(100):
        rr.push("a")
    for _ in range(50):
        assert rr.pop() == "a"
    for _ in range(3):
        rr.push("b")
    # b's first turn is at once; it has no credit for the 50 turns it did not want.
    assert [rr.pop() for _ in range(6)] == ["b", "a", "b", "a", "b", "a"]


def test_withdrawn_turns_are_not_given() -> None:
    rr = RoundRobin()
    rr.push("a")
    rr.push("b")
    rr.withdraw("a")
    assert rr.pop() == "b" and rr.pop() is None and len(rr) == 0


# --- FairSlots ----------------------------------------------------------------------------
async def test_fair_slots_serve_a_late_caller_between_a_herds_waiters() -> None:
    slots = FairSlots(1)
    order: list[str] = []
    release = asyncio.Event()

    async def use(caller: str) -> None:
        async with slots.slot(caller):
            order.append(caller)
            await release.wait()

    tasks = [asyncio.create_task(use("a")) for _ in range(5)]
    await settle()
    tasks += [asyncio.create_task(use("b")) for _ in range(2)]
    await settle()
    assert order == ["a"] and slots.waiting == 6
    release.set()
    await asyncio.gather(*tasks)
    assert order == ["a", "b", "a", "b", "a", "a", "a"]


async def test_a_cancelled_waiter_gives_up_its_turn_and_no_slot_is_lost() -> None:
    slots = FairSlots(1)
    await slots.acquire("a")
    waiter = asyncio.create_task(slots.acquire("b"))
    await settle()
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert slots.waiting == 0
    slots.release()
    await asyncio.wait_for(slots.acquire("c"), 1)  # the slot is free again


async def test_a_waiter_cancelled_as_it_is_handed_a_slot_passes_it_on() -> None:
    slots = FairSlots(1)
    await slots.acquire("a")
    first = asyncio.create_task(slots.acquire("b"))
    second = asyncio.create_task(slots.acquire("c"))
    await settle()
    slots.release()  # handed to b ...
    first.cancel()  # ... which is cancelled before it runs
    with pytest.raises(asyncio.CancelledError):
        await first
    await asyncio.wait_for(second, 1)  # c got it


# --- the claim gate -------------------------------------------------------------------------
async def test_the_claim_gate_serves_a_callers_few_claims_between_a_herds() -> None:
    clock = ManualClock(1_000_000)
    gate = ClaimGate(clock, min_lead_ms=0, max_lead_ms=0, concurrency=2, weight=weight)
    due_ms = clock.now_ms()  # due now: every one straight to the slots
    order: list[str] = []
    done = asyncio.Event()

    async def claim(caller: str) -> None:
        async with gate.turn(due_ms, caller=caller) as go:
            assert go
            order.append(caller)
            await done.wait()

    tasks = [asyncio.create_task(claim("a")) for _ in range(40)]
    await settle()
    tasks += [asyncio.create_task(claim("b")) for _ in range(4)]
    await settle()
    assert order == ["a", "a"]  # two slots, taken by the herd's first
    done.set()
    await asyncio.gather(*tasks)
    assert [i for i, c in enumerate(order) if c == "b"] == [2, 4, 6, 8]


def test_the_earliest_due_time_held_follows_enter_and_leave() -> None:
    s = Shares(10)
    assert s.earliest_due_ms("a") is None
    held = [s.enter("a", due) for due in (3_000, 1_000, 2_000, 1_000)]
    assert s.earliest_due_ms("a") == 1_000
    s.leave(held[1])
    assert s.earliest_due_ms("a") == 1_000  # the other one due then is still held
    s.leave(held[3])
    assert s.earliest_due_ms("a") == 2_000
    s.leave(held[2])
    s.leave(held[0])
    assert s.earliest_due_ms("a") is None and s.total == 0


def test_without_a_pace_a_message_waits_a_second_doubled_per_receive_up_to_eight() -> None:
    pace = DrainPace()
    assert pace.turn_ms("a", 10_000, ahead=50) is None
    assert [short_wait_s(n) for n in (1, 2, 3, 4, 9)] == [1, 2, 4, 8, 8]
    assert pace.come_back_ms("a", 10_000, ahead=50, receive_count=3) == 14_000


def test_turns_follow_the_callers_pace_one_send_apart() -> None:
    pace = DrainPace(window_ms=5_000, max_ms=60_000)
    for at_ms in range(0, 2000, 100):  # 20 sends in 2 s: 10 a second
        pace.started("a", at_ms)
    assert pace.rate_per_s("a", 2000) == 10.0
    assert pace.rate_per_s("b", 2000) is None
    # 40 ahead: the first back when half of them have started (2 s), then each 100 ms on.
    assert [pace.turn_ms("a", 2000, ahead=40) for _ in range(3)] == [4000, 4100, 4200]
    # Later, with fewer ahead, never before the turns already handed out.
    assert pace.turn_ms("a", 2500, ahead=2) == 4300


def test_a_turn_is_at_most_max_ahead_and_a_stale_pace_is_none() -> None:
    pace = DrainPace(window_ms=5_000, max_ms=60_000)
    pace.started("a", 0)
    pace.started("a", 4000)
    pace.started("a", 5000)  # a new window: the last one's rate, 2 in 5 s, applies
    assert pace.rate_per_s("a", 6000) == 0.4
    assert pace.turn_ms("a", 6000, ahead=1000) == 66_000
    assert pace.turn_ms("a", 6000, ahead=1000) == 66_000
    assert pace.rate_per_s("a", 15_000) is None  # nothing started for two windows
