"""Dispatcher: receive, hold until the fire time, put back, drop, run and drain.

Every test drives time with the ManualClock; nothing sleeps for real.
"""

from __future__ import annotations

import asyncio

import pytest

from dispatcher.fair_share import FAIR_DEFER_S
from tests.unit.dispatcher.fakes import (
    CALLER,
    CLAIM_LEAD_MS,
    OTHER_CALLER,
    START_MS,
    UNKNOWN_CALLER,
    VISIBILITY_S,
    AlwaysLosingStore,
    Call,
    Env,
    settle,
)
from trigger_service.adapters.memory.queue import MemoryQueue, QueuedDeadLetter
from trigger_service.core.errors import QueueError, StoreError
from trigger_service.core.lanes import lane_of
from trigger_service.core.model import Status, Trigger, new_trigger_id
from trigger_service.core.ports.values import OutgoingMessage

# A regression that leaves a task waiting on the ManualClock would otherwise hang.
pytestmark = pytest.mark.timeout(10)

RECEIVE_VISIBLE_AT = START_MS + VISIBILITY_S * 1000  # where a received message reappears


# --- delivery at the fire time ----------------------------------------------------------------
async def test_claims_at_claim_lead_and_delivers_exactly_at_fire_time(env: Env) -> None:
    t = await env.add(2_500)
    task = asyncio.create_task(env.dispatcher().handle(await env.receive_one(t)))
    await settle()
    env.clock.set_ms(t.fire_at_ms - CLAIM_LEAD_MS - 1)
    await settle()
    assert env.row(t).status is Status.PENDING
    env.clock.set_ms(t.fire_at_ms - CLAIM_LEAD_MS)
    await settle()
    claimed = env.row(t)
    # The claim's time is when the POST will start (the fire time), not when it is written.
    assert (claimed.status, claimed.attempts, claimed.claim_id, claimed.claimed_at_ms) == (
        Status.IN_FLIGHT, 1, "claim-1", t.fire_at_ms)
    env.clock.set_ms(t.fire_at_ms - 1)
    await settle()
    assert env.channel.calls == [] and not task.done()
    env.clock.set_ms(t.fire_at_ms)
    await task
    assert env.channel.calls == [Call(t.trigger_id, 1, t.fire_at_ms, "claim-1")]


async def test_delivery_marks_fired_and_deletes_the_message(env: Env) -> None:
    t = await env.add(1_000)
    task = asyncio.create_task(env.dispatcher().handle(await env.receive_one(t)))
    await settle()
    env.clock.advance_ms(1_000)
    await task
    row = env.row(t)
    assert (row.status, row.fired_at_ms, row.attempts) == (Status.FIRED, t.fire_at_ms, 1)
    assert row.claim_id is None and row.last_error is None and row.next_attempt_at_ms is None
    assert env.queued(t) == []
    assert env.fired_count() == 1


async def test_overdue_message_is_delivered_at_once(env: Env) -> None:
    t = await env.add(-5_000)
    await env.dispatcher().handle(await env.receive_one(t))
    assert env.channel.calls == [Call(t.trigger_id, 1, START_MS, "claim-1")]
    assert env.row(t).status is Status.FIRED and env.row(t).fired_at_ms == START_MS


async def test_staggered_messages_are_never_delivered_early(env: Env) -> None:
    offsets = [1_500, 2_250, 3_001, 7_777, 19_999]
    triggers = [await env.add(ms) for ms in offsets]
    await env.enqueue(*triggers)
    d = env.dispatcher()
    tasks = [asyncio.create_task(d.handle(m)) for m in await env.receive()]
    fire_at = {t.trigger_id: t.fire_at_ms for t in triggers}
    for _ in range(80):  # 20 s in steps of 250 ms
        await settle()
        assert all(c.at_ms >= fire_at[c.trigger_id] for c in env.channel.calls)
        env.clock.advance_ms(250)
    await asyncio.gather(*tasks)
    assert sorted(env.channel.ids()) == sorted(fire_at)
    assert all(c.at_ms - fire_at[c.trigger_id] < 250 for c in env.channel.calls)


