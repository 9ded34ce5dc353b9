"""Delivery: the claim LWT, the outcome (FIRED, retry, FAILED + DLQ), takeovers, circuit
breakers and bulkheads. Driven through ``Dispatcher.handle`` or ``Delivery`` directly."""

from __future__ import annotations

import asyncio

import pytest

from dispatcher.claiming import NotNow
from dispatcher.finishing import NextAttempt
from tests.unit.dispatcher.fakes import (
    CALLER,
    CLAIM_LEAD_MS,
    ENQUEUE_LEAD_S,
    OTHER_CALLER,
    START_MS,
    VISIBILITY_S,
    Env,
    breaker_of,
    failed,
    make_callers,
    settle,
)
from trigger_service.adapters.memory.queue import QueuedDeadLetter
from trigger_service.core.errors import QueueError, StoreError
from trigger_service.core.model import Status, Trigger

# A regression that leaves a task waiting on the ManualClock would otherwise hang.
pytestmark = pytest.mark.timeout(10)

RECEIVE_VISIBLE_AT = START_MS + VISIBILITY_S * 1000
FAILED_ATTEMPTS = 'deliveries_total{outcome="failed_attempt"}'
CALLBACK_TIMEOUT_MS = 10_000


async def deliver_now(env: Env, t: Trigger) -> None:
    """Receive ``t``'s message and handle it (``t`` is due: no clock movement needed; a retry
    must be due past the dispatcher's hold, or this waits for it)."""
    await env.dispatcher().handle(await env.receive_one(t))


async def attempt_now(env: Env, t: Trigger) -> Trigger | NextAttempt | None:
    """Receive ``t``'s message and make one attempt through ``Delivery`` (``t`` is due): a
    retry is answered, not held."""
    outcome = await env.delivery().claim_and_deliver(await env.receive_one(t), t)
    assert not isinstance(outcome, NotNow)
    return outcome


def usurp(env: Env) -> None:
    """While delivering, another dispatcher takes the claim over (a new claim id)."""
    def take_over(t: Trigger) -> None:
        env.set_row(t, Status.IN_FLIGHT, claim_id="usurper", attempts=t.attempts + 1)
    env.channel.on_deliver = take_over


# --- failed attempts --------------------------------------------------------------------------
async def test_failure_with_attempts_left_schedules_a_retry(env: Env) -> None:
    env.channel.results = [failed("HTTP 503", 503)]
    t = await env.add(0)
    outcome = await attempt_now(env, t)
    row = env.row(t)
    assert outcome == NextAttempt(row)  # for the dispatcher to hold or put back
    assert (row.status, row.attempts, row.claim_id) == (Status.PENDING, 1, None)
    assert row.next_attempt_at_ms == START_MS + 10_000 and row.last_error == "HTTP 503"
    assert env.queued(t) == [RECEIVE_VISIBLE_AT]  # left hidden as it was received
    assert env.count(FAILED_ATTEMPTS) == 1 and env.fired_count() == 0
    assert env.queue.dead_letters == []


@pytest.mark.parametrize(("prior_attempts", "backoff_s"), [(1, 30), (2, 120), (4, 1800), (7, 1800)])
async def test_retry_backoff_follows_the_schedule_and_repeats_its_last_value(
    env: Env, prior_attempts: int, backoff_s: int
) -> None:
    env.with_dispatch(max_attempts=10)
    env.channel.results = [failed()]
    t = await env.add(-60_000, attempts=prior_attempts, next_attempt_at_ms=START_MS)
    await deliver_now(env, t)
    assert env.channel.calls[0].attempt == prior_attempts + 1
    row = env.row(t)
    assert row.attempts == prior_attempts + 1
    assert row.next_attempt_at_ms == START_MS + backoff_s * 1000
    assert env.queued(t) == [START_MS + (backoff_s - ENQUEUE_LEAD_S) * 1000]


