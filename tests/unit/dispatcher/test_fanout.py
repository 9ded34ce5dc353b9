"""Notification channels under the dispatcher's claim (dispatcher/fanout.py) on the fakes:
once per channel, per-channel retries and permanent failures, escalation with and without an
acknowledgement, a dispatcher dying between two channels."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import time

from tests.unit.dispatcher.fakes import START_MS, VISIBILITY_S, Env, settle
from trigger_service.core.dead_letters import AttemptOutcome, DeadLetterReason
from trigger_service.core.model import Status, Trigger
from trigger_service.core.notify.channels import (
    ChannelOutcome,
    EmailSpec,
    InboxSpec,
    PushSpec,
    SmsSpec,
)
from trigger_service.core.notify.plan import (
    DeliveryPlan,
    EscalationStep,
    QuietHours,
)
from trigger_service.core.time.timing import parse_rfc3339_ms

EMAIL = EmailSpec(("a@example.com",), "s", "t")
SMS = SmsSpec("+4915112345678", "t")
PUSH = PushSpec("tok", "t", "b")
INBOX = InboxSpec("user-1", "t", "b")
FOUR = DeliveryPlan((EMAIL, SMS, PUSH, INBOX))


async def run(env: Env, t: Trigger, rounds: int = 1) -> None:
    """Receive and handle what is visible, ``rounds`` times, moving the clock to the
    trigger's next due time in between, and while a later attempt is held by the
    dispatcher for its time (so nothing waits on the manual clock for long)."""
    d = env.dispatcher()
    for _ in range(rounds):
        env.clock.set_ms(max(env.clock.now_ms(), env.row(t).due_at_ms()))
        for m in await env.receive():
            task = asyncio.create_task(d.handle(m))
            for _ in range(20):
                await settle()
                if task.done():
                    break
                env.clock.set_ms(max(env.clock.now_ms(), env.row(t).due_at_ms()))
            await asyncio.wait_for(task, 5)
        if env.row(t).status.terminal:
            return


def statuses(t: Trigger) -> list[str]:
    return [s.status.value for s in t.channel_states]


async def test_four_channels_and_the_callback_are_each_sent_once(env: Env) -> None:
    t = await env.add(0, plan=FOUR)
    await env.enqueue(t)
    await run(env, t)
    row = env.row(t)
    assert sorted(env.notifiers.kinds()) == ["email", "inbox", "push", "sms"]
    assert len(env.channel.calls) == 1  # the callbackUrl, as the last channel
    assert row.status is Status.FIRED and statuses(row) == ["DELIVERED"] * 5
    assert [s.type for s in row.channel_states] == ["email", "sms", "push", "inbox", "http"]
    assert row.channel_states[1].provider_message_id == "sms-1"
    assert all(url and "/ack/" in url for *_, url in env.notifiers.sent)
    assert all(at == t.fire_at_ms for _, _, at, _ in env.notifiers.sent)  # never early


async def test_a_transient_provider_error_retries_only_that_channel(env: Env) -> None:
    env.with_dispatch(max_attempts=5)
    env.notifiers.results["sms"] = [ChannelOutcome(False, error="HTTP 503",
                                                   provider_code="503")] * 2
    t = await env.add(0, plan=FOUR, callback_url="")
    await env.enqueue(t)
    await run(env, t, rounds=6)
    row = env.row(t)
    assert env.notifiers.kinds().count("sms") == 3
    assert all(env.notifiers.kinds().count(k) == 1 for k in ("email", "push", "inbox"))
    assert row.status is Status.FIRED and row.channel_states[1].attempts == 3


async def test_a_permanent_failure_fails_that_channel_and_dead_letters(env: Env) -> None:
    env.notifiers.results["sms"] = [ChannelOutcome(False, permanent=True,
                                                   provider_code="21211",
                                                   error="invalid number")]
    t = await env.add(0, plan=FOUR, callback_url="")
    await env.enqueue(t)
    await run(env, t, rounds=3)
    row = env.row(t)
    assert env.notifiers.kinds().count("sms") == 1
    assert row.status is Status.FAILED and statuses(row) == [
        "DELIVERED", "FAILED", "DELIVERED", "DELIVERED"]
    letter = env.store.dead_letters[t.occurrence_id]
    assert letter.reason is DeadLetterReason.MAX_ATTEMPTS and "21211" in (letter.last_error
                                                                          or "")
    # Each send kept by its channel: the one given up on ``failed``, the others delivered.
    kept = {a.channel: a.outcome for a in env.store.recent_rings[t.trigger_id].values()}
    assert kept == {"email": AttemptOutcome.DELIVERED, "sms": AttemptOutcome.FAILED,
                    "push": AttemptOutcome.DELIVERED, "inbox": AttemptOutcome.DELIVERED}


ESCALATE = DeliveryPlan((PUSH, SMS), (EscalationStep(0, 0), EscalationStep(300, 1)))


async def test_escalation_not_acknowledged_sends_step_two_once(env: Env) -> None:
    t = await env.add(0, plan=ESCALATE, callback_url="")
    await env.enqueue(t)
    await run(env, t)
    row = env.row(t)
    assert env.notifiers.kinds() == ["push"] and row.status is Status.PENDING
    assert row.next_attempt_at_ms == t.fire_at_ms + 300_000
    await run(env, t, rounds=3)
    assert env.notifiers.kinds() == ["push", "sms"]
    assert env.notifiers.sent[1][2] == t.fire_at_ms + 300_000
    assert env.row(t).status is Status.FIRED


async def test_escalation_acknowledged_after_step_one_skips_step_two(env: Env) -> None:
    t = await env.add(0, plan=ESCALATE, callback_url="")
    await env.enqueue(t)
    await run(env, t)
    row = env.row(t)
    env.store.triggers[t.trigger_id] = replace(row, status=  # what POST …/ack writes
        Status.PENDING, acked_seq=row.occurrence_seq, revision=(row.revision or 0) + 1)
    await run(env, t, rounds=3)
    row = env.row(t)
    assert env.notifiers.kinds() == ["push"]
    assert row.status is Status.FIRED and statuses(row) == ["DELIVERED", "SKIPPED"]
    # The history says so: push sent, sms skipped (after it, with its own number).
    ring = env.store.recent_rings[t.trigger_id]
    kept = [ring[slot] for slot in sorted(ring)]
    assert [(a.channel, a.outcome, a.attempt) for a in kept] == [
        ("push", AttemptOutcome.DELIVERED, 1), ("sms", AttemptOutcome.SKIPPED, 1)]
    assert kept[1].error == "sms: not sent, the occurrence was acknowledged"


async def test_a_dispatcher_dying_between_two_channels_resends_only_the_other(env: Env) -> None:
    plan = DeliveryPlan((EMAIL, SMS))
    t = await env.add(0, plan=plan, callback_url="")
    await env.enqueue(t)

    class Killed(BaseException):
        pass

    def die_on_sms(kind: str) -> None:
        if kind == "sms":
            raise Killed  # the process dies while sending the SMS

    env.notifiers.on_send = die_on_sms
    d = env.dispatcher()
    [m] = await env.receive()
    try:
        await d.delivery.claim_and_deliver(m, env.row(t))
    except* Killed:
        pass
    env.notifiers.on_send = None
    row = env.row(t)
    assert row.status is Status.IN_FLIGHT and statuses(row)[0] == "DELIVERED"
    # The claim goes stale and the message shows up again: another dispatcher watches the
    # dead claim for its lease (the message in hand), then takes it over.
    env.clock.set_ms(max(row.claim_stale_at_ms(10_000), START_MS + VISIBILITY_S * 1000) + 1)
    other = env.dispatcher()
    for m in await env.receive():
        task = asyncio.create_task(other.handle(m))
        for _ in range(2_000):
            await asyncio.sleep(0)
            if task.done():
                break
            env.clock.advance_ms(20)
        await task
    assert env.notifiers.kinds() == ["email", "sms", "sms"]  # email once, sms again
    assert env.row(t).status is Status.FIRED
    assert env.count("claim_takeovers_total") == 1


def test_quiet_hours_defer_to_their_end_across_a_dst_night() -> None:
    quiet = QuietHours(time(22, 0), time(7, 0), "Europe/Berlin")
    # 23:30 CEST on the night summer time ends (2026-10-25 03:00 → 02:00): 07:00 is CET.
    at = parse_rfc3339_ms("2026-10-24T23:30:00+02:00")
    assert quiet.defer(at) == parse_rfc3339_ms("2026-10-25T07:00:00+01:00")
    assert quiet.defer(parse_rfc3339_ms("2026-10-24T21:59:00+02:00")) == parse_rfc3339_ms(
        "2026-10-24T21:59:00+02:00")
    # The spring night (02:00 → 03:00): an end at 02:30 does not exist, shifted to 03:30.
    gap = QuietHours(time(23, 0), time(2, 30), "Europe/Berlin")
    assert gap.defer(parse_rfc3339_ms("2026-03-29T01:00:00+01:00")) == parse_rfc3339_ms(
        "2026-03-29T03:30:00+02:00")


async def test_a_channel_inside_quiet_hours_is_deferred(env: Env) -> None:
    quiet = QuietHours(time(0, 0), time(23, 59), "UTC")  # START_MS is inside
    plan = DeliveryPlan((EMAIL, SMS), quiet_hours=None, channel_quiet_hours=((1, quiet),))
    t = await env.add(0, plan=plan, callback_url="")
    await env.enqueue(t)
    await run(env, t)
    row = env.row(t)
    assert env.notifiers.kinds() == ["email"] and statuses(row) == ["DELIVERED", "DEFERRED"]
    assert row.next_attempt_at_ms == quiet.defer(START_MS)