# --- messages that are dropped ----------------------------------------------------------------
@pytest.mark.parametrize(("status", "duplicates"), [
    (Status.CANCELLED, 0), (Status.FAILED, 0), (Status.FIRED, 1)])
async def test_message_for_finished_trigger_is_dropped(
    env: Env, status: Status, duplicates: int
) -> None:
    t = await env.add(0, status=status)
    await env.dispatcher().handle(await env.receive_one(t))
    assert env.queued(t) == [] and env.channel.calls == []
    assert env.count("duplicate_messages_total") == duplicates
    assert env.row(t) == t


async def test_message_for_unknown_trigger_is_dropped(env: Env) -> None:
    await env.queue.send(OutgoingMessage(new_trigger_id(START_MS), START_MS, 0))
    await env.dispatcher().handle(await env.receive_one())
    assert env.queue.messages == [] and env.channel.calls == []
    assert env.count("duplicate_messages_total") == 0


async def test_malformed_message_is_dead_lettered_and_deleted(env: Env) -> None:
    await env.queue.send(OutgoingMessage("", 0, 0))
    await env.dispatcher().handle(await env.receive_one())
    assert env.queue.dead_letters == [QueuedDeadLetter("", 0, "malformed message body")]
    assert env.queue.messages == []
    assert "get" not in env.store.calls


@pytest.mark.parametrize("status", [Status.CANCELLED, Status.FIRED])
async def test_trigger_finished_while_held_is_not_delivered(env: Env, status: Status) -> None:
    t = await env.add(5_000)
    task = asyncio.create_task(env.dispatcher().handle(await env.receive_one(t)))
    await settle()
    env.set_row(t, status)  # cancelled by the API, or fired through another copy
    env.clock.set_ms(t.fire_at_ms)
    await task
    assert env.channel.calls == [] and env.queued(t) == []
    assert env.row(t).status is status
    assert env.count("duplicate_messages_total") == (1 if status is Status.FIRED else 0)


# --- put back or held -------------------------------------------------------------------------
@pytest.mark.parametrize(("fire_in_ms", "hidden_s"), [
    (20_001, 17), (60_500, 57), (900_000, 897)])
async def test_far_future_message_is_put_back_until_enqueue_lead(
    env: Env, fire_in_ms: int, hidden_s: int
) -> None:
    t = await env.add(fire_in_ms)
    await env.dispatcher().handle(await env.receive_one(t))
    assert env.queued(t) == [START_MS + hidden_s * 1000]
    assert env.channel.calls == [] and env.row(t) == t


async def test_retry_message_is_put_back_until_its_next_attempt(env: Env) -> None:
    t = await env.add(-10_000, attempts=1, next_attempt_at_ms=START_MS + 40_000,
                      last_error="HTTP 500")
    await env.dispatcher().handle(await env.receive_one(t))
    assert env.queued(t) == [START_MS + 37_000]
    assert env.channel.calls == [] and env.row(t) == t


async def test_short_hold_keeps_the_receive_visibility(env: Env) -> None:
    t = await env.add(10_000)
    task = asyncio.create_task(env.dispatcher().handle(await env.receive_one(t)))
    await settle()
    assert "change_visibility" not in env.queue.calls
    assert env.queued(t) == [RECEIVE_VISIBLE_AT]
    env.clock.set_ms(t.fire_at_ms)
    await task
    assert env.row(t).status is Status.FIRED


@pytest.mark.parametrize(("fire_in_ms", "hidden_s"), [(18_000, 33), (20_000, 35)])
async def test_long_hold_extends_visibility_past_the_delivery(
    env: Env, fire_in_ms: int, hidden_s: int
) -> None:
    # Held to the fire time, then a 10 s callback timeout and a 5 s margin to record it.
    t = await env.add(fire_in_ms)
    task = asyncio.create_task(env.dispatcher().handle(await env.receive_one(t)))
    await settle()
    assert env.queued(t) == [START_MS + hidden_s * 1000]
    assert env.channel.calls == []
    env.clock.set_ms(t.fire_at_ms)
    await task
    assert env.row(t).status is Status.FIRED


