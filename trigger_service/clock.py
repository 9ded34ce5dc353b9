"""The Clock port: every component asks an injected clock for wall time.

Time inside the service is aware UTC (``datetime``) or integer epoch milliseconds
(``*_ms`` names). Tests use :class:`ManualClock` instead of sleeping.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    """Wall-clock time source."""

    def now_ms(self) -> int:
        """Current wall time as integer milliseconds since the Unix epoch (UTC)."""
        ...

    async def sleep_until_ms(self, deadline_ms: int) -> None:
        """Return no earlier than wall time ``deadline_ms`` (never early)."""
        ...


# Long epoll waits on Linux wake ~0.1% late (timer slack, see INFRA-NOTES), so a wait is
# chopped into steps of at most this many seconds and re-aimed at the deadline each time.
_MAX_SLEEP_STEP_S = 0.5


class SystemClock:
    """The real clock: ``time.time()`` for wall time, asyncio for waiting."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    async def sleep_until_ms(self, deadline_ms: int) -> None:
        while True:
            remaining_s = (deadline_ms * 1_000_000 - time.time_ns()) / 1e9
            if remaining_s <= 0:
                return
            await asyncio.sleep(min(remaining_s, _MAX_SLEEP_STEP_S))


class ManualClock:
    """A clock that only moves when told to; ``sleep_until_ms`` waits for ``advance``."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._now_ms = start_ms
        self._changed = asyncio.Event()

    def now_ms(self) -> int:
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


def ms_to_datetime(ms: int) -> datetime:
    """Epoch milliseconds to an aware UTC datetime."""
    return _EPOCH + timedelta(milliseconds=ms)


def datetime_to_ms(dt: datetime) -> int:
    """Aware datetime to epoch milliseconds (floors sub-millisecond digits, exact integer math)."""
    if dt.tzinfo is None:
        raise ValueError("naive datetime: time inside the service is aware UTC")
    return (dt - _EPOCH) // timedelta(milliseconds=1)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
