"""What ``/readyz`` answers, checked at most once a ``READY_CACHE_MS``.

``/readyz`` needs no token, and each check is a Cassandra, an SQS and a Redis call: without a
cache, anyone could multiply those by hammering it. So one check runs at a time, requests
that come while it runs wait for it and share its answer, and that answer stands for
``READY_CACHE_MS`` after it finished (by the injected clock). A ready process seen as not
ready for up to a second, or the reverse, is what a load balancer's own interval allows.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from trigger_service.core.ports import Clock, Pingable

READY_CACHE_MS = 1_000
CHECK_TIMEOUT_S = 3


class Readiness:
    def __init__(self, clock: Clock, checks: Mapping[str, Pingable], *,
                 cache_ms: int = READY_CACHE_MS) -> None:
        """``checks``: name → dependency, read on each check (a test may swap one)."""
        self._clock = clock
        self._checks = checks
        self._cache_ms = cache_ms
        self._down: tuple[str, ...] = ()
        self._checked_at_ms: int | None = None
        self._running: asyncio.Future[tuple[str, ...]] | None = None

    async def down(self) -> list[str]:
        """The dependencies that did not answer (within ``CHECK_TIMEOUT_S``) at the last
        check; checks again when that one is older than the cache. Never raises."""
        at_ms = self._checked_at_ms
        if at_ms is not None and self._clock.now_ms() - at_ms < self._cache_ms:
            return list(self._down)
        if self._running is None:
            self._running = asyncio.ensure_future(self._check())
        # Shielded: a request that goes away must not cancel the check others wait for.
        return list(await asyncio.shield(self._running))

    async def _check(self) -> tuple[str, ...]:
        try:
            checks = dict(self._checks)
            results = await asyncio.gather(
                *(asyncio.wait_for(c.ping(), timeout=CHECK_TIMEOUT_S) for c in checks.values()),
                return_exceptions=True)
            down = tuple(name for name, r in zip(checks, results, strict=True)
                         if isinstance(r, BaseException))
            self._down, self._checked_at_ms = down, self._clock.now_ms()
            return down
        finally:
            self._running = None