# --- claim races ------------------------------------------------------------------------------
async def test_two_dispatchers_holding_copies_deliver_once(env: Env) -> None:
    t = await env.add(3_000)
    await env.enqueue(t, copies=2)
    first, second = await env.receive()
    tasks = [asyncio.create_task(env.dispatcher().handle(m)) for m in (first, second)]
    await settle()
    env.clock.set_ms(t.fire_at_ms)
    await asyncio.gather(*tasks)
    assert len(env.channel.calls) == 1
    assert env.row(t).status is Status.FIRED
    assert env.count("duplicate_messages_total") == 1
    assert env.queued(t) == []


async def test_retry_recorded_elsewhere_while_held_puts_message_back(env: Env) -> None:
    t = await env.add(5_000)
    task = asyncio.create_task(env.dispatcher().handle(await env.receive_one(t)))
    await settle()
    # Another dispatcher claimed it with its copy, failed, and recorded a retry in 60 s.
    env.set_row(t, Status.PENDING, attempts=1, next_attempt_at_ms=t.fire_at_ms + 60_000,
                last_error="HTTP 500")
    claim_ms = t.fire_at_ms - CLAIM_LEAD_MS
    env.clock.set_ms(claim_ms)
    await task
    assert env.channel.calls == []
    assert env.queued(t) == [claim_ms + (61 - 3) * 1000]  # 3 s enqueue lead before the retry
    assert env.count("duplicate_messages_total") == 0


async def test_endless_lost_races_give_up_and_leave_the_message(env: Env) -> None:
    env.store = AlwaysLosingStore()
    t = await env.add(0)
    await env.dispatcher().handle(await env.receive_one(t))
    assert env.store.calls["compare_and_set"] == 4
    assert env.channel.calls == []
    assert env.queued(t) == [RECEIVE_VISIBLE_AT]  # comes back after its visibility
    assert env.row(t) == t


# --- store failures ---------------------------------------------------------------------------
async def test_store_error_in_handle_propagates_and_deletes_nothing(env: Env) -> None:
    t = await env.add(0)
    m = await env.receive_one(t)
    env.store.failures["get"] = StoreError("cassandra down")
    with pytest.raises(StoreError):
        await env.dispatcher().handle(m)
    assert env.queued(t) == [RECEIVE_VISIBLE_AT]
    assert "delete" not in env.queue.calls and env.channel.calls == []


async def test_store_error_is_contained_and_the_message_reappears(env: Env) -> None:
    t = await env.add(0)
    await env.enqueue(t)
    env.store.failures["get"] = StoreError("cassandra down")
    d = env.dispatcher()
    assert await d.run_once() == 1
    await d.drain()
    assert d.inflight == 0 and env.queued(t) == [RECEIVE_VISIBLE_AT]
    del env.store.failures["get"]
    env.clock.set_ms(RECEIVE_VISIBLE_AT - 1)
    assert await d.run_once() == 0
    env.clock.set_ms(RECEIVE_VISIBLE_AT)
    assert await d.run_once() == 1
    await d.drain()
    assert env.row(t).status is Status.FIRED and env.queued(t) == []
    assert env.queue.calls["receive"] == 3


# --- run_once ---------------------------------------------------------------------------------
async def test_run_once_returns_how_many_it_received(env: Env) -> None:
    triggers = [await env.add(60_000) for _ in range(3)]  # far future: put back at once
    await env.enqueue(*triggers)
    d = env.dispatcher()
    assert await d.run_once() == 3
    await d.drain()
    assert d.inflight == 0
    assert [env.queued(t) for t in triggers] == [[START_MS + 57_000]] * 3
    assert await d.run_once() == 0


async def test_run_once_receives_at_most_ten(env: Env) -> None:
    await env.enqueue(*[await env.add(60_000) for _ in range(12)])
    d = env.dispatcher()
    assert await d.run_once() == 10
    assert await d.run_once() == 2
    await d.drain()


