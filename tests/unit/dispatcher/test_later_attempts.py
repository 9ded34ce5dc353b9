"""An occurrence's later attempts on time: a retry, an escalation step or a channel due soon
after a failure is kept in the dispatcher that failed it (its message hidden), claimed again
and sent at its due time; a later one goes back to SQS until the enqueue lead before it. A
dead letter is listed by the attempt that ends the occurrence.

The dispatcher runs its own polls here (``run``): a message shown again on the queue is
received by them at once, as by a lane's long poll waiting on SQS, which answers as soon as
the message is visible, before the request that showed it has answered. Every test drives
the ManualClock.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import replace

import pytest

from dispatcher.dispatcher import Dispatcher
from tests.unit.dispatcher.fakes import (
    CLAIM_LEAD_MS,
    ENQUEUE_LEAD_S,
    START_MS,
    VISIBILITY_S,
    Call,
    Env,
    failed,
    settle,
)
from trigger_service.core.dead_letters import DeadLetterReason
from trigger_service.core.model import Status, Trigger
from trigger_service.core.notify.channels import PushSpec, SmsSpec
from trigger_service.core.notify.plan import DeliveryPlan, EscalationStep
from trigger_service.core.ports.values import VisibilityChange

pytestmark = pytest.mark.timeout(10)

FIRE_IN_MS = 2_000  # received ahead of its fire time and held, as most messages are
RECEIVED_HIDDEN_UNTIL = START_MS + VISIBILITY_S * 1000
Running = Callable[[], AbstractAsyncContextManager[Dispatcher]]  # the ``running`` fixture
ESCALATE = DeliveryPlan((PushSpec("tok", "t", "b"), SmsSpec("+4915112345678", "t")),
                        (EscalationStep(0, 0), EscalationStep(3, 1)))


@pytest.fixture
def running(env: Env, monkeypatch: pytest.MonkeyPatch) -> Running:
    """A dispatcher with its polls running (one lane, one poll) for a block; a message
    shown again at once reaches its poll before the request that showed it has answered."""

    @asynccontextmanager
    async def run() -> AsyncIterator[Dispatcher]:
        env.with_dispatch(receivers=1)
        d, stop = env.dispatcher(), asyncio.Event()
        show = env.queue.change_visibility_many

        async def poll_answers_first(changes: Sequence[VisibilityChange]) -> None:
            await show(changes)
            if not stop.is_set() and any(c.visibility_s == 0 for c in changes):
                await d.run_once()
                await settle()  # its handling starts before this request has answered

        monkeypatch.setattr(env.queue, "change_visibility_many", poll_answers_first)
        task = asyncio.create_task(d.run(stop))
        await settle()
        try:
            yield d
        finally:
            stop.set()
            await asyncio.wait_for(task, 5)

    return run


async def at(env: Env, ms: int) -> None:
    """Move the clock to ``ms`` by way of each claim time on the way there."""
    env.clock.set_ms(ms - CLAIM_LEAD_MS)
    await settle()
    env.clock.set_ms(ms)
    await settle()


async def fail_first_attempt(env: Env, t: Trigger) -> None:
    await env.enqueue(t)
    await settle()
    await at(env, t.fire_at_ms)
    assert [c.attempt for c in env.channel.calls] == [1]


async def test_a_one_second_retry_is_sent_at_its_due_time(env: Env, running: Running) -> None:
    env.with_dispatch(retry_backoff_s=(1,))
    env.channel.results = [failed()]
    t = await env.add(FIRE_IN_MS)
    async with running():
        await fail_first_attempt(env, t)
        assert env.row(t).next_attempt_at_ms == t.fire_at_ms + 1_000
        env.clock.set_ms(t.fire_at_ms + 999)
        await settle()
        assert len(env.channel.calls) == 1  # never early
        env.clock.set_ms(t.fire_at_ms + 1_000)
        await settle()
        # Not the receive's visibility later (START_MS + 30 s), when the message would be
        # back on the queue: at its due time.
        assert env.channel.calls[1] == Call(t.trigger_id, 2, t.fire_at_ms + 1_000, "claim-2")
        assert env.row(t).status is Status.FIRED and env.queued(t) == []


async def test_a_retry_held_in_process_keeps_its_message_hidden_past_its_send(
        env: Env, running: Running) -> None:
    """If the dispatcher dies while holding it, the message reappears (at least once), and
    never before the retry's send and its outcome could be over."""
    env.with_dispatch(retry_backoff_s=(19,))
    env.channel.results = [failed()]
    t = await env.add(FIRE_IN_MS)
    async with running():
        await fail_first_attempt(env, t)
        due_ms = t.fire_at_ms + 19_000
        assert env.row(t).next_attempt_at_ms == due_ms
        # Held: the send at due_ms may take the 10 s callback timeout, then 5 s to record.
        assert env.queued(t) == [due_ms + 15_000]
        assert env.count("visibility_extensions_total") == 1
        await at(env, due_ms)
        assert [c.at_ms for c in env.channel.calls] == [t.fire_at_ms, due_ms]
    assert env.row(t).status is Status.FIRED


