"""Runs a :class:`sweeper.timing_wheel.TimingWheel` against a Clock on an event loop."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

from sweeper.timing_wheel import Expired, TimingWheel
from trigger_service.core.ports import Clock
from trigger_service.core.time.timing import ceil_div

T = TypeVar("T")


class WheelDriver(Generic[T]):
    """Runs a :class:`TimingWheel` against a :class:`Clock` and delivers expiries in batches.

    The owner adds timers to the wheel directly and then calls :meth:`poke` so a sleeping
    :meth:`run` re-plans if the new timer is due before the time it is sleeping towards.
    """

    def __init__(
        self,
        wheel: TimingWheel[T],
        clock: Clock,
        on_expired: Callable[[list[Expired[T]]], Awaitable[None]],
        tick_ms: int | None = None,
    ) -> None:
        """``tick_ms`` (default: the wheel's tick) is the wake-up granularity of :meth:`run`.

        Raises ``ValueError`` if ``tick_ms < 1``.
        """
        if tick_ms is None:
            tick_ms = wheel.tick_ms
        if tick_ms < 1:
            raise ValueError(f"tick_ms must be >= 1, got {tick_ms}")
        self._wheel = wheel
        self._clock = clock
        self._on_expired = on_expired
        self._tick_ms = tick_ms
        self._poked = asyncio.Event()
        # The wake-up time run() is sleeping towards; None while it is not sleeping or is waiting
        # with no timers at all (then any poke must wake it).
        self._sleep_target_ms: int | None = None

    async def run_once(self) -> int:
        """Advance the wheel to ``clock.now_ms()`` and deliver what came due.

        Awaits ``on_expired`` once with the whole batch (deadline order) if it is non-empty and
        returns the batch size. The batch is removed from the wheel before ``on_expired`` runs;
        if it raises, the exception propagates and those timers are not re-queued (the durable
        store, not this in-memory index, is the source of truth for recovery).
        """
        batch = self._wheel.advance(self._clock.now_ms())
        if batch:
            await self._on_expired(batch)
        return len(batch)

    def poke(self, deadline_ms: int | None = None) -> None:
        """Tell a sleeping :meth:`run` that the wheel changed.

        With ``deadline_ms`` (the deadline just added), the sleeper is woken only if that timer
        needs an earlier wake-up than the one it is sleeping towards; without it, always. Safe to
        call at any time, including when ``run`` is not sleeping (it re-reads the wheel before
        every sleep).
        """
        target_ms = self._sleep_target_ms
        if deadline_ms is None or target_ms is None or self._wake_ms(deadline_ms) < target_ms:
            self._poked.set()

    async def run(self, stop: asyncio.Event) -> None:
        """Deliver expiries until ``stop`` is set.

        Each round calls :meth:`run_once`, then sleeps with ``clock.sleep_until_ms`` until the
        tick boundary at or after :meth:`TimingWheel.next_deadline_ms` (no timed wake-up at all
        while the wheel is empty), or until ``stop`` is set, or until :meth:`poke` reports an
        earlier timer. Timers therefore fire at most one driver tick after their deadline while
        the event loop keeps up, and an idle or sparse wheel costs no wake-ups per tick.

        Exceptions from ``on_expired`` (and from the clock) propagate out of ``run``; the
        supervisor owns failures. Returns once ``stop`` is set (checked before each round and
        after each sleep).
        """
        while not stop.is_set():
            await self.run_once()
            if stop.is_set():
                return
            # Clear before reading the wheel: an add+poke that lands while we sleep sets the event
            # again, and one that landed before this point is already in next_deadline_ms().
            self._poked.clear()
            next_ms = self._wheel.next_deadline_ms()
            target_ms = None if next_ms is None else self._wake_ms(next_ms)
            if target_ms is not None and target_ms <= self._clock.now_ms():
                # Already due: the clock moved on while on_expired ran, or a timer was added with
                # a deadline in the past. Advancing again is progress, not a spin.
                continue
            self._sleep_target_ms = target_ms
            try:
                await self._sleep(target_ms, stop)
            finally:
                self._sleep_target_ms = None

    def _wake_ms(self, deadline_ms: int) -> int:
        # Round up to a tick boundary: one wake-up per tick drains a whole level-0 bucket, where
        # waking at each deadline would wake up to tick_ms times per bucket.
        return ceil_div(deadline_ms, self._tick_ms) * self._tick_ms

    async def _sleep(self, target_ms: int | None, stop: asyncio.Event) -> None:
        waiters: list[asyncio.Task[Any]] = [
            asyncio.create_task(stop.wait()),
            asyncio.create_task(self._poked.wait()),
        ]
        if target_ms is not None:
            waiters.append(asyncio.create_task(self._clock.sleep_until_ms(target_ms)))
        try:
            done, _ = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                task.result()  # a failing clock must surface, not turn into a busy loop
        finally:
            for task in waiters:
                task.cancel()
            # Let the losers finish cancelling so no task outlives this call.
            await asyncio.gather(*waiters, return_exceptions=True)