async def test_run_once_at_max_inflight_hides_a_callers_messages_over_its_share(
        env: Env) -> None:
    env.with_dispatch(max_inflight=3)
    triggers = [await env.add(10_000) for _ in range(5)]
    await env.enqueue(*triggers)
    d = env.dispatcher()
    assert await d.run_once() == 3
    await settle()
    assert d.inflight == 3
    # Full, it still receives (another caller's messages may be behind these), but the
    # only caller holds its whole share: a herd, its held messages due with the two others,
    # so no room is made before they are due: hidden until just after.
    assert await d.run_once() == 2
    await settle()
    assert d.inflight == 3 and deferrals(env) == 2
    hidden = sorted(v for t in triggers for v in env.queued(t))
    assert hidden[:2] == [START_MS + 10_000 + FAIR_DEFER_S * 1000] * 2
    env.clock.set_ms(START_MS + 10_000)
    await d.drain()
    assert len(env.channel.calls) == 3 and d.inflight == 0
    assert await d.run_once() == 0
    env.clock.set_ms(START_MS + 10_000 + FAIR_DEFER_S * 1000)
    assert await d.run_once() == 2
    await d.drain()
    assert sorted(env.channel.ids()) == sorted(t.trigger_id for t in triggers)


async def test_run_once_holds_each_callers_share_past_the_cap_up_to_twice_it(
        env: Env) -> None:
    env.with_dispatch(max_inflight=2)
    await env.enqueue(*[await env.add(10_000) for _ in range(2)])
    d = env.dispatcher()
    assert await d.run_once() == 2
    await settle()
    await env.enqueue(*[await env.add(10_000, caller=OTHER_CALLER) for _ in range(3)])
    await env.enqueue(*[await env.add(10_000, caller=UNKNOWN_CALLER) for _ in range(3)])
    assert await d.run_once() == 6
    await settle()
    # Past the cap, each other caller holds its share of it (one of two): the rest hidden.
    assert [d.shares.in_hand(c) for c in (CALLER, OTHER_CALLER, UNKNOWN_CALLER)] == [2, 1, 1]
    assert deferrals(env) == 4 and d.inflight == 4
    receives = env.queue.calls["receive"]
    full = asyncio.create_task(d.run_once())  # twice the cap: backs off, no receive
    await settle()
    assert not full.done() and env.queue.calls["receive"] == receives
    env.clock.advance_ms(50)
    assert await full == 0
    env.clock.set_ms(START_MS + 10_000)
    await d.drain()


def deferrals(env: Env) -> int:
    return sum(n for k, n in env.metrics.snapshot().items()
               if k.startswith("fair_share_deferrals_total"))


# --- run and drain ----------------------------------------------------------------------------
async def test_run_delivers_what_it_receives_until_stopped(env: Env) -> None:
    env.with_dispatch(receivers=2)
    t = await env.add(2_000)
    await env.enqueue(t)
    d, stop = env.dispatcher(), asyncio.Event()
    run = asyncio.create_task(d.run(stop))
    await settle()
    assert d.inflight == 1 and env.channel.calls == []
    env.clock.set_ms(t.fire_at_ms)
    await settle()
    assert env.row(t).status is Status.FIRED and d.inflight == 0
    stop.set()
    await run
    assert env.channel.calls == [Call(t.trigger_id, 1, t.fire_at_ms, "claim-1")]


async def test_receive_failure_backs_off_one_second_on_the_clock(env: Env) -> None:
    env.with_dispatch(receivers=1)
    env.queue.failures["receive"] = QueueError("sqs down")
    d, stop = env.dispatcher(), asyncio.Event()
    run = asyncio.create_task(d.run(stop))
    await settle()
    assert env.queue.calls["receive"] == 1
    env.clock.advance_ms(999)
    await settle()
    assert env.queue.calls["receive"] == 1
    env.clock.advance_ms(1)
    await settle()
    assert env.queue.calls["receive"] == 2
    del env.queue.failures["receive"]
    t = await env.add(0)
    await env.enqueue(t)
    env.clock.advance_ms(1_000)
    await settle()
    assert env.row(t).status is Status.FIRED
    stop.set()
    await run


