"""The two clocks behind the ``Clock`` port (``core.ports.Clock``).

Time inside the service is aware UTC (``datetime``) or integer epoch milliseconds (``*_ms``
names). Production code asks an injected clock; tests use :class:`ManualClock` instead of
sleeping. Standard library only: reading the time is not I/O.
"""

from __future__ import annotations

import asyncio
import time

# Long epoll waits on Linux wake ~0.1% late (timer slack, see INFRA-NOTES), so a wait is
# chopped into steps of at most this many seconds and re-aimed at the deadline each time.
_MAX_SLEEP_STEP_S = 0.5


class SystemClock:
    """The real clock: ``time.time()`` for wall time, ``time.monotonic()`` for durations,
    asyncio for waiting."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic_ms(self) -> int:
        return time.monotonic_ns() // 1_000_000

    async def sleep_until_ms(self, deadline_ms: int) -> None:
        while True:
            remaining_s = (deadline_ms * 1_000_000 - time.time_ns()) / 1e9
            if remaining_s <= 0:
                return
            await asyncio.sleep(min(remaining_s, _MAX_SLEEP_STEP_S))

    async def sleep_ms(self, duration_ms: int) -> None:
        await self.sleep_until_ms(self.now_ms() + duration_ms)


class ManualClock:
    """A clock that only moves when told to; sleeps wait for ``advance_ms``/``set_ms``.
    Its monotonic time moves with its wall time (by as much, either way)."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._now_ms = start_ms
        self._changed = asyncio.Event()

    def now_ms(self) -> int:
        return self._now_ms

    def monotonic_ms(self) -> int:
        return self._now_ms

    def set_ms(self, now_ms: int) -> None:
        self._now_ms = now_ms
        self._changed.set()
        self._changed = asyncio.Event()

    def advance_ms(self, delta_ms: int) -> None:
        self.set_ms(self._now_ms + delta_ms)

    async def sleep_until_ms(self, deadline_ms: int) -> None:
        while self._now_ms < deadline_ms:
            await self._changed.wait()

    async def sleep_ms(self, duration_ms: int) -> None:
        await self.sleep_until_ms(self._now_ms + duration_ms)
