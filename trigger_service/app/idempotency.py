"""Idempotency-Key: the same caller + key + request creates one trigger, however often and
however concurrently it is sent.

Redis is the fast path (a ``SET NX`` lock, then a ``done`` entry); the Cassandra
``idempotency`` table is the truth (``INSERT IF NOT EXISTS``), so losing Redis loses nothing.
A request whose first writer died after recording the key but before writing the trigger is
repaired by the next request with the key, which writes the recorded trigger again.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import structlog

from trigger_service.core.errors import CacheError, IdempotencyKeyReused
from trigger_service.core.model import Trigger
from trigger_service.core.ports import (
    CachedKey,
    Clock,
    IdempotencyCache,
    IdempotencyRecord,
    IdempotencyStore,
    Metrics,
    TriggerStates,
)

log = structlog.get_logger(__name__)

# How long a request that lost the Redis SET NX race waits for the winner's answer before
# asking Cassandra (the truth) itself, and how often it looks.
_WAIT_MS = 2_000
_POLL_MS = 20


@dataclass(frozen=True, slots=True)
class Registered:
    """The outcome of a registration: the trigger's id and fire time (a replay answers with
    the first request's), and whether this was a replay."""

    trigger_id: str
    fire_at_ms: int
    replayed: bool


Persist = Callable[[Trigger], Awaitable[None]]


class IdempotentRegistration:
    def __init__(self, store: IdempotencyStore, triggers: TriggerStates, cache: IdempotencyCache,
                 clock: Clock, metrics: Metrics, retention_s: int) -> None:
        self._store = store
        self._triggers = triggers
        self._cache = cache
        self._clock = clock
        self._metrics = metrics
        self._retention_s = retention_s

    async def register(self, trigger: Trigger, idem_key: str, request_hash: str,
                       persist: Persist) -> Registered:
        """Create ``trigger`` with ``persist`` unless this key was used before; then answer
        as the first time. Raises ``IdempotencyKeyReused`` (other body) or ``StoreError``."""
        caller = trigger.caller
        cached = await self._cache_get(caller, idem_key)
        if cached is None:
            if not await self._cache_lock(caller, idem_key, request_hash):
                cached = await self._wait_for_done(caller, idem_key)
        elif not cached.done:
            # Another request holds the key right now: its answer is ours.
            cached = await self._wait_for_done(caller, idem_key)
        if cached is not None and cached.done:
            assert cached.trigger_id is not None and cached.fire_at_ms is not None
            return self._replay(cached.request_hash, request_hash, cached.trigger_id,
                                cached.fire_at_ms)

        record = IdempotencyRecord(caller, idem_key, request_hash, trigger)
        ttl_s = self._ttl_s(trigger.fire_at_ms)
        existing = await self._store.put_if_absent(record, ttl_s)
        if existing is not None:
            if existing.request_hash != request_hash:
                raise _reused()
            await self._ensure_created(existing.trigger, persist)
            await self._cache_done(existing, ttl_s)
            return self._replay(existing.request_hash, request_hash,
                                existing.trigger.trigger_id, existing.trigger.fire_at_ms)
        await persist(trigger)
        await self._cache_done(record, ttl_s)
        return Registered(trigger.trigger_id, trigger.fire_at_ms, replayed=False)

    def _ttl_s(self, fire_at_ms: int) -> int:
        ahead_s = max(0, (fire_at_ms - self._clock.now_ms()) // 1000)
        return ahead_s + self._retention_s

    def _replay(self, stored_hash: str, request_hash: str, trigger_id: str,
                fire_at_ms: int) -> Registered:
        if stored_hash != request_hash:
            raise _reused()
        self._metrics.inc("idempotent_replays_total")
        return Registered(trigger_id, fire_at_ms, replayed=True)

    async def _ensure_created(self, t: Trigger, persist: Persist) -> None:
        """Write the trigger a crashed first request recorded but may not have written.

        Safe against a slow first writer: both writes carry the creation timestamp, so they
        write identical cells and neither can overwrite a later state transition.
        """
        if await self._triggers.get(t.trigger_id) is not None:
            return
        log.warning("idempotent_repair", trigger_id=t.trigger_id, caller=t.caller)
        await persist(t)

    async def _wait_for_done(self, caller: str, idem_key: str) -> CachedKey | None:
        deadline_ms = self._clock.now_ms() + _WAIT_MS
        while self._clock.now_ms() < deadline_ms:
            await self._clock.sleep_ms(_POLL_MS)
            cached = await self._cache_get(caller, idem_key)
            if cached is None or cached.done:
                return cached
        return None

    # The cache is only a fast path: on its errors Cassandra decides.
    async def _cache_get(self, caller: str, idem_key: str) -> CachedKey | None:
        try:
            return await self._cache.get(caller, idem_key)
        except CacheError as e:
            log.warning("idem_cache_unavailable", error=str(e))
            return None

    async def _cache_lock(self, caller: str, idem_key: str, request_hash: str) -> bool:
        try:
            return await self._cache.lock(caller, idem_key, request_hash)
        except CacheError as e:
            log.warning("idem_cache_unavailable", error=str(e))
            return True

    async def _cache_done(self, rec: IdempotencyRecord, ttl_s: int) -> None:
        entry = CachedKey(True, rec.request_hash, rec.trigger.trigger_id, rec.trigger.fire_at_ms)
        try:
            await self._cache.put_done(rec.caller, rec.idem_key, entry, ttl_s * 1000)
        except CacheError as e:
            log.warning("idem_cache_unavailable", error=str(e))


def _reused() -> IdempotencyKeyReused:
    return IdempotencyKeyReused(
        "this Idempotency-Key was already used with a different request body")
