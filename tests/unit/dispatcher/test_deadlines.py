"""Deadlines in the dispatcher (core.deadlines), on a manual clock: an occurrence past its
deadline before the claim, or whose retry would start past it, is dead-lettered ``expired``
instead of sent; a one-time trigger ends FAILED, a series goes on to its next occurrence."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from tests.unit.dispatcher.fakes import CALLER, START_MS, Env, failed, settle
from trigger_service.core.dead_letters import DeadLetter, DeadLetterReason
from trigger_service.core.model import Status, Trigger
from trigger_service.core.time.catchup import CatchUp
from trigger_service.core.time.recurrence import Recurrence, RuleKind, parse_rule
from trigger_service.core.time.zones import load_zone

pytestmark = pytest.mark.timeout(10)
HOUR = 3_600_000
EXPIRED = f'occurrences_expired_total{{caller="{CALLER}"}}'
JITTERED_ID = "trg_01HF7YAT00CM52FQVQTBF9PFJQ"


def _hourly(first_ms: int) -> Recurrence:
    start = datetime.fromtimestamp(first_ms / 1000, UTC).replace(tzinfo=None)
    return Recurrence(RuleKind.RRULE, parse_rule(RuleKind.RRULE, "FREQ=HOURLY",
                                                 load_zone("UTC"), start),
                      "UTC", start, catch_up=CatchUp())


async def _series(env: Env, *, late_ms: int, **changes: object) -> Trigger:
    """An hourly series whose current (first) occurrence is ``late_ms`` late."""
    first = env.clock.now_ms() - late_ms
    t = await env.add(0)
    t = replace(t, fire_at_ms=first, schedule=_hourly(first), **changes)  # type: ignore[arg-type]
    env.store.triggers[t.trigger_id] = t
    return t


async def _handle(env: Env, t: Trigger) -> None:
    await env.dispatcher().handle(await env.receive_one(t))
    await settle()


def _letter(env: Env, t: Trigger, seq: int = 1) -> DeadLetter:
    return env.store.dead_letters[f"{t.trigger_id}.{seq}"]


async def test_a_one_time_trigger_past_its_lateness_is_failed_expired_not_sent(
        env: Env) -> None:
    """Its dispatcher was held (or its caller paused): a minute late, 30 s allowed."""
    t = await env.add(-60_000, max_lateness_s=30)
    await _handle(env, t)
    assert env.channel.calls == []
    row = env.row(t)
    assert row.status is Status.FAILED and row.claim_id is None
    assert row.last_error is not None and row.last_error.startswith(
        "expired: not sent within maxLatenessSeconds 30")
    letter = _letter(env, t)
    assert letter.reason is DeadLetterReason.EXPIRED and letter.attempt_count == 0
    assert [d.trigger_id for d in env.queue.dead_letters] == [t.trigger_id]
    assert env.count(EXPIRED) == 1 and env.count("occurrences_expired_total") == 1
    assert env.count('dead_lettered_total{reason="expired"}') == 1
    assert env.queued(t) == []  # its message is dealt with


async def test_a_late_trigger_within_its_lateness_is_sent(env: Env) -> None:
    t = await env.add(-29_000, max_lateness_s=30)
    await _handle(env, t)
    assert [c.trigger_id for c in env.channel.calls] == [t.trigger_id]
    assert env.row(t).status is Status.FIRED and env.count(EXPIRED) == 0


async def test_expires_at_passed_is_expired_whatever_the_lateness(env: Env) -> None:
    t = await env.add(-2_000, expires_at_ms=START_MS - 1, max_lateness_s=3600)
    await _handle(env, t)
    assert env.channel.calls == []
    row = env.row(t)
    assert row.status is Status.FAILED and row.last_error is not None
    assert row.last_error.startswith("expired: not sent by expiresAt")
    assert _letter(env, t).reason is DeadLetterReason.EXPIRED


async def test_a_retry_that_would_start_past_the_deadline_is_not_scheduled(env: Env) -> None:
    """A 503 at the fire time; the first backoff (10 s) is past the 5 s allowed."""
    env.channel.results = [failed("HTTP 503", 503)]
    t = await env.add(0, max_lateness_s=5)
    await _handle(env, t)
    assert len(env.channel.calls) == 1
    row = env.row(t)
    assert (row.status, row.attempts, row.next_attempt_at_ms) == (Status.FAILED, 1, None)
    assert row.last_error is not None and row.last_error.startswith("expired: ")
    assert row.last_error.endswith("; last attempt: HTTP 503")
    letter = _letter(env, t)
    assert letter.reason is DeadLetterReason.EXPIRED and letter.attempt_count == 1
    assert env.count(EXPIRED) == 1 and env.queued(t) == []


async def test_a_retry_within_the_deadline_is_scheduled(env: Env) -> None:
    env.channel.results = [failed("HTTP 503", 503)]
    t = await env.add(0, expires_at_ms=START_MS + 10_000)  # the retry starts at it: in time
    task = asyncio.create_task(env.dispatcher().handle(await env.receive_one(t)))
    await settle()
    row = env.row(t)
    assert (row.status, row.next_attempt_at_ms) == (Status.PENDING, START_MS + 10_000)
    assert env.count(EXPIRED) == 0 and env.store.dead_letters == {}
    env.clock.set_ms(START_MS + 10_000)
    await task  # held for it, and sent at the deadline
    assert [c.at_ms for c in env.channel.calls] == [START_MS, START_MS + 10_000]
    assert env.row(t).status is Status.FIRED


async def test_an_expired_occurrence_of_a_series_is_dead_lettered_and_the_series_goes_on(
        env: Env) -> None:
    t = await _series(env, late_ms=2 * 60_000, max_lateness_s=60)
    await _handle(env, t)
    assert env.channel.calls == []
    assert _letter(env, t, 1).reason is DeadLetterReason.EXPIRED
    row = env.row(t)
    assert row.status is Status.PENDING and row.occurrence_seq == 1
    assert row.fire_at_ms == t.fire_at_ms + HOUR and row.last_error is None
    assert env.count(EXPIRED) == 1
    # The next occurrence, on time, is sent.
    env.clock.set_ms(row.fire_at_ms)
    await _handle(env, row)
    assert [c.trigger_id for c in env.channel.calls] == [t.trigger_id]
    after = env.row(t)
    assert after.status is Status.PENDING and after.occurrences_fired == 1
    assert after.occurrence_seq == 2 and after.fire_at_ms == t.fire_at_ms + 2 * HOUR


async def test_a_series_retry_past_the_deadline_expires_that_occurrence_only(
        env: Env) -> None:
    env.channel.results = [failed("HTTP 503", 503)]
    t = await _series(env, late_ms=0, max_lateness_s=5)
    await _handle(env, t)
    row = env.row(t)
    assert _letter(env, t, 1).reason is DeadLetterReason.EXPIRED
    assert row.status is Status.PENDING and row.fire_at_ms == t.fire_at_ms + HOUR
    assert row.attempts == 0 and row.occurrence_seq == 1


async def test_a_series_ends_at_expires_at(env: Env) -> None:
    """Its occurrence at expiresAt fires; there is none after it: the series ends FIRED."""
    t = await _series(env, late_ms=0, expires_at_ms=START_MS + HOUR)
    await _handle(env, t)
    row = env.row(t)
    assert row.status is Status.PENDING and row.fire_at_ms == START_MS + HOUR
    env.clock.set_ms(row.fire_at_ms)
    await _handle(env, row)
    done = env.row(t)
    assert done.status is Status.FIRED and done.occurrences_fired == 2
    assert len(env.channel.calls) == 2 and env.count(EXPIRED) == 0


async def test_a_series_whose_last_occurrence_expired_ends_failed(env: Env) -> None:
    t = await _series(env, late_ms=2_000, expires_at_ms=START_MS - 1_000)
    await _handle(env, t)
    row = env.row(t)
    assert row.status is Status.FAILED and row.last_error is not None
    assert row.last_error.startswith("expired: not sent by expiresAt")
    assert _letter(env, t, 1).reason is DeadLetterReason.EXPIRED and env.channel.calls == []


async def test_lateness_counts_from_the_jittered_instant(env: Env) -> None:
    """Jittered up to an hour, 30 s allowed: sent 20 s after its jittered instant, which
    is well after the scheduled one plus 30 s."""
    added = await env.add(0)
    del env.store.triggers[added.trigger_id]
    # A fixed id: its first occurrence's offset is fixed (51 min 28.796 s).
    t = replace(added, trigger_id=JITTERED_ID, jitter_s=3600, max_lateness_s=30)
    t = t.jittered(START_MS - 20_000 - t.jitter_ms)  # its jittered instant: 20 s ago
    assert t.jitter_ms == 3_088_796 and t.fire_at_ms == START_MS - 20_000
    env.store.triggers[t.trigger_id] = t
    await _handle(env, t)
    assert [c.trigger_id for c in env.channel.calls] == [t.trigger_id]
    assert env.count(EXPIRED) == 0


async def test_a_retry_whose_message_comes_back_too_late_is_expired_with_its_error(
        env: Env) -> None:
    """The retry was scheduled in time, but its message came back after the deadline (a
    busy queue): expired at the claim, the last attempt's error kept."""
    t = await env.add(-20_000, attempts=1, last_error="HTTP 503",
                      next_attempt_at_ms=START_MS - 10_000, max_lateness_s=15)
    await _handle(env, t)
    assert env.channel.calls == []
    row = env.row(t)
    assert row.status is Status.FAILED and row.last_error is not None
    assert row.last_error.endswith("(fire time 2023-11-14T22:13:00.000Z, 20 s late); "
                                   "last attempt: HTTP 503")
    assert _letter(env, t).attempt_count == 1
