"""What the dispatcher screens out before a claim: PAUSED triggers, triggers of a paused
caller, and a series' late occurrences passed over by its catch-up policy."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest

from dispatcher.screening import PAUSED_CALLERS_REFRESH_MS, SERIES_ENDED, PausedCallers
from tests.unit.dispatcher.fakes import CALLER, OTHER_CALLER, Env, settle
from trigger_service.adapters.memory.pauses import MemoryCallerPauses
from trigger_service.core.errors import StoreError
from trigger_service.core.model import Status, Trigger
from trigger_service.core.time.catchup import CatchUp, CatchUpPolicy
from trigger_service.core.time.recurrence import Recurrence, RuleKind, parse_rule
from trigger_service.core.time.zones import load_zone

pytestmark = pytest.mark.timeout(10)
HOUR = 3_600_000


def _hourly(first_ms: int, catch_up: CatchUp, count: int | None = None) -> Recurrence:
    start = datetime.fromtimestamp(first_ms / 1000, UTC).replace(tzinfo=None)
    rule = "FREQ=HOURLY" + (f";COUNT={count}" if count else "")
    return Recurrence(RuleKind.RRULE, parse_rule(RuleKind.RRULE, rule, load_zone("UTC"), start),
                      "UTC", start, catch_up=catch_up)


def _skipped(env: Env) -> int:
    return sum(v for k, v in env.metrics.snapshot().items()
               if k.startswith("occurrences_skipped_total"))


async def test_a_message_for_a_paused_trigger_is_dropped(env: Env) -> None:
    t = await env.add(0, status=Status.PAUSED)
    await env.dispatcher().handle(await env.receive_one(t))
    assert env.channel.calls == [] and env.row(t).status is Status.PAUSED
    assert await env.receive() == []  # deleted, not hidden


async def test_a_due_trigger_of_a_paused_caller_is_paused_not_delivered(env: Env) -> None:
    pauses = MemoryCallerPauses()
    await pauses.pause_caller(CALLER, env.clock.now_ms())
    mine, other = await env.add(0), await env.add(0, caller=OTHER_CALLER)
    d = env.dispatcher_with(pauses=pauses)
    await d.handle(await env.receive_one(mine))
    await d.handle(await env.receive_one(other))
    assert env.row(mine).status is Status.PAUSED
    assert env.row(other).status is Status.FIRED
    assert [c.trigger_id for c in env.channel.calls] == [other.trigger_id]


async def test_the_paused_callers_are_read_at_most_once_a_refresh(env: Env) -> None:
    pauses = MemoryCallerPauses()
    cache = PausedCallers(pauses, env.clock)
    assert not await cache.is_paused(CALLER)
    await pauses.pause_caller(CALLER, env.clock.now_ms())
    env.clock.advance_ms(PAUSED_CALLERS_REFRESH_MS - 1)
    assert not await cache.is_paused(CALLER) and pauses.pause_reads == 1
    env.clock.advance_ms(1)
    assert await cache.is_paused(CALLER) and pauses.pause_reads == 2


async def test_a_failed_read_keeps_the_last_answer(env: Env) -> None:
    class Down(MemoryCallerPauses):
        async def paused_callers(self) -> dict[str, int]:
            raise StoreError("cassandra down")

    pauses = Down()
    cache = PausedCallers(pauses, env.clock)
    cache._paused = frozenset({CALLER})  # as read before the outage
    env.clock.advance_ms(PAUSED_CALLERS_REFRESH_MS)
    assert await cache.is_paused(CALLER)


async def _late_series(env: Env, policy: CatchUpPolicy, *, late_ms: int,
                       window_s: int = 86_400, count: int | None = None) -> Trigger:
    """A series whose current occurrence is ``late_ms`` late (an outage)."""
    first = env.clock.now_ms() - late_ms
    t = await env.add(0)
    t = replace(t, fire_at_ms=first, schedule=_hourly(first, CatchUp(policy, window_s), count))
    env.store.triggers[t.trigger_id] = t
    return t


@pytest.mark.parametrize(("policy", "fired", "skipped"),
                         [(CatchUpPolicy.ALL, 3, 0), (CatchUpPolicy.LATEST, 1, 2),
                          (CatchUpPolicy.NONE, 0, 3)])
async def test_a_late_occurrence_after_an_outage(env: Env, policy: CatchUpPolicy,
                                                 fired: int, skipped: int) -> None:
    """Three occurrences missed (0, 1, 2 hours late by 2.5 h, 1.5 h, 0.5 h): ``all`` fires
    them in a row, ``latest`` only the last, ``none`` none; each then waits for 3 h."""
    t = await _late_series(env, policy, late_ms=2 * HOUR + 30 * 60_000)
    first = t.fire_at_ms
    d = env.dispatcher()
    await d.handle(await env.receive_one(t))
    for _ in range(5):  # the message passed on to the next occurrence due now, if any
        got = await env.receive()
        if not got:
            break
        await d.handle(got[0])
        await settle()
    assert len(env.channel.calls) == fired
    row = env.row(t)
    assert (row.fire_at_ms - first) // HOUR == 3 and row.status is Status.PENDING
    assert row.occurrence_seq == fired  # skipped ones are not counted
    assert _skipped(env) == skipped


async def test_an_occurrence_older_than_the_window_never_fires(env: Env) -> None:
    t = await _late_series(env, CatchUpPolicy.ALL, late_ms=2 * HOUR + 30 * 60_000,
                           window_s=3_600)
    await env.dispatcher().handle(await env.receive_one(t))
    # 0 and 1 h are more than an hour late: the series moves to 2 h (late, in the window).
    assert (env.row(t).fire_at_ms - t.fire_at_ms) // HOUR == 2
    assert env.channel.calls == []
    assert env.metrics.snapshot()['occurrences_skipped_total{reason="window"}'] == 2


async def test_a_series_whose_last_occurrences_were_missed_ends_cancelled(env: Env) -> None:
    t = await _late_series(env, CatchUpPolicy.NONE, late_ms=2 * HOUR + 30 * 60_000, count=3)
    await env.dispatcher().handle(await env.receive_one(t))
    row = env.row(t)
    assert row.status is Status.CANCELLED and row.last_error == SERIES_ENDED
    assert env.channel.calls == []


async def test_a_retry_of_a_late_occurrence_is_not_passed_over(env: Env) -> None:
    t = await _late_series(env, CatchUpPolicy.NONE, late_ms=2 * HOUR + 30 * 60_000)
    env.store.triggers[t.trigger_id] = t = replace(t, attempts=1,
                                                   next_attempt_at_ms=env.clock.now_ms())
    await env.dispatcher().handle(await env.receive_one(t))
    assert [c.trigger_id for c in env.channel.calls] == [t.trigger_id]
