"""The one place that hides a message: an ordinary early message costs no visibility change;
a delivery that starts late extends it once; the breaker slot is given back on every way out.
"""

from __future__ import annotations

import asyncio

import pytest

from dispatcher.breaker import BreakerState, CircuitBreaker
from dispatcher.dispatcher import Dispatcher
from dispatcher.visibility import Visibility
from tests.unit.dispatcher.fakes import Env, settle
from trigger_service.config.settings import Settings
from trigger_service.core.model import Status, Trigger
from trigger_service.core.ports.values import OutgoingMessage
from trigger_service.core.time.clock import ManualClock
from trigger_service.core.time.timing import sqs_delay_s

pytestmark = pytest.mark.timeout(10)


def test_the_receive_visibility_covers_the_lead_the_rounding_a_send_and_its_outcome() -> None:
    v = Visibility(Settings(), None, ManualClock(0), None)  # type: ignore[arg-type]
    # 15 s lead + 1 s rounded down + 10 s callback timeout + 5 s to write the outcome.
    assert v.receive_s == 31


@pytest.mark.parametrize("fire_in_ms", [30_999, 30_000, 16_000, 15_001, 2_000])
async def test_a_message_as_early_as_the_lead_allows_needs_no_visibility_change(
        fire_in_ms: int) -> None:
    env = Env(settings=Settings())  # the default 15 s enqueue lead
    t = await env.add(fire_in_ms)
    delay_s = sqs_delay_s(t.fire_at_ms, env.clock.now_ms(), env.settings.sqs.enqueue_lead_s)
    await env.queue.send(OutgoingMessage(t.trigger_id, t.fire_at_ms, delay_s))
    env.clock.advance_ms(delay_s * 1000)  # SQS shows it (up to 16 s before it is due)
    d = env.dispatcher()
    assert await d.run_once() == 1
    await settle()
    env.clock.set_ms(t.fire_at_ms)
    await d.drain()
    assert env.row(t).status is Status.FIRED
    assert env.queue.calls.get("change_visibility", 0) == 0


async def second_waits_behind_first(env: Env) -> tuple[Dispatcher, Trigger, Trigger]:
    """Two due in a second, one send at a time, the first POST hanging: the dispatcher, the
    first trigger, and the second, waiting for its caller's bulkhead since its due time."""
    env.with_dispatch(default_max_concurrency=1)
    first = await env.add(1_000)
    second = await env.add(1_000)
    env.channel.gate = asyncio.Event()
    await env.enqueue(first, second)
    d = env.dispatcher()
    assert await d.run_once() == 2
    await settle()
    env.clock.advance_ms(1_000)
    await settle()
    return d, first, second


async def test_a_delivery_that_starts_late_extends_the_visibility_once(env: Env) -> None:
    d, _, second = await second_waits_behind_first(env)
    # 20 s later the second still waits for the bulkhead: when it starts, what is left of
    # the receive visibility (30 s) would not cover its callback timeout and outcome.
    env.clock.advance_ms(20_000)
    assert env.channel.gate is not None
    env.channel.gate.set()
    await d.drain()
    assert env.row(second).status is Status.FIRED
    assert env.queue.calls.get("change_visibility", 0) == 1


async def test_a_message_shown_again_before_its_late_delivery_starts_is_still_delivered(
        env: Env) -> None:
    """Seen under a sustained herd on a busy machine: the extension came after the receive
    visibility had lapsed and another dispatcher had the message, SQS refused it, and the handler
    gave up on a trigger it held, which then waited minutes for a stale-claim takeover. The
    delivery goes on: the claim, not the message, fences it; a copy received meanwhile meets
    the claim (or the trigger FIRED) and is dropped."""
    d, first, second = await second_waits_behind_first(env)
    # Past the whole receive visibility: both messages were shown again, and another
    # dispatcher received them (their receipts here no longer hide anything).
    env.clock.advance_ms(d._visibility.receive_s * 1000 + 1_000)
    copies = await env.receive()
    assert sorted(c.trigger_id for c in copies) == sorted([first.trigger_id, second.trigger_id])
    assert env.channel.gate is not None
    env.channel.gate.set()
    await d.drain()
    assert env.row(first).status is Status.FIRED and env.row(second).status is Status.FIRED
    assert sorted(c.trigger_id for c in env.channel.calls) == sorted(
        [first.trigger_id, second.trigger_id])
    assert env.metrics.snapshot().get("visibility_lost_total") == 1
    # The other dispatcher's copies meet FIRED triggers: dropped, nothing sent again.
    other = env.dispatcher()
    for c in copies:
        await other.handle(c)
    assert len(env.channel.calls) == 2 and env.queue.messages == []


def half_open_with_its_trial_taken() -> CircuitBreaker:
    clock = ManualClock(0)
    b = CircuitBreaker(clock, fail_max=1, reset_s=1)
    b.record_failure()
    clock.advance_ms(1_000)
    assert b.try_acquire() == 0
    return b


def test_a_slot_left_without_an_outcome_gives_the_half_open_trial_back() -> None:
    b = half_open_with_its_trial_taken()
    with b.slot():
        assert b.try_acquire() > 0  # one trial at a time
    assert b.try_acquire() == 0  # given back


def test_a_slot_left_by_an_error_gives_the_trial_back_and_counts_nothing() -> None:
    b = half_open_with_its_trial_taken()
    with pytest.raises(RuntimeError), b.slot():
        raise RuntimeError("the claim's store call failed")
    assert b.state is BreakerState.HALF_OPEN and b.try_acquire() == 0


@pytest.mark.parametrize("ok", [True, False])
def test_a_slot_settles_once_with_its_outcome(ok: bool) -> None:
    b = half_open_with_its_trial_taken()
    with b.slot() as slot:
        slot.succeeded() if ok else slot.failed()
        slot.give_back()  # settled already: nothing more happens
    assert b.state is (BreakerState.CLOSED if ok else BreakerState.OPEN)