async def test_a_backoff_shorter_than_the_enqueue_lead_is_held_not_shown_again(
        env: Env) -> None:
    env.with_dispatch(retry_backoff_s=(2,))
    env.channel.results = [failed()]
    t = await env.add(0)
    task = asyncio.create_task(env.dispatcher().handle(await env.receive_one(t)))
    await settle()
    assert env.row(t).next_attempt_at_ms == START_MS + 2_000
    assert env.queued(t) == [RECEIVE_VISIBLE_AT] and not task.done()
    env.clock.set_ms(START_MS + 2_000)
    await task
    assert [c.at_ms for c in env.channel.calls] == [START_MS, START_MS + 2_000]


async def test_failed_attempt_is_retried_at_its_next_attempt_time(env: Env) -> None:
    env.channel.results = [failed("HTTP 503", 503)]
    t = await env.add(0)
    await env.enqueue(t)
    d = env.dispatcher()
    assert await d.run_once() == 1
    await settle()
    retry_at = START_MS + 10_000
    assert env.row(t).next_attempt_at_ms == retry_at and d.inflight == 1  # held here
    env.clock.set_ms(retry_at - CLAIM_LEAD_MS - 1)
    assert await d.run_once() == 0  # hidden meanwhile
    await settle()
    assert len(env.channel.calls) == 1 and env.row(t).status is Status.PENDING
    env.clock.set_ms(retry_at - 1)
    await settle()
    assert len(env.channel.calls) == 1  # claimed, never sent early
    env.clock.set_ms(retry_at)
    await d.drain()
    assert [(c.attempt, c.at_ms) for c in env.channel.calls] == [(1, START_MS), (2, retry_at)]
    row = env.row(t)
    assert (row.status, row.attempts, row.last_error) == (Status.FIRED, 2, None)
    assert env.queued(t) == []


@pytest.mark.parametrize(("error", "reason"), [
    ("timeout after 10s", "timeout after 10s"), (None, "failed")])
async def test_last_attempt_failure_marks_failed_and_dead_letters(
    env: Env, error: str | None, reason: str
) -> None:
    env.with_dispatch(max_attempts=3)
    env.channel.results = [failed(error, None)]
    t = await env.add(-30_000, attempts=2, next_attempt_at_ms=START_MS)
    await deliver_now(env, t)
    row = env.row(t)
    assert (row.status, row.attempts, row.last_error) == (Status.FAILED, 3, error)
    assert row.claim_id is None and row.next_attempt_at_ms is None
    assert env.queue.dead_letters == [QueuedDeadLetter(t.trigger_id, t.fire_at_ms, reason)]
    assert env.count('dead_lettered_total{reason="max_attempts"}') == 1
    assert env.count(FAILED_ATTEMPTS) == 1
    assert env.queued(t) == []


async def test_dead_letter_survives_a_failed_dead_letter_send(env: Env) -> None:
    """FAILED is written first; if the dead-letter send then fails the message is kept, and
    when it comes back to the FAILED trigger the dead letter is sent again."""
    env.with_dispatch(max_attempts=1)
    env.channel.results = [failed()]
    t = await env.add(0)
    await env.enqueue(t)
    env.queue.failures["send_dead_letter"] = QueueError("sqs down")
    d = env.dispatcher()
    assert await d.run_once() == 1
    await d.drain()
    assert env.row(t).status is Status.FAILED
    del env.queue.failures["send_dead_letter"]
    env.clock.set_ms(RECEIVE_VISIBLE_AT)
    assert await d.run_once() == 1
    await d.drain()
    assert env.queue.dead_letters == [QueuedDeadLetter(t.trigger_id, t.fire_at_ms, "HTTP 500")]


# --- lost claims ------------------------------------------------------------------------------
async def test_claim_lost_to_another_dispatcher_hides_this_copy_until_the_claim_is_stale(
    env: Env,
) -> None:
    """The copy may be the winner's only one: deleting it would leave a dead winner's trigger
    to the reconciler. It comes back once the winner's claim would be stale."""
    t = await env.add(0)
    m = await env.receive_one(t)
    env.set_row(t, Status.IN_FLIGHT, claim_id="other", claimed_at_ms=START_MS, attempts=1)
    assert await env.delivery().claim_and_deliver(m, t) is None
    stale_at = env.row(t).claim_stale_at_ms(CALLBACK_TIMEOUT_MS)
    [visible_at] = env.queued(t)
    assert stale_at < visible_at <= stale_at + 1000
    assert env.channel.calls == [] and env.row(t).claim_id == "other"
    assert env.count("duplicate_messages_total") == 0  # counted when it is dropped later


