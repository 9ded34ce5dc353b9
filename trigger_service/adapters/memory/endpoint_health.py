"""``EndpointHealthStore`` and ``OpsEvents`` in memory, for unit tests; the same conditions as
``adapters.cassandra.endpoint_health`` (contract tests: tests/contract/test_endpoint_health.py),
the TTL on an injected clock."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import replace

from trigger_service.core.endpoint_health import EndpointHealth, OpsEvent, ParkedTrigger
from trigger_service.core.ports import Clock
from trigger_service.core.time.clock import SystemClock
from trigger_service.core.time.timing import ceil_div


class MemoryEndpointHealth:
    def __init__(self, clock: Clock | None = None, *, ttl_s: int = 7 * 86_400,
                 page_size: int = 500) -> None:
        self._clock: Clock = clock if clock is not None else SystemClock()
        self.ttl_s = ttl_s
        self.page_size = page_size
        self._records: dict[tuple[str, str], tuple[EndpointHealth, int]] = {}  # expires at
        self.writes = 0  # every write asked for, applied or not
        self.pages_read = 0
        # (caller, origin) → entry → when it expires (ms)
        self._parked: dict[tuple[str, str], dict[ParkedTrigger, int]] = {}

    @property
    def records(self) -> dict[tuple[str, str], EndpointHealth]:
        """The records not expired."""
        now_ms = self._clock.now_ms()
        return {k: h for k, (h, until_ms) in self._records.items() if now_ms < until_ms}

    def _get(self, key: tuple[str, str]) -> EndpointHealth | None:
        return self.records.get(key)

    def _put(self, h: EndpointHealth) -> None:
        self._records[h.key] = (h, self._clock.now_ms() + self.ttl_s * 1000)

    def expires_in_s(self, caller: str, origin: str) -> int:
        """Seconds the record has left (as Cassandra's ``TTL()``)."""
        return (self._records[(caller, origin)][1] - self._clock.now_ms()) // 1000

    async def endpoint_health(self, caller: str | None = None) -> list[EndpointHealth]:
        rows = [h for _, h in sorted(self.records.items())
                if caller is None or h.caller == caller]
        if caller is None:
            self.pages_read += max(1, ceil_div(len(rows), self.page_size))
        return rows

    async def note_first_failure(self, h: EndpointHealth, max_per_caller: int
                                 ) -> EndpointHealth | None:
        self.writes += 1
        now = self._get(h.key)
        if now is not None:
            return now
        if sum(1 for caller, _ in self.records if caller == h.caller) >= max_per_caller:
            return None
        self._put(h)
        return h

    async def note_failures(self, h: EndpointHealth) -> bool:
        self.writes += 1
        now = self._get(h.key)
        if now is None or (now.first_failure_at_ms, now.disabled_at_ms, now.notified_at_ms) != (
                h.first_failure_at_ms, h.disabled_at_ms, h.notified_at_ms):
            return False
        self._put(replace(now, last_failure_at_ms=h.last_failure_at_ms, failures=h.failures,
                          last_error=h.last_error if h.last_error is not None
                          else now.last_error))
        return True

    async def mark_disabled(self, h: EndpointHealth, at_ms: int) -> bool:
        self.writes += 1
        now = self._get(h.key)
        if (now is None or now.first_failure_at_ms != h.first_failure_at_ms
                or now.disabled_at_ms is not None):
            return False
        self._put(replace(h, disabled_at_ms=at_ms, notified_at_ms=now.notified_at_ms))
        return True

    async def mark_notified(self, h: EndpointHealth, at_ms: int) -> None:
        self.writes += 1
        now = self._get(h.key)
        if (now is not None and now.first_failure_at_ms == h.first_failure_at_ms
                and now.disabled_at_ms == h.disabled_at_ms):
            self._put(replace(h, notified_at_ms=at_ms))

    async def clear_failing(self, caller: str, origin: str) -> bool:
        self.writes += 1
        now = self._get((caller, origin))
        if now is not None and now.disabled_at_ms is not None:
            return False
        self._records.pop((caller, origin), None)
        return True

    async def clear(self, caller: str, origin: str) -> EndpointHealth | None:
        self.writes += 1
        now = self._get((caller, origin))
        self._records.pop((caller, origin), None)
        return now

    # --- the index of parked triggers -------------------------------------------------------
    async def note_parked(self, caller: str, origin: str, parked: ParkedTrigger, ttl_s: int
                          ) -> None:
        self._parked.setdefault((caller, origin), {})[parked] = self._clock.now_ms() + ttl_s * 1000

    def parked_entries(self, caller: str, origin: str) -> dict[ParkedTrigger, int]:
        """The entries of (caller, origin) not expired, with the seconds each has left."""
        now_ms = self._clock.now_ms()
        return {h: (until_ms - now_ms) // 1000
                for h, until_ms in self._parked.get((caller, origin), {}).items()
                if now_ms < until_ms}

    async def parked_since(self, caller: str, origin: str, since_ms: int
                           ) -> AsyncIterator[list[ParkedTrigger]]:
        rows = sorted((h for h in self.parked_entries(caller, origin) if h.due_at_ms >= since_ms),
                      key=lambda h: (h.due_at_ms, h.trigger_id))
        for i in range(0, len(rows), self.page_size):
            self.pages_read += 1
            yield rows[i:i + self.page_size]

    async def forget_parked(self, caller: str, origin: str, parked: Sequence[ParkedTrigger]
                            ) -> None:
        mine = self._parked.get((caller, origin), {})
        for h in parked:
            mine.pop(h, None)


class MemoryOpsEvents:
    """Keeps what was sent; ``fail`` more sends fail first."""

    def __init__(self) -> None:
        self.sent: list[OpsEvent] = []
        self.fail = 0

    async def send(self, event: OpsEvent) -> bool:
        if self.fail:
            self.fail -= 1
            return False
        self.sent.append(event)
        return True