async def test_stop_lets_a_delivery_under_way_finish(env: Env) -> None:
    env.with_dispatch(receivers=1)
    gate = env.channel.gate = asyncio.Event()
    t = await env.add(0)
    await env.enqueue(t)
    d, stop = env.dispatcher(), asyncio.Event()
    run = asyncio.create_task(d.run(stop))
    await settle()
    assert env.channel.ids() == [t.trigger_id]
    stop.set()
    await settle()
    assert not run.done()
    gate.set()
    await run
    assert env.row(t).status is Status.FIRED and env.queued(t) == []


async def test_stop_hands_a_held_message_back_instead_of_delivering_it(env: Env) -> None:
    env.with_dispatch(receivers=1)
    t = await env.add(10_000)
    await env.enqueue(t)
    d, stop = env.dispatcher(), asyncio.Event()
    run = asyncio.create_task(d.run(stop))
    await settle()
    assert d.inflight == 1
    stop.set()
    await settle()
    env.clock.set_ms(t.fire_at_ms - CLAIM_LEAD_MS)  # (today the hold only ends here)
    await run
    assert env.channel.calls == [] and env.row(t) == t
    [visible_at] = env.queued(t)
    assert visible_at <= env.clock.now_ms()  # visibility 0: another dispatcher takes it now


async def test_stop_hands_held_messages_back_without_waiting_for_their_hold(env: Env) -> None:
    env.with_dispatch(receivers=1)
    t = await env.add(10_000)
    await env.enqueue(t)
    d, stop = env.dispatcher(), asyncio.Event()
    run = asyncio.create_task(d.run(stop))
    await settle()
    assert d.inflight == 1
    stop.set()
    await settle()
    try:
        assert run.done(), "run() is still draining a held message"
        assert env.queued(t) == [START_MS]
    finally:
        env.clock.set_ms(t.fire_at_ms)
        await run


async def test_long_polls_grow_while_receives_come_back_full_and_shrink_to_one(env: Env) -> None:
    env.with_dispatch(receivers=4)
    triggers = [await env.add(5_000) for _ in range(60)]
    await env.enqueue(*triggers)
    d, stop = env.dispatcher(), asyncio.Event()
    run = asyncio.create_task(d.run(stop))
    await settle()
    assert d.inflight == 60
    # Full receives started more polls (never more than receivers); the empty queue then
    # ended all but one.
    assert 1 < d.max_polls <= 4 and d.polls == 1
    env.clock.set_ms(triggers[0].fire_at_ms)
    await settle()
    assert all(env.row(t).status is Status.FIRED for t in triggers)
    stop.set()
    await run
    assert d.polls == 0


async def test_a_trickle_is_received_by_one_long_poll(env: Env) -> None:
    env.with_dispatch(receivers=4)
    d, stop = env.dispatcher(), asyncio.Event()
    run = asyncio.create_task(d.run(stop))
    for _ in range(5):
        await env.enqueue(await env.add(1_000))
        await settle()
    assert d.max_polls == 1 and d.inflight == 5
    env.clock.advance_ms(1_000)
    await settle()
    stop.set()
    await run


async def test_a_receive_of_a_herds_excess_is_hidden_again_in_one_request(env: Env) -> None:
    env.with_dispatch(max_inflight=2)
    herd = [await env.add(10_000) for _ in range(12)]
    await env.queue.send_many([OutgoingMessage(t.trigger_id, t.fire_at_ms, 0, caller=CALLER)
                               for t in herd])
    d = env.dispatcher()
    assert await d.run_once() == 2  # its share, held
    await settle()
    calls = len(env.queue.visibility_calls)
    # Full: the next receive's ten are over the caller's share, hidden again unread, in one
    # request, and no task holds them.
    assert await d.run_once() == 10
    assert d.inflight == 2 and deferrals(env) == 10
    assert env.queue.visibility_calls[calls:] == [10]
    env.clock.set_ms(START_MS + 10_000)
    await d.drain()
    assert len(env.channel.calls) == 2