async def test_a_hidden_losing_copy_is_dropped_as_a_duplicate_once_the_winner_fired(
    env: Env,
) -> None:
    t = await env.add(0)
    m = await env.receive_one(t)
    env.set_row(t, Status.IN_FLIGHT, claim_id="other", claimed_at_ms=START_MS, attempts=1)
    assert await env.delivery().claim_and_deliver(m, t) is None
    env.set_row(t, Status.FIRED, claim_id=None, attempts=1)
    env.clock.set_ms(max(env.queued(t)))
    [again] = await env.receive()
    assert again.message_id == m.message_id
    await env.dispatcher().handle(again)
    assert env.queued(t) == [] and env.count("duplicate_messages_total") == 1


async def test_claim_lost_to_a_state_change_returns_the_current_trigger(env: Env) -> None:
    t = await env.add(0)
    m = await env.receive_one(t)
    current = env.set_row(t, Status.PENDING, attempts=1, next_attempt_at_ms=START_MS + 10_000,
                          last_error="HTTP 500")
    assert await env.delivery().claim_and_deliver(m, t) == current
    assert env.queued(t) == [RECEIVE_VISIBLE_AT] and env.channel.calls == []
    assert env.count("duplicate_messages_total") == 0


async def test_claim_taken_over_during_delivery_counts_a_duplicate_delivery(env: Env) -> None:
    usurp(env)
    t = await env.add(0)
    await deliver_now(env, t)
    row = env.row(t)
    assert (row.status, row.claim_id) == (Status.IN_FLIGHT, "usurper")  # theirs stays
    assert env.count("duplicate_deliveries_total") == 1 and env.fired_count() == 1
    assert env.queued(t) == []


async def test_retry_is_not_recorded_when_the_claim_was_taken_over(env: Env) -> None:
    usurp(env)
    env.channel.results = [failed()]
    t = await env.add(0)
    await deliver_now(env, t)
    assert env.row(t).claim_id == "usurper" and env.row(t).next_attempt_at_ms is None
    assert env.queued(t) == [RECEIVE_VISIBLE_AT]  # neither hidden for a backoff nor deleted
    assert env.count(FAILED_ATTEMPTS) == 1


async def test_final_failure_is_not_dead_lettered_when_the_claim_was_taken_over(
    env: Env,
) -> None:
    env.with_dispatch(max_attempts=1)
    usurp(env)
    env.channel.results = [failed()]
    t = await env.add(0)
    await deliver_now(env, t)
    assert env.row(t).status is Status.IN_FLIGHT
    assert env.queue.dead_letters == [] and env.count("dead_lettered_total") == 0
    assert env.queued(t) == []


# --- claims in flight -------------------------------------------------------------------------
# A claim written before leases were: the longest such a claim was (the maximum claim
# lead, a callback timeout and the slack).
LEGACY_LEASE_MS = 15_000 + CALLBACK_TIMEOUT_MS + 2_000
TAKEOVER_MARGIN_MS = 1_000


async def _watch_until(env: Env, task: asyncio.Task[None], end_ms: int) -> None:
    """Move the clock to just before ``end_ms`` (nothing sent yet), then to it; ``task``
    then ends."""
    for _ in range(20):
        await asyncio.sleep(0)
    env.clock.set_ms(end_ms - 1)
    for _ in range(20):
        await asyncio.sleep(0)
    assert env.channel.calls == [] and not task.done()
    env.clock.set_ms(end_ms)
    for _ in range(500):  # the outcome's write may wait a little for company
        await asyncio.sleep(0)
        if task.done():
            break
        env.clock.advance_ms(10)
    await task


