"""``EndpointHealthStore`` and ``OpsEvents`` in memory, for unit tests; the same conditions as
``adapters.cassandra.endpoint_health`` (contract tests: tests/contract/test_endpoint_health.py)."""

from __future__ import annotations

from dataclasses import replace

from trigger_service.core.endpoint_health import EndpointHealth, OpsEvent


class MemoryEndpointHealth:
    def __init__(self) -> None:
        self.records: dict[tuple[str, str], EndpointHealth] = {}
        self.writes = 0  # every write asked for, applied or not

    async def endpoint_health(self, caller: str | None = None) -> list[EndpointHealth]:
        return [h for _, h in sorted(self.records.items())
                if caller is None or h.caller == caller]

    async def note_first_failure(self, h: EndpointHealth) -> EndpointHealth:
        self.writes += 1
        return self.records.setdefault(h.key, h)

    async def note_failures(self, h: EndpointHealth) -> bool:
        self.writes += 1
        now = self.records.get(h.key)
        if now is None or now.first_failure_at_ms != h.first_failure_at_ms:
            return False
        self.records[h.key] = replace(now, last_failure_at_ms=h.last_failure_at_ms,
                                      failures=h.failures, last_error=h.last_error)
        return True

    async def mark_disabled(self, h: EndpointHealth, at_ms: int) -> bool:
        self.writes += 1
        now = self.records.get(h.key)
        if (now is None or now.first_failure_at_ms != h.first_failure_at_ms
                or now.disabled_at_ms is not None):
            return False
        self.records[h.key] = replace(now, disabled_at_ms=at_ms)
        return True

    async def mark_notified(self, h: EndpointHealth, at_ms: int) -> None:
        self.writes += 1
        now = self.records.get(h.key)
        if now is not None and now.first_failure_at_ms == h.first_failure_at_ms:
            self.records[h.key] = replace(now, notified_at_ms=at_ms)

    async def clear_failing(self, caller: str, origin: str) -> bool:
        self.writes += 1
        now = self.records.get((caller, origin))
        if now is not None and now.disabled_at_ms is not None:
            return False
        self.records.pop((caller, origin), None)
        return True

    async def clear(self, caller: str, origin: str) -> EndpointHealth | None:
        self.writes += 1
        return self.records.pop((caller, origin), None)


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
