"""A series paused then resumed, end to end on the fakes: the API's pause and resume
(``TriggerService``) and a dispatcher delivering from the same store and queue, on one manual
clock. What came due while paused is decided by the resume's policy, however little late it
is: the catch-up tolerance is for outages, not for a pause."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tests.unit.dispatcher.fakes import Env, settle
from trigger_service.adapters.memory.idempotency import MemoryIdempotencyCache
from trigger_service.app.triggers import TriggerService
from trigger_service.core.model import Trigger
from trigger_service.core.time.catchup import CatchUpPolicy
from trigger_service.core.time.recurrence import Recurrence, RuleKind, parse_rule
from trigger_service.core.time.zones import load_zone

pytestmark = pytest.mark.timeout(20)

EVERY_S = 2
STEP_MS = 100


def _every_2s(first_ms: int) -> Recurrence:
    start = datetime.fromtimestamp(first_ms / 1000, UTC).replace(tzinfo=None)
    rule = f"FREQ=SECONDLY;INTERVAL={EVERY_S}"
    return Recurrence(RuleKind.RRULE, parse_rule(RuleKind.RRULE, rule, load_zone("UTC"), start),
                      "UTC", start)


class World:
    """The dispatcher's fakes and the API's use case on them; every delivery recorded as
    (which occurrence: 0 for the first, when it was delivered)."""

    def __init__(self) -> None:
        self.env = Env()
        self.api = TriggerService(self.env.settings, self.env.store, self.env.store,
                                  self.env.queue, MemoryIdempotencyCache(self.env.clock),
                                  self.env.clock, self.env.metrics)
        self.dispatcher = self.env.dispatcher()
        self.first_ms = self.env.clock.now_ms() + 2_000
        self.delivered: list[tuple[int, int]] = []
        self.env.channel.on_deliver = self._record

    def _record(self, t: Trigger) -> None:
        n = (t.scheduled_at_ms - self.first_ms) // (EVERY_S * 1000)
        self.delivered.append((n, self.env.clock.now_ms()))

    async def series(self) -> Trigger:
        """A series every 2 s from ``first_ms``, its first message on the queue."""
        t = await self.env.add(self.first_ms - self.env.clock.now_ms(),
                               schedule=_every_2s(self.first_ms))
        await self.env.enqueue(t)
        return t

    async def run_until(self, at_ms: int) -> None:
        """The dispatcher receiving and delivering while the clock moves to ``at_ms``."""
        while True:
            await self.dispatcher.run_once()
            await settle()
            if self.env.clock.now_ms() >= at_ms:
                return
            self.env.clock.advance_ms(STEP_MS)

    def since(self, at_ms: int) -> list[tuple[int, int]]:
        """Deliveries at or after ``at_ms``: (occurrence, ms after ``at_ms``)."""
        return [(n, when - at_ms) for n, when in self.delivered if when >= at_ms]


async def _paused_for_10s_then_resumed(policy: CatchUpPolicy) -> tuple[World, int]:
    """Occurrence 0 fires; the series is paused 0.5 s later, for 10 s, so occurrences 1-5
    (2 s to 10 s after the first) come due while paused, and resumed with ``policy`` 1 s
    before occurrence 6. The world has run to 5.5 s after the resume; returns it and the
    resume's time."""
    w = World()
    t = await w.series()
    await w.run_until(w.first_ms + 500)
    assert [n for n, _ in w.delivered] == [0]
    await w.api.pause(t.caller, t.trigger_id)
    await w.run_until(w.first_ms + 11_000)
    assert [n for n, _ in w.delivered] == [0]  # nothing while paused
    resumed_at = w.env.clock.now_ms()
    await w.api.resume(t.caller, t.trigger_id, policy)
    await w.api.drain()
    await w.run_until(resumed_at + 5_500)
    return w, resumed_at


async def test_resume_none_fires_nothing_that_came_due_while_paused() -> None:
    w, resumed_at = await _paused_for_10s_then_resumed(CatchUpPolicy.NONE)
    # Occurrences 6, 7, 8 (1 s, 3 s, 5 s after the resume), each at its time.
    assert w.since(resumed_at) == [(6, 1_000), (7, 3_000), (8, 5_000)]


async def test_resume_latest_fires_the_most_recent_missed_at_once() -> None:
    w, resumed_at = await _paused_for_10s_then_resumed(CatchUpPolicy.LATEST)
    got = w.since(resumed_at)
    assert [n for n, _ in got] == [5, 6, 7, 8]
    assert got[0][1] < STEP_MS and got[1:] == [(6, 1_000), (7, 3_000), (8, 5_000)]


async def test_resume_all_fires_each_missed_in_order() -> None:
    w, resumed_at = await _paused_for_10s_then_resumed(CatchUpPolicy.ALL)
    got = w.since(resumed_at)
    assert [n for n, _ in got] == [1, 2, 3, 4, 5, 6, 7, 8]
    assert all(after < 1_000 for _, after in got[:5])  # the missed ones in a row, now
    assert got[5:] == [(6, 1_000), (7, 3_000), (8, 5_000)]