async def test_a_claim_is_taken_over_after_this_dispatcher_watched_it_for_its_lease(
        env: Env) -> None:
    """Stale by the wall clock long ago, but first seen now: the message is kept in hand
    while the claim is watched for its lease (deferred to SQS, it could come back to
    another dispatcher, whose watch would start over), then the unchanged claim is taken
    over."""
    t = await env.add(-20_000, status=Status.IN_FLIGHT, attempts=1, claim_id="dead",
                      claimed_at_ms=START_MS - 21_000, claim_lease_ms=12_000)
    d = env.dispatcher()
    task = asyncio.create_task(d.handle(await env.receive_one(t)))
    end_ms = START_MS + 12_000 + TAKEOVER_MARGIN_MS
    await _watch_until(env, task, end_ms)
    (call,) = env.channel.calls
    assert (call.trigger_id, call.attempt, call.claim_id) == (t.trigger_id, 2, "claim-1")
    assert end_ms <= call.at_ms <= end_ms + 100
    assert env.count("claim_takeovers_total") == 1
    row = env.row(t)
    assert (row.status, row.attempts) == (Status.FIRED, 2)


async def test_a_claim_without_a_lease_is_watched_for_the_longest_claim(env: Env) -> None:
    t = await env.add(-1_000, status=Status.IN_FLIGHT, attempts=1, claim_id="busy",
                      claimed_at_ms=START_MS - 2_000)
    task = asyncio.create_task(env.dispatcher().handle(await env.receive_one(t)))
    await _watch_until(env, task, START_MS + LEGACY_LEASE_MS + TAKEOVER_MARGIN_MS)
    assert env.count("claim_takeovers_total") == 1


async def test_a_new_claim_id_restarts_the_watch(env: Env) -> None:
    """The claimer renewed (or someone else took the claim) while it was watched: the new
    claim is watched for its own lease from when it was first seen."""
    t = await env.add(-5_000, status=Status.IN_FLIGHT, attempts=1, claim_id="first",
                      claimed_at_ms=START_MS - 60_000, claim_lease_ms=4_000)
    d = env.dispatcher()
    task = asyncio.create_task(d.handle(await env.receive_one(t)))
    for _ in range(20):  # its first sighting, at the start
        await asyncio.sleep(0)
    env.clock.set_ms(START_MS + 1_000)
    env.set_row(t, Status.IN_FLIGHT, claim_id="renewed")
    first_end_ms = START_MS + 4_000 + TAKEOVER_MARGIN_MS
    env.clock.set_ms(first_end_ms)  # the first watch ends: the row has a new claim
    for _ in range(20):
        await asyncio.sleep(0)
    assert env.channel.calls == [] and env.row(t).claim_id == "renewed"
    await _watch_until(env, task, first_end_ms + 4_000 + TAKEOVER_MARGIN_MS)
    assert env.channel.ids() == [t.trigger_id] and env.row(t).status is Status.FIRED


@pytest.mark.parametrize(("wait_ms", "renewed"), [(10_000, False), (10_001, True)])
async def test_a_send_kept_waiting_gets_what_is_left_of_its_claim_or_renews_it(
        env: Env, wait_ms: int, renewed: bool) -> None:
    """Both are claimed at the fire time; the second waits for the bulkhead behind a slow
    receiver. Its lease ends 12 s after its claim (a callback timeout and a 2 s slack); the
    send is given what is left, or, with less than 2 s left, the claim is renewed (a new
    claim id and lease) and the send gets the whole timeout."""
    env.callers = make_callers(orders_max_concurrency=1)
    gate = env.channel.gate = asyncio.Event()
    a, b = await env.add(2_000), await env.add(2_000)
    await env.enqueue(a, b)
    d = env.dispatcher()
    tasks = [asyncio.create_task(d.handle(m)) for m in await env.receive()]
    await settle()
    env.clock.set_ms(a.fire_at_ms)
    await settle()
    assert len(env.channel.calls) == 1  # the other waits for the bulkhead
    waiting = next(t for t in (a, b) if t.trigger_id != env.channel.calls[0].trigger_id)
    assert env.row(waiting).claimed_at_ms == a.fire_at_ms  # claimed ahead all the same
    env.clock.advance_ms(wait_ms)  # a slow receiver, still inside the callback timeout
    gate.set()
    await asyncio.gather(*tasks)
    second = env.channel.calls[1]
    assert second.trigger_id == waiting.trigger_id
    if renewed:
        assert env.channel.timeouts[1] is None  # the whole callback timeout
        assert second.claim_id != "claim-2" and env.count("claim_renewals_total") == 1
    else:
        assert env.channel.timeouts[1] == 2.0 and second.claim_id == "claim-2"
        assert env.count("claim_renewals_total") == 0
    assert env.row(waiting).status is Status.FIRED


