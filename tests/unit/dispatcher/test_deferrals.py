"""Deferrals spend neither an attempt nor SQS's redrive budget, a slow caller holds only its
own messages, and a delivery that starts late keeps its message hidden throughout."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from dispatcher.visibility import REFRESH_AFTER_RECEIVES
from tests.unit.dispatcher.fakes import (
    CALLER,
    OTHER_CALLER,
    Env,
    breaker_of,
    make_callers,
    settle,
)
from trigger_service.core.errors import StoreError
from trigger_service.core.model import Status, Trigger
from trigger_service.core.ports.values import OutgoingMessage, ReceivedMessage

pytestmark = pytest.mark.timeout(10)


def received_again(m: ReceivedMessage, count: int) -> ReceivedMessage:
    return replace(m, receive_count=count)


async def test_a_deferral_below_the_refresh_threshold_only_hides_the_message(env: Env) -> None:
    t = await env.add(0)
    m = await env.receive_one(t)
    await env.delivery().visibility.defer(received_again(m, REFRESH_AFTER_RECEIVES - 1), 7)
    assert env.queued(t) == [env.clock.now_ms() + 7_000]
    assert env.queue.calls.get("replace", 0) == 0


async def test_a_deferral_of_an_often_received_message_replaces_it_with_a_fresh_copy(
    env: Env,
) -> None:
    t = await env.add(0)
    m = await env.receive_one(t)
    await env.delivery().visibility.defer(received_again(m, REFRESH_AFTER_RECEIVES), 7)
    assert env.queued(t) == [env.clock.now_ms() + 7_000]
    assert env.count("message_refreshes_total") == 1
    env.clock.advance_ms(7_000)
    [fresh] = await env.receive()
    assert fresh.message_id != m.message_id and fresh.receive_count == 1
    assert (fresh.trigger_id, fresh.fire_at_ms) == (m.trigger_id, m.fire_at_ms)


async def test_an_open_circuit_deferral_refreshes_a_much_received_message(env: Env) -> None:
    env.with_dispatch(breaker_fail_max=1, breaker_reset_s=60)
    d = env.dispatcher()
    breaker_of(d.delivery).record_failure()  # open
    t = await env.add(0)
    m = await env.receive_one(t)
    await d.handle(received_again(m, 40))
    assert env.row(t).attempts == 0 and env.channel.calls == []
    assert env.count("circuit_open_deferrals_total") == 1
    assert env.count("message_refreshes_total") == 1
    [visible_at] = env.queued(t)
    assert visible_at >= env.clock.now_ms() + 60_000


async def test_a_dependency_error_refreshes_a_much_received_message(env: Env) -> None:
    t = await env.add(0)
    m = await env.receive_one(t)
    env.store.failures["get"] = StoreError("cassandra down")
    d = env.dispatcher()
    await d._handle_safely(received_again(m, REFRESH_AFTER_RECEIVES + 5))
    assert env.count("message_refreshes_total") == 1
    del env.store.failures["get"]
    env.clock.advance_ms(max(env.queued(t)) - env.clock.now_ms())
    [fresh] = await env.receive()
    assert fresh.receive_count == 1
    await d.handle(fresh)
    assert env.row(t).status is Status.FIRED


async def test_a_caller_past_its_waiting_cap_defers_only_its_own_messages(env: Env) -> None:
    env.callers = make_callers(orders_max_concurrency=1)
    env.with_dispatch(max_inflight=3)  # at most 3 of one caller's messages may wait
    gate = env.channel.gate = asyncio.Event()
    slow = [await env.add(0) for _ in range(5)]
    await env.enqueue(*slow)
    d = env.dispatcher()
    tasks = []
    for m in await env.receive():
        # One after another: messages waiting for the bulkhead are not counted against the
        # dispatcher's cap (fair shares would defer the ones received with them).
        tasks.append(asyncio.create_task(d.handle(m)))
        await settle()
    assert len(env.channel.calls) == 1  # one delivering, three waiting, one deferred
    assert env.count("bulkhead_deferrals_total") == 1
    assert d.delivery.waiting == 3
    other = await env.add(0, caller=OTHER_CALLER)
    tasks.append(asyncio.create_task(d.handle(await env.receive_one(other))))
    await settle()
    assert env.channel.calls[-1].trigger_id == other.trigger_id  # not held up by orders
    gate.set()
    await asyncio.gather(*tasks)
    assert env.row(other).status is Status.FIRED
    fired = [t for t in slow if env.row(t).status is Status.FIRED]
    assert len(fired) == 4 and all(env.row(t).attempts == 0 for t in slow if t not in fired)


async def test_past_a_full_bulkhead_a_herd_comes_back_at_its_turns_unread(env: Env) -> None:
    """A due message naming its caller, whose queue for the bulkhead is full, is hidden
    without a read of its row: until about its turn by the caller's pace (the messages
    waiting, over the sends started per second), each next one a send later."""
    env.callers = make_callers(orders_max_concurrency=1)
    env.with_dispatch(max_inflight=6)
    env.channel.gate = asyncio.Event()
    d = env.dispatcher()
    now_ms = env.clock.now_ms()
    for ago_ms in (4000, 3000, 2000, 1000):  # four sends over the last four seconds
        d.delivery.bulkheads.pace.started(CALLER, now_ms - ago_ms)
    held = [await env.add(0) for _ in range(7)]
    await env.enqueue(*held)
    tasks = []
    for m in await env.receive():
        tasks.append(asyncio.create_task(d.handle(m)))
        await settle()
    assert len(env.channel.calls) == 1 and d.delivery.waiting == 6  # the fifth send
    herd = [await env.add(0) for _ in range(2)]
    await env.queue.send_many([OutgoingMessage(t.trigger_id, t.fire_at_ms, 0, caller=CALLER)
                               for t in herd])
    env.store.failures["get"] = StoreError("cassandra down")  # a read would fail
    for m in await env.receive():
        await d.handle(m)
    assert env.count("bulkhead_deferrals_total") == 2
    # 5 sends in 4 s: one each 800 ms. Six wait: the first comes back when three have
    # started (2.4 s, in whole seconds on SQS: 3 s), the next a send later (3.2 s: 4 s).
    assert [env.queued(t) for t in herd] == [[now_ms + 3000], [now_ms + 4000]]
    del env.store.failures["get"]
    env.channel.gate.set()
    await asyncio.gather(*tasks)


async def test_a_delivery_that_starts_after_a_long_wait_keeps_its_message_hidden(
    env: Env,
) -> None:
    env.callers = make_callers(orders_max_concurrency=1)
    gate = env.channel.gate = asyncio.Event()
    seen: dict[str, list[int]] = {}

    def note(t: Trigger) -> None:  # when each copy becomes visible, seen mid-delivery
        seen[t.trigger_id] = env.queued(t)

    env.channel.on_deliver = note
    a, b = await env.add(0), await env.add(0)
    await env.enqueue(a, b)
    d = env.dispatcher()  # one dispatcher: one bulkhead
    tasks = [asyncio.create_task(d.handle(m)) for m in await env.receive()]
    await settle()
    env.clock.advance_ms(25_000)  # the first delivery is slow; the second waits for it
    gate.set()
    await asyncio.gather(*tasks)
    first, second = env.channel.calls
    timeout_ms = int(env.settings.dispatch.callback_timeout_s * 1000)
    [visible_at] = seen[second.trigger_id]
    assert visible_at >= second.at_ms + timeout_ms  # not back while it is being delivered
    assert env.store.triggers[second.trigger_id].status is Status.FIRED
    assert env.count("deliveries_total{outcome=\"fired\"}") == 2
    assert first.at_ms + 25_000 == second.at_ms


async def test_a_second_copy_of_a_trigger_in_hand_is_deleted_without_a_store_read(
    env: Env,
) -> None:
    t = await env.add(2_000)
    await env.enqueue(t, copies=2)
    d = env.dispatcher()
    assert await d.run_once() == 2
    await settle()
    assert env.store.calls.get("get", 0) == 1  # only the first copy read the row
    assert env.count("duplicate_messages_total") == 1 and len(env.queued(t)) == 1
    env.clock.set_ms(t.fire_at_ms)
    await d.drain()
    assert [c.trigger_id for c in env.channel.calls] == [t.trigger_id]
    assert env.queued(t) == [] and env.row(t).status is Status.FIRED


async def test_messages_waiting_for_a_bulkhead_do_not_stop_receives(env: Env) -> None:
    env.callers = make_callers(orders_max_concurrency=1)
    env.with_dispatch(max_inflight=2)
    env.channel.gate = gate = asyncio.Event()
    slow = [await env.add(0) for _ in range(2)]
    await env.enqueue(*slow)
    d = env.dispatcher()
    assert await d.run_once() == 2
    await settle()
    assert d.inflight == 2 and d.delivery.waiting == 1  # one delivering, one waiting
    other = await env.add(0, caller=OTHER_CALLER)
    await env.enqueue(other)
    assert await d.run_once() == 1  # only the delivering one counts against the limit
    await settle()
    assert env.channel.calls[-1].trigger_id == other.trigger_id
    gate.set()
    await d.drain()
    assert all(env.row(t).status is Status.FIRED for t in [*slow, other])
