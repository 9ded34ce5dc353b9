"""Per-caller bulkheads: at most ``max_concurrency`` (callers file; else the dispatcher's
default) of one caller's sends run at once, so a slow receiver holds only its own caller's
sends, never another caller's.

Messages waiting for their caller's bulkhead are counted apart (``waiting``): they do not
count against the dispatcher's in-flight limit (a slow caller must not stop every receive),
and past ``max_waiting`` waiting for one caller the next is deferred instead (``full``),
until about its turn by the caller's pace (``pace``: the sends started here per second).

A caller's waiters are served by priority (``ranked.RankedSlots``): its high-priority sends
before its normal ones before its low ones, in arrival order within each. And while a high
one of the caller is being sent, its other sends wait to start, up to ``HIGH_FIRST_MAX_MS``:
a herd due with it would otherwise start in the same turns of the event loop, and the high
one's answer would wait for the CPU the herd's hundreds of sends take. Bounded, so that a
slow receiver of high sends delays the caller's others by at most that much each time.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator

from dispatcher.fair_share import DrainPace
from dispatcher.ranked import RankedSlots
from trigger_service.config.live_callers import Callers
from trigger_service.core.model import Priority
from trigger_service.core.ports import Clock

HIGH_FIRST_MAX_MS = 1_000


@dataclasses.dataclass
class _HighSends:
    """A caller's high-priority sends waiting for a place or being sent; ``idle`` is set
    when the last one is over."""

    count: int = 0
    idle: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)


class Bulkheads:
    def __init__(self, callers: Callers, clock: Clock, *, default_size: int,
                 max_waiting: int) -> None:
        self._callers = callers
        self._clock = clock
        self.pace = DrainPace()
        self._default_size = default_size
        self._max_waiting = max(1, max_waiting)
        self._sems: dict[str, RankedSlots] = {}
        self._waiting: dict[str, int] = {}
        self._waiting_total = 0  # the sum of ``_waiting`` (asked on every message)
        # caller -> its high-priority sends waiting or being sent (only callers with some).
        self._high: dict[str, _HighSends] = {}

    def of(self, caller: str) -> RankedSlots:
        """The caller's places, sized when first used."""
        sem = self._sems.get(caller)
        if sem is None:
            c = self._callers.by_name(caller)
            size = c.max_concurrency if c and c.max_concurrency else self._default_size
            sem = self._sems[caller] = RankedSlots(size)
        return sem

    def full(self, caller: str, priority: Priority = Priority.NORMAL) -> bool:
        """True when ``max_waiting`` of the caller's messages wait already: defer another.
        Never for a high-priority one: it would wait behind the herd filling the room, and
        the dispatcher's high shares bound how many of those are in hand."""
        return (priority is not Priority.HIGH
                and self._waiting.get(caller, 0) >= self._max_waiting)

    def come_back_ms(self, caller: str, receive_count: int) -> int:
        """When a message of ``caller`` deferred because it is ``full`` comes back: at about
        its turn, behind those waiting (``DrainPace.come_back_ms``)."""
        return self.pace.come_back_ms(caller, self._clock.now_ms(),
                                      self._waiting.get(caller, 0), receive_count)

    @property
    def waiting(self) -> int:
        """Messages waiting for a caller's bulkhead, over all callers."""
        return self._waiting_total

    @contextlib.asynccontextmanager
    async def held(self, caller: str, rank: int = 1) -> AsyncIterator[None]:
        """Wait for a place in ``caller``'s bulkhead (counted as waiting meanwhile; served
        in ``rank``'s order among the caller's waiters: ``Priority.rank``) and hold it for
        the block."""
        sem = self.of(caller)
        high = rank == Priority.HIGH.rank
        if high:  # counted from now until its send is over: the caller's others wait
            sends = self._high.setdefault(caller, _HighSends())
            sends.count += 1
        try:
            self._waiting[caller] = self._waiting.get(caller, 0) + 1
            self._waiting_total += 1
            try:
                if not high:
                    await self._after_high(caller)
                await sem.acquire(rank)
            finally:
                self._waiting[caller] -= 1
                self._waiting_total -= 1
            self.pace.started(caller, self._clock.now_ms())
            try:
                yield
            finally:
                sem.release()
        finally:
            if high:
                sends.count -= 1
                if not sends.count:
                    del self._high[caller]
                    sends.idle.set()

    async def _after_high(self, caller: str) -> None:
        """Until none of ``caller``'s high-priority sends is waiting or being sent, at most
        ``HIGH_FIRST_MAX_MS``."""
        entry = self._high.get(caller)
        if entry is None:
            return
        idle = asyncio.ensure_future(entry.idle.wait())
        limit = asyncio.ensure_future(self._clock.sleep_ms(HIGH_FIRST_MAX_MS))
        try:
            await asyncio.wait([idle, limit], return_when=asyncio.FIRST_COMPLETED)
        finally:
            idle.cancel()
            limit.cancel()