# --- circuit breaker --------------------------------------------------------------------------
async def test_open_circuit_defers_without_spending_an_attempt(env: Env) -> None:
    # Retries due past the hold, back on the queue: each handle() ends.
    env.with_dispatch(breaker_fail_max=2, breaker_reset_s=60, retry_backoff_s=(60,))
    env.channel.results = [failed(), failed()]
    d = env.dispatcher()  # one dispatcher: breakers live in its Delivery
    for _ in range(2):
        await d.handle(await env.receive_one(await env.add(0)))
    t = await env.add(0)
    await d.handle(await env.receive_one(t))
    assert len(env.channel.calls) == 2
    assert env.count("circuit_open_deferrals_total") == 1
    assert env.row(t) == t  # still PENDING with 0 attempts
    assert env.queued(t) == [START_MS + 60_000]  # back when the circuit may half-open
    other = await env.add(0, caller=OTHER_CALLER)
    await d.handle(await env.receive_one(other))  # another origin's circuit is its own
    assert env.row(other).status is Status.FIRED


async def test_half_open_circuit_lets_one_trial_through(env: Env) -> None:
    env.with_dispatch(breaker_fail_max=1, breaker_reset_s=10)
    d = env.dispatcher()
    breaker_of(d.delivery).record_failure()  # opened at START_MS
    env.clock.set_ms(START_MS + 10_000)
    gate = env.channel.gate = asyncio.Event()
    trial, waiting = await env.add(0), await env.add(0)
    trial_task = asyncio.create_task(d.handle(await env.receive_one(trial)))
    await settle()
    assert env.channel.ids() == [trial.trigger_id]
    await d.handle(await env.receive_one(waiting))
    assert env.count("circuit_open_deferrals_total") == 1 and env.row(waiting) == waiting
    assert env.queued(waiting) == [env.clock.now_ms() + 1_000]
    gate.set()
    await trial_task
    assert env.row(trial).status is Status.FIRED
    later = await env.add(0)
    await d.handle(await env.receive_one(later))  # the successful trial closed the circuit
    assert env.row(later).status is Status.FIRED


async def test_failed_trial_opens_the_circuit_again(env: Env) -> None:
    env.with_dispatch(breaker_fail_max=1, breaker_reset_s=10, retry_backoff_s=(60,))
    d = env.dispatcher()
    breaker_of(d.delivery).record_failure()
    env.clock.set_ms(START_MS + 10_000)
    env.channel.results = [failed()]
    trial = await env.add(0)
    await d.handle(await env.receive_one(trial))
    assert env.row(trial).attempts == 1 and env.row(trial).status is Status.PENDING
    t = await env.add(0)
    await d.handle(await env.receive_one(t))
    assert env.row(t) == t and len(env.channel.calls) == 1
    assert env.queued(t) == [env.clock.now_ms() + 10_000]  # a full reset period again


@pytest.mark.parametrize("failure", ["store_error", "lost_claim"])
async def test_claim_that_sends_nothing_gives_back_the_half_open_trial(
    env: Env, failure: str
) -> None:
    env.with_dispatch(breaker_fail_max=1, breaker_reset_s=10)
    delivery = env.delivery()
    breaker_of(delivery).record_failure()
    env.clock.set_ms(START_MS + 10_000)
    t = await env.add(0)
    m = await env.receive_one(t)
    if failure == "store_error":
        env.store.failures["compare_and_set"] = StoreError("timeout")
        with pytest.raises(StoreError):
            await delivery.claim_and_deliver(m, t)
        assert env.queued(t) == [env.clock.now_ms() + VISIBILITY_S * 1000]
    else:
        env.set_row(t, Status.IN_FLIGHT, claim_id="other", claimed_at_ms=START_MS, attempts=1)
        assert await delivery.claim_and_deliver(m, t) is None
    assert env.channel.calls == []
    assert breaker_of(delivery).try_acquire() == 0  # the trial slot is free again


