"""The dispatcher's attempt history and dead letters (reasons, the index entry, the re-listing
of a FAILED row whose letter was lost) on the in-memory fakes."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from tests.unit.dispatcher.fakes import UNKNOWN_CALLER, Env, failed, settle
from trigger_service.core.dead_letters import DeadLetterReason, DeadLetterState
from trigger_service.core.errors import StoreError
from trigger_service.core.model import Status, Trigger
from trigger_service.core.ports.values import DeliveryResult


async def deliver_now(env: Env, t: Trigger) -> None:
    await env.dispatcher().handle(await env.receive_one(t))


async def test_every_attempt_is_recorded_with_its_answer(env: Env) -> None:
    env.with_dispatch(max_attempts=3)
    env.channel.results = [DeliveryResult(False, 503, "HTTP 503", None, "busy, try later")]
    t = await env.add(0)
    task = asyncio.create_task(env.dispatcher().handle(await env.receive_one(t)))
    await settle()
    env.clock.set_ms(env.row(t).due_at_ms())
    await task  # the retry, held by the dispatcher that failed the first attempt
    log = await env.store.attempts(t.trigger_id, t.occurrence_id)
    assert [(a.attempt, a.status_code, a.error, a.response_excerpt) for a in log] == [
        (1, 503, "HTTP 503", "busy, try later"), (2, 200, None, None)]
    assert log[0].started_at_ms == t.fire_at_ms and log[0].dispatcher
    assert env.row(t).status is Status.FIRED and env.store.dead_letters == {}


async def test_last_failure_lists_a_max_attempts_dead_letter(env: Env) -> None:
    env.with_dispatch(max_attempts=1)
    env.channel.results = [failed("HTTP 500", 500)]
    t = await env.add(0)
    await deliver_now(env, t)
    d = env.store.dead_letters[t.occurrence_id]
    assert (d.reason, d.attempt_count, d.last_error, d.state) == (
        DeadLetterReason.MAX_ATTEMPTS, 1, "HTTP 500", DeadLetterState.OPEN)
    assert (d.trigger_id, d.caller, d.fire_at_ms, d.callback_url) == (
        t.trigger_id, t.caller, t.fire_at_ms, t.callback_url)


async def test_410_dead_letters_at_once_as_gone(env: Env) -> None:
    env.with_dispatch(max_attempts=5)
    env.channel.results = [failed("HTTP 410", 410)]
    t = await env.add(0)
    await deliver_now(env, t)
    assert env.row(t).status is Status.FAILED and len(env.channel.calls) == 1
    assert env.store.dead_letters[t.occurrence_id].reason is DeadLetterReason.GONE
    assert env.count('dead_lettered_total{reason="gone"}') == 1


async def test_a_caller_removed_from_the_callers_file_is_not_delivered(env: Env) -> None:
    t = await env.add(0, caller=UNKNOWN_CALLER)
    await deliver_now(env, t)
    assert env.channel.calls == []  # nothing was sent
    assert env.row(t).status is Status.FAILED
    d = env.store.dead_letters[t.occurrence_id]
    assert d.reason is DeadLetterReason.CALLBACK_NOT_ALLOWED
    [a] = await env.store.attempts(t.trigger_id, t.occurrence_id)
    assert a.status_code is None and a.error and "not allowed" in a.error


async def test_a_url_no_longer_allowed_is_not_delivered(env: Env) -> None:
    t = await env.add(0, callback_url="https://elsewhere.example/hook")
    await deliver_now(env, t)
    assert env.channel.calls == []
    reason = env.store.dead_letters[t.occurrence_id].reason
    assert reason is DeadLetterReason.CALLBACK_NOT_ALLOWED


async def test_a_failed_row_whose_letter_was_lost_is_listed_when_its_message_returns(
        env: Env) -> None:
    env.with_dispatch(max_attempts=1)
    env.channel.results = [failed()]
    t = await env.add(0)
    await env.enqueue(t)
    env.store.failures["put_dead_letter"] = StoreError("down")
    d = env.dispatcher()
    await d.run_once()
    await d.drain()
    assert env.row(t).status is Status.FAILED and env.store.dead_letters == {}
    del env.store.failures["put_dead_letter"]
    env.clock.advance_ms(60_000)  # the message comes back
    await d.run_once()
    await d.drain()
    letter = env.store.dead_letters[t.occurrence_id]
    assert letter.reason is DeadLetterReason.MAX_ATTEMPTS and letter.attempt_count == 1


async def test_a_purged_letter_is_not_listed_again_by_a_late_copy(env: Env) -> None:
    env.with_dispatch(max_attempts=1)
    env.channel.results = [failed()]
    t = await env.add(0)
    await env.enqueue(t, copies=2)
    d = env.dispatcher()
    [first, second] = await env.receive()
    await d.handle(first)
    letter = env.store.dead_letters[t.occurrence_id]
    await env.store.resolve_dead_letter(replace(letter, state=DeadLetterState.PURGED), 60)
    await d.handle(second)  # a redundant copy comes back to the FAILED row
    assert env.store.dead_letters[t.occurrence_id].state is DeadLetterState.PURGED


def recent(env: Env, t: Trigger) -> list[tuple[int, str, str]]:
    """``t``'s kept attempts, newest first: (attempt, channel, outcome)."""
    ring = env.store.recent_rings.get(t.trigger_id, {}).values()
    return [(a.attempt, a.channel, a.outcome.value if a.outcome else "")
            for a in sorted(ring, key=lambda a: (a.started_at_ms, a.attempt), reverse=True)]


async def test_each_attempt_is_kept_with_what_became_of_its_occurrence(env: Env) -> None:
    env.with_dispatch(max_attempts=3)
    env.channel.results = [failed("HTTP 503", 503)]
    t = await env.add(0)
    task = asyncio.create_task(env.dispatcher().handle(await env.receive_one(t)))
    await settle()
    env.clock.set_ms(env.row(t).due_at_ms())
    await task
    assert recent(env, t) == [(2, "webhook", "delivered"), (1, "webhook", "retry")]


async def test_the_last_failure_is_kept_as_dead_lettered(env: Env) -> None:
    env.with_dispatch(max_attempts=1)
    env.channel.results = [failed("HTTP 500", 500)]
    t = await env.add(0)
    await deliver_now(env, t)
    assert recent(env, t) == [(1, "webhook", "dead_lettered")]
    assert env.store.dead_letters[t.occurrence_id].reason is DeadLetterReason.MAX_ATTEMPTS