async def test_a_message_naming_its_caller_counts_in_its_share_while_its_row_is_read(
        env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    env.with_dispatch(max_inflight=2)
    herd = [await env.add(10_000) for _ in range(4)]
    await env.queue.send_many([OutgoingMessage(t.trigger_id, t.fire_at_ms, 0, caller=CALLER)
                               for t in herd])
    reads = asyncio.Event()
    read = env.store.get

    async def slow_read(trigger_id: str) -> Trigger | None:
        await reads.wait()  # a store slow under a herd
        return await read(trigger_id)

    monkeypatch.setattr(env.store, "get", slow_read)
    d = env.dispatcher()
    assert await d.run_once() == 2
    await settle()
    assert d.shares.in_hand(CALLER) == 2  # counted, their rows not read yet
    assert await d.run_once() == 2
    assert deferrals(env) == 2 and d.inflight == 2  # the next two: over the share
    reads.set()
    env.clock.set_ms(START_MS + 10_000)
    await d.drain()
    assert len(env.channel.calls) == 2 and d.shares.in_hand(CALLER) == 0


async def test_a_message_naming_a_caller_over_its_share_is_hidden_without_a_read(
        env: Env) -> None:
    env.with_dispatch(max_inflight=1)
    held, more = await env.add(10_000), await env.add(10_000)
    await env.enqueue(held)
    d = env.dispatcher()
    assert await d.run_once() == 1
    await settle()
    await env.queue.send_many([OutgoingMessage(more.trigger_id, more.fire_at_ms, 0,
                                               caller=CALLER)])
    env.store.failures["get"] = StoreError("cassandra down")  # a read would fail
    assert await d.run_once() == 1
    await settle()
    assert deferrals(env) == 1
    assert env.queued(more) == [more.fire_at_ms + FAIR_DEFER_S * 1000]  # never earlier
    del env.store.failures["get"]
    env.clock.set_ms(START_MS + 10_000)
    await d.drain()
    assert env.channel.ids() == [held.trigger_id]


async def test_a_message_due_after_the_callers_held_ones_comes_back_before_it_is_due(
        env: Env) -> None:
    env.with_dispatch(max_inflight=1)
    held, later = await env.add(2_000), await env.add(10_000)
    await env.enqueue(held)
    d = env.dispatcher()
    assert await d.run_once() == 1
    await settle()
    await env.enqueue(later)
    assert await d.run_once() == 1
    await settle()
    # Room is made when the held one is sent, 8 s before this one is due: it is hidden
    # for half the time left, not until after it is due.
    assert deferrals(env) == 1 and env.queued(later) == [START_MS + 5_000]
    env.clock.set_ms(START_MS + 2_000)
    await d.drain()
    env.clock.set_ms(START_MS + 5_000)
    assert await d.run_once() == 1
    env.clock.set_ms(START_MS + 10_000)
    await d.drain()
    assert env.channel.ids() == [held.trigger_id, later.trigger_id]
    assert env.channel.calls[-1].at_ms == START_MS + 10_000  # on time


async def test_every_lane_has_a_poll_and_a_herds_lane_gets_the_extra_ones(env: Env) -> None:
    """``core.lanes``: one caller's herd in its lane does not stand in front of another
    caller's message in another lane; each lane is polled, even past ``receivers``."""
    env.queue = MemoryQueue(env.clock, lanes=3)
    assert {lane_of(CALLER, 3), lane_of(OTHER_CALLER, 3)} == {0, 2}
    env.with_dispatch(receivers=4)
    herd = [await env.add(5_000) for _ in range(60)]
    other = await env.add(5_000, caller=OTHER_CALLER,
                          callback_url="https://billing.internal/cb")
    await env.queue.send_many([OutgoingMessage.of(t, 0) for t in [*herd, other]])
    d, stop = env.dispatcher(), asyncio.Event()
    run = asyncio.create_task(d.run(stop))
    await settle()
    assert d.inflight == 61  # the other caller's one among them
    assert d.max_polls == 4  # one on each lane, and the herd's lane one more
    assert d.polls == 3  # the empty receives ended the extra ones, never a lane's last
    env.clock.set_ms(other.fire_at_ms)
    await settle()
    assert env.row(other).status is Status.FIRED
    assert all(env.row(t).status is Status.FIRED for t in herd)
    stop.set()
    await run
    assert d.polls == 0