async def test_deferred_message_comes_back_no_earlier_than_the_half_open_time(env: Env) -> None:
    env.with_dispatch(breaker_fail_max=1, breaker_reset_s=30)
    d = env.dispatcher()
    breaker_of(d.delivery).record_failure()  # opened at START_MS: half-open at +30 s
    env.clock.set_ms(START_MS + 500)
    t = await env.add(0)
    await d.handle(await env.receive_one(t))
    assert env.count("circuit_open_deferrals_total") == 1
    [visible_at] = env.queued(t)
    assert visible_at >= START_MS + 30_000


# --- bulkheads --------------------------------------------------------------------------------
async def test_bulkhead_limits_concurrent_deliveries_per_caller(env: Env) -> None:
    env.callers = make_callers(orders_max_concurrency=2)
    gate = env.channel.gate = asyncio.Event()
    orders = [await env.add(0) for _ in range(5)]
    billing = await env.add(0, caller=OTHER_CALLER)
    await env.enqueue(*orders, billing)
    d = env.dispatcher()
    tasks = [asyncio.create_task(d.handle(m)) for m in await env.receive()]
    await settle()
    assert env.channel.active == {CALLER: 2, OTHER_CALLER: 1}  # billing is not held up
    # The bulkhead bounds the sends, not the claims: all are claimed ahead, 2 are sent.
    assert [env.row(t).status for t in orders] == [Status.IN_FLIGHT] * 5
    assert len(env.channel.calls) == 3
    gate.set()
    await asyncio.gather(*tasks)
    assert env.channel.max_active[CALLER] == 2
    assert all(env.row(t).status is Status.FIRED for t in [*orders, billing])


async def test_caller_without_a_limit_gets_the_default_bulkhead(env: Env) -> None:
    caller = CALLER
    env.with_dispatch(default_max_concurrency=3)
    gate = env.channel.gate = asyncio.Event()
    await env.enqueue(*[await env.add(0, caller=caller) for _ in range(5)])
    d = env.dispatcher()
    tasks = [asyncio.create_task(d.handle(m)) for m in await env.receive()]
    await settle()
    assert env.channel.active == {caller: 3}
    gate.set()
    await asyncio.gather(*tasks)
    assert len(env.channel.calls) == 5 and env.channel.max_active == {caller: 3}


# --- deleting the message ---------------------------------------------------------------------
async def test_delete_failure_after_fired_is_swallowed(env: Env) -> None:
    t = await env.add(0)
    env.queue.failures["delete"] = QueueError("sqs down")
    await deliver_now(env, t)
    assert env.row(t).status is Status.FIRED
    assert env.queued(t) == [RECEIVE_VISIBLE_AT]
    del env.queue.failures["delete"]
    env.clock.set_ms(RECEIVE_VISIBLE_AT)
    await env.dispatcher().handle(await env.receive_one())  # the copy is back: a duplicate
    assert env.queued(t) == [] and len(env.channel.calls) == 1
    assert env.count("duplicate_messages_total") == 1


async def test_delete_failure_after_final_failure_is_swallowed(env: Env) -> None:
    env.with_dispatch(max_attempts=1)
    env.channel.results = [failed()]
    t = await env.add(0)
    env.queue.failures["delete"] = QueueError("sqs down")
    await deliver_now(env, t)
    assert env.row(t).status is Status.FAILED
    assert env.queue.dead_letters == [QueuedDeadLetter(t.trigger_id, t.fire_at_ms, "HTTP 500")]
    assert env.queued(t) == [RECEIVE_VISIBLE_AT]