async def test_a_retry_kept_for_a_dispatcher_that_dies_is_sent_by_the_next(env: Env) -> None:
    env.with_dispatch(retry_backoff_s=(5,))
    env.channel.results = [failed()]
    t = await env.add(FIRE_IN_MS)
    first = env.dispatcher()
    holding = asyncio.create_task(first.handle(await env.receive_one(t)))
    await settle()
    await at(env, t.fire_at_ms)
    assert env.row(t).status is Status.PENDING and not holding.done()
    holding.cancel()  # killed while it holds the retry
    await asyncio.gather(holding, return_exceptions=True)
    assert env.queued(t) == [RECEIVED_HIDDEN_UNTIL]  # hidden as received: it comes back
    env.clock.set_ms(RECEIVED_HIDDEN_UNTIL)
    await env.dispatcher().handle(await env.receive_one())
    assert [c.attempt for c in env.channel.calls] == [1, 2]
    assert env.row(t).status is Status.FIRED


async def test_a_cancel_between_the_failure_and_the_retry_wins(env: Env, running: Running) -> None:
    env.with_dispatch(retry_backoff_s=(5,))
    env.channel.results = [failed()]
    t = await env.add(FIRE_IN_MS)
    async with running():
        await fail_first_attempt(env, t)
        env.set_row(t, Status.CANCELLED)  # the API's cancel, an LWT on the PENDING row
        await at(env, t.fire_at_ms + 5_000)
        assert len(env.channel.calls) == 1
        assert env.row(t).status is Status.CANCELLED and env.queued(t) == []


async def test_a_retry_due_past_the_hold_goes_back_to_the_queue_until_the_lead(
        env: Env, running: Running) -> None:
    env.with_dispatch(retry_backoff_s=(60,))
    env.channel.results = [failed()]
    t = await env.add(FIRE_IN_MS)
    async with running() as d:
        await fail_first_attempt(env, t)
        due_ms = t.fire_at_ms + 60_000
        assert env.queued(t) == [due_ms - ENQUEUE_LEAD_S * 1000]
        assert d.inflight == 0
        await at(env, due_ms)
        assert [c.at_ms for c in env.channel.calls] == [t.fire_at_ms, due_ms]
    assert env.row(t).status is Status.FIRED


async def test_a_retry_due_inside_a_long_enqueue_lead_is_held_not_shown_at_once(
        env: Env, running: Running) -> None:
    """With a lead longer than the usual hold, a retry due within the lead would be shown
    again at once (and received again while its first receipt is still being handled):
    it is held instead."""
    env.settings = replace(env.settings, sqs=replace(env.settings.sqs, enqueue_lead_s=40))
    env.with_dispatch(retry_backoff_s=(30,))
    env.channel.results = [failed()]
    t = await env.add(FIRE_IN_MS)
    async with running():
        await fail_first_attempt(env, t)
        due_ms = t.fire_at_ms + 30_000
        assert all(visible_at > due_ms for visible_at in env.queued(t))
        await at(env, due_ms)
        assert [c.at_ms for c in env.channel.calls] == [t.fire_at_ms, due_ms]


async def test_an_escalation_step_is_sent_at_its_due_time(env: Env, running: Running) -> None:
    t = await env.add(FIRE_IN_MS, plan=ESCALATE, callback_url="")
    async with running():
        await env.enqueue(t)
        await settle()
        await at(env, t.fire_at_ms)
        assert env.notifiers.kinds() == ["push"]
        await at(env, t.fire_at_ms + 3_000)
        assert env.notifiers.kinds() == ["push", "sms"]
        assert env.notifiers.sent[1][2] == t.fire_at_ms + 3_000
        assert env.row(t).status is Status.FIRED


async def test_an_acknowledgement_while_the_next_step_is_held_skips_it(
        env: Env, running: Running) -> None:
    t = await env.add(FIRE_IN_MS, plan=ESCALATE, callback_url="")
    async with running():
        await env.enqueue(t)
        await settle()
        await at(env, t.fire_at_ms)
        row = env.row(t)
        env.store.triggers[t.trigger_id] = replace(  # what POST …/ack writes
            row, acked_seq=row.occurrence_seq, revision=(row.revision or 0) + 1)
        await at(env, t.fire_at_ms + 3_000)
        assert env.notifiers.kinds() == ["push"]
        assert [s.status.value for s in env.row(t).channel_states] == ["DELIVERED", "SKIPPED"]
        assert env.row(t).status is Status.FIRED


async def test_a_dead_letter_is_listed_by_the_last_attempt(env: Env, running: Running) -> None:
    env.with_dispatch(retry_backoff_s=(1,), max_attempts=2)
    env.channel.results = [failed(), failed("HTTP 503", 503)]
    t = await env.add(FIRE_IN_MS)
    async with running():
        await fail_first_attempt(env, t)
        assert env.store.dead_letters == {}
        env.clock.set_ms(t.fire_at_ms + 1_000)
        await settle()
        assert [c.at_ms for c in env.channel.calls] == [t.fire_at_ms, t.fire_at_ms + 1_000]
        letter = env.store.dead_letters[t.occurrence_id]
        assert (letter.reason, letter.attempt_count, letter.dead_at_ms) == (
            DeadLetterReason.MAX_ATTEMPTS, 2, t.fire_at_ms + 1_000)
        attempts = await env.store.attempts(t.trigger_id, t.occurrence_id)
        assert [a.attempt for a in attempts] == [1, 2]
        assert env.row(t).status is Status.FAILED and env.queued(t) == []
