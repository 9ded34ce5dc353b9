"""``MemoryIdempotencyCache``: the in-memory ``IdempotencyCache`` (Redis' ``SET NX GET`` claim
and ``done`` entries, with TTLs on an injected clock), for unit tests and the contract tests.
"""

from __future__ import annotations

from trigger_service.adapters.memory.failing import Failing
from trigger_service.core.ports import Clock
from trigger_service.core.ports.idempotency import CachedKey

# The claim's lifetime, as Redis' (adapters.schema.IDEM_LOCK_TTL_MS).
_IDEM_LOCK_TTL_MS = 10_000


class MemoryIdempotencyCache(Failing):
    def __init__(self, clock: Clock) -> None:
        super().__init__()
        self._clock = clock
        self.entries: dict[tuple[str, str], tuple[CachedKey, int]] = {}

    def _live(self, key: tuple[str, str]) -> CachedKey | None:
        got = self.entries.get(key)
        if got is None or got[1] <= self._clock.now_ms():
            self.entries.pop(key, None)
            return None
        return got[0]

    async def get(self, caller: str, idem_key: str) -> CachedKey | None:
        self._enter("get")
        return self._live((caller, idem_key))

    async def claim(self, caller: str, idem_key: str, request_hash: str) -> CachedKey | None:
        self._enter("claim")
        held = self._live((caller, idem_key))
        if held is None:
            expires = self._clock.now_ms() + _IDEM_LOCK_TTL_MS
            self.entries[(caller, idem_key)] = (CachedKey(False, request_hash), expires)
        return held

    async def put_done(self, caller: str, idem_key: str, entry: CachedKey, ttl_ms: int) -> None:
        self._enter("put_done")
        self.entries[(caller, idem_key)] = (entry, self._clock.now_ms() + max(1, ttl_ms))

    async def release(self, caller: str, idem_key: str) -> None:
        self._enter("release")
        self.entries.pop((caller, idem_key), None)

    async def ping(self) -> None:
        self._enter("ping")
