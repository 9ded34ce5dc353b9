"""Idempotency-Key: the same caller + key + request creates one trigger, however often and
however concurrently it is sent, with no Paxos round on the normal path.

The record is the trigger row itself. A keyed registration's trigger id is derived from
(caller, key) (``core.model.keyed_trigger_id``), and its row carries the request's hash and
the fire time answered to it; every request with the key reads or writes that one row.

Who writes it is ordered by Redis, in one round trip: ``SET idem:{caller}:{key} <pending> NX
GET PX 10 s`` (``IdempotencyCache.claim``).

- Nothing was there: this request owns the key. It reads the derived row (plain read:
  Redis may have lost the entry of a key used before) and, concurrently, the ``idempotency``
  table of earlier releases. Found: a replay. Absent: the trigger is created with plain
  writes, enqueued, and ``done`` (id, fire time, hash) is written to Redis for fire time +
  ``TRIGGER_IDEMPOTENCY_RETENTION_S``, at most a day (``CACHE_MAX_MS``: Redis is a cache
  here; a replay after that reads the row). An owner that fails (a store error, a full quota, a
  reused key) deletes its claim, so the caller's retry owns the key at once; if the failed
  write landed after all (a timeout), the retry's read finds the row and replays it.
- ``done``: a replay straight from Redis.
- ``pending``: another request owns the key; this one polls for its ``done`` (2 s), then
  decides in Cassandra as below.
- Redis unavailable: decided in Cassandra: the same reads, then the row written by Paxos
  (``TriggerCatalog.create_if_absent``), so concurrent requests still make one trigger.

A replay answers the first request's trigger id and fire time with ``replayed``; a request
whose hash differs from the recorded one is ``IdempotencyKeyReused`` (422). A replay is
answered before anything is reserved: the caller's quota place is taken only to create, and
a quota refusal is checked against the row once more (a first write that timed out may have
landed since the read), so a retry at the caller's ``max_pending`` is answered its trigger,
not 429.

What is promised, and where it is weaker:

- One key never names two triggers: every path writes the one derived id (a legacy record
  names its own trigger, and is honoured before anything is written).
- With Redis up, a key's requests are serialised by the claim; the owner's plain writes are
  the only ones, unless the owner takes longer than the waiter's 2 s (or dies holding the
  claim). Then the waiter reads the row and, absent, creates it by Paxos. A Paxos write does
  not order itself against a plain write still in flight (nor does a second owner's plain
  write, once a claim older than its 10 s has expired), so in that corner the row can be
  written twice: the same id, and for the same request the same content but for the
  received time (a ``delaySeconds`` request's fire time, ``created_at_ms``); the later
  creation's cells win, every creation cell loses to every state transition (creation
  writes carry the creation time, Paxos writes a later ballot's), and the dispatcher drops
  the message aimed at the fire time that lost. So: one trigger, at most one delivery, but
  the two answers' ``fireAt`` may differ by the requests' arrival gap. Two *different*
  bodies racing in that corner can both be answered 201 with the one row holding parts of
  each: a caller that reuses a key for another body concurrently gets no 422 guarantee.
- Redis down: one trigger per key (Paxos), the reads are the replay.
- Rolling upgrade: a release before this one neither reads the derived row nor writes it;
  while both run, a key first used on a new process whose Redis entry is then lost (or while
  Redis is down) can be created again by an old process, with another id.
- A key's promise lasts until its trigger's first fire time + the retention: the row lives
  at least that long (``Settings.terminal_ttl_s``). After that the same key creates a new
  trigger with the same id (and so the same occurrence ids, which a receiver deduplicating
  for longer than that would drop): keys are meant to be unique.

The ``idempotency`` table is only read now (``LegacyIdempotency``), and only while it holds
anything (asked once a minute per process). Its records expire by
their TTL (their trigger's first fire time + the retention at the time); it can be dropped,
and the read with it, once it is empty: at the latest ``TRIGGER_API_MAX_FIRE_AHEAD_DAYS`` +
``TRIGGER_IDEMPOTENCY_RETENTION_S`` after the last release that wrote it stopped.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import structlog

from trigger_service.app.coalesced_reads import CoalescedReads
from trigger_service.core.errors import (
    CacheError,
    IdempotencyKeyReused,
    QuotaExceeded,
    StoreError,
)
from trigger_service.core.model import Trigger
from trigger_service.core.ports import Clock, Metrics, TriggerStates
from trigger_service.core.ports.idempotency import (
    CachedKey,
    IdempotencyCache,
    IdempotencyRecord,
    LegacyIdempotency,
)

log = structlog.get_logger(__name__)

# How long a request that found the key in progress waits for the owner's answer before
# deciding in Cassandra itself, and how often it looks.
_WAIT_MS = 2_000
_POLL_MS = 20
# At most this long a key's done entry stays in Redis (a replay after it reads the row).
CACHE_MAX_MS = 86_400_000
# How often a process asks whether the earlier releases' idempotency table holds anything.
_LEGACY_PROBE_MS = 60_000


@dataclass(frozen=True, slots=True)
class Registered:
    """The outcome of a registration: the trigger's id and fire time (a replay answers with
    the first request's), and whether this was a replay."""

    trigger_id: str
    fire_at_ms: int
    replayed: bool


# Write a new trigger and enqueue it (plain writes; idempotent for one trigger).
Create = Callable[[Trigger], Awaitable[None]]
# The same with the row written by Paxos: None if written, else the trigger already there.
CreateIfAbsent = Callable[[Trigger], Awaitable[Trigger | None]]


class IdempotentRegistration:
    def __init__(self, triggers: TriggerStates, legacy: LegacyIdempotency,
                 cache: IdempotencyCache, clock: Clock, metrics: Metrics,
                 retention_s: int) -> None:
        self._triggers = triggers
        # The derived row's read, shared by concurrent registrations (a batch create's).
        self._reads = CoalescedReads(triggers)
        self._legacy = legacy
        self._cache = cache
        self._clock = clock
        self._metrics = metrics
        self._retention_s = retention_s
        self._legacy_live = True
        self._legacy_probed_until_ms = -(2**63)
        self._legacy_probe: asyncio.Future[bool] | None = None

    async def register(self, trigger: Trigger, idem_key: str, create: Create,
                       create_if_absent: CreateIfAbsent) -> Registered:
        """Create ``trigger`` unless its key was used before, then answer as the first time.

        ``trigger``: the new trigger with its derived id, ``request_hash`` and
        ``registered_fire_at_ms`` set. ``create`` writes it with plain writes (the normal
        path: no conditional statement), ``create_if_absent`` by Paxos (only without Redis,
        or when the key's owner did not answer in time). Safe to retry: a retry is a replay
        or finishes what was left undone. Raises ``IdempotencyKeyReused`` (another body),
        ``QuotaExceeded`` (only when the key has no trigger), ``StoreError`` or
        ``OutcomeUnknown`` (then nothing is promised: the retry with the key decides)."""
        assert trigger.request_hash is not None
        caller, request_hash = trigger.caller, trigger.request_hash
        try:
            held = await self._cache.claim(caller, idem_key, request_hash)
        except CacheError as e:
            log.warning("idem_cache_unavailable", error=str(e))
            return await self._decide_in_store(trigger, idem_key, create, create_if_absent)
        if held is not None and not held.done:
            # Another request owns the key right now: its answer is ours.
            held = await self._wait_for_done(caller, idem_key)
            if held is None:
                return await self._decide_in_store(trigger, idem_key, create,
                                                   create_if_absent)
        if held is not None:
            assert held.trigger_id is not None and held.fire_at_ms is not None
            return self._replay(held.request_hash, request_hash, held.trigger_id,
                                held.fire_at_ms)
        # Ours. Redis holds nothing, which does not mean the key is new (an eviction, a
        # flush, a failover): the row (or an earlier release's record) says.
        try:
            known = await self._recorded(trigger, idem_key, create)
            if known is None:
                try:
                    await create(trigger)
                except QuotaExceeded as e:
                    known = await self._refusal_or_replay(trigger, idem_key, e)
        except BaseException:
            # Give the key back: a retry then owns it at once instead of waiting for the
            # claim to expire (the row, not this entry, says whether anything was written).
            await self._cache_release(caller, idem_key)
            raise
        if known is not None:
            return known
        await self._cache_done(trigger, idem_key, request_hash, trigger.trigger_id,
                               trigger.fire_at_ms)
        return Registered(trigger.trigger_id, trigger.fire_at_ms, replayed=False)

    async def _decide_in_store(self, trigger: Trigger, idem_key: str, create: Create,
                               create_if_absent: CreateIfAbsent) -> Registered:
        """Without Redis' ordering: the reads, then a Paxos create of the derived row."""
        known = await self._recorded(trigger, idem_key, create)
        if known is not None:
            return known
        assert trigger.request_hash is not None
        try:
            existing = await create_if_absent(trigger)
        except QuotaExceeded as e:
            return await self._refusal_or_replay(trigger, idem_key, e)
        if existing is not None:
            return await self._replay_row(existing, trigger.request_hash, idem_key)
        await self._cache_done(trigger, idem_key, trigger.request_hash, trigger.trigger_id,
                               trigger.fire_at_ms)
        return Registered(trigger.trigger_id, trigger.fire_at_ms, replayed=False)

    async def _recorded(self, trigger: Trigger, idem_key: str,
                        create: Create) -> Registered | None:
        """The replay of a key already used (its derived row, or an earlier release's
        record, whose trigger is written again if its first writer died before writing
        it); None if the key is new. Raises ``IdempotencyKeyReused``, ``StoreError``."""
        assert trigger.request_hash is not None
        if await self._legacy_table_live():
            row, legacy = await asyncio.gather(
                self._reads.get(trigger.trigger_id),
                self._legacy.legacy_record(trigger.caller, idem_key))
        else:
            row, legacy = await self._reads.get(trigger.trigger_id), None
        if legacy is not None:
            # Written first if both exist: an earlier release recorded it before anything
            # of this release could write the derived row.
            return await self._replay_legacy(legacy, trigger.request_hash, create)
        if row is not None:
            return await self._replay_row(row, trigger.request_hash, idem_key)
        return None

    async def _refusal_or_replay(self, trigger: Trigger, idem_key: str,
                                 refusal: QuotaExceeded) -> Registered:
        """A full quota is no answer for a key whose trigger exists (a first write that was
        slow, or timed out and landed after the read): that trigger is, as a replay. Raises
        ``refusal`` when there is none."""
        assert trigger.request_hash is not None
        row = await self._reads.get(trigger.trigger_id)
        if row is None:
            raise refusal
        return await self._replay_row(row, trigger.request_hash, idem_key)

    async def _legacy_table_live(self) -> bool:
        """Whether the earlier releases' table may hold a record: asked at most every
        ``_LEGACY_PROBE_MS``; while it holds none, a new key costs one read, not two. (A
        record an old process writes within that minute is missed only if Redis lost the
        key too: the rolling-upgrade corner the module docstring describes.)"""
        if self._clock.now_ms() >= self._legacy_probed_until_ms:
            if self._legacy_probe is None:  # one probe at a time; concurrent requests share it
                self._legacy_probe = asyncio.ensure_future(self._probe_legacy())
            probe = self._legacy_probe
            return await asyncio.shield(probe)
        return self._legacy_live

    async def _probe_legacy(self) -> bool:
        try:
            live = await self._legacy.legacy_records_exist()
        except StoreError:
            live = True  # unknown: read it (that read says what it can)
        finally:
            self._legacy_probe = None
        self._legacy_live = live
        self._legacy_probed_until_ms = self._clock.now_ms() + _LEGACY_PROBE_MS
        return live

    async def _replay_row(self, row: Trigger, request_hash: str,
                          idem_key: str) -> Registered:
        fire_at_ms = (row.registered_fire_at_ms if row.registered_fire_at_ms is not None
                      else row.fire_at_ms)
        if row.request_hash is None:
            raise _reused()  # not a keyed registration's row (2^-128): never one of ours
        result = self._replay(row.request_hash, request_hash, row.trigger_id, fire_at_ms)
        await self._cache_done(row, idem_key, row.request_hash, row.trigger_id, fire_at_ms)
        return result

    async def _replay_legacy(self, rec: IdempotencyRecord, request_hash: str,
                             create: Create) -> Registered:
        t = rec.trigger
        result = self._replay(rec.request_hash, request_hash, t.trigger_id, t.fire_at_ms)
        if await self._triggers.get(t.trigger_id) is None:
            # Safe against a slow first writer: both writes carry the creation timestamp,
            # so they write identical cells and neither can overwrite a later transition.
            log.warning("idempotent_repair", trigger_id=t.trigger_id, caller=t.caller)
            await create(t)
        await self._cache_done(t, rec.idem_key, rec.request_hash, t.trigger_id, t.fire_at_ms)
        return result

    def _replay(self, stored_hash: str, request_hash: str, trigger_id: str,
                fire_at_ms: int) -> Registered:
        if stored_hash != request_hash:
            raise _reused()
        self._metrics.inc("idempotent_replays_total")
        return Registered(trigger_id, fire_at_ms, replayed=True)

    async def _wait_for_done(self, caller: str, idem_key: str) -> CachedKey | None:
        """The owner's ``done`` entry; None if it does not come in time, the entry goes
        (its owner died and the claim expired, or Redis lost it) or Redis fails."""
        deadline_ms = self._clock.now_ms() + _WAIT_MS
        while self._clock.now_ms() < deadline_ms:
            await self._clock.sleep_ms(_POLL_MS)
            try:
                held = await self._cache.get(caller, idem_key)
            except CacheError as e:
                log.warning("idem_cache_unavailable", error=str(e))
                return None
            if held is None or held.done:
                return held
        self._metrics.inc("idempotent_wait_timeouts_total")
        return None

    async def _cache_done(self, t: Trigger, idem_key: str, request_hash: str, trigger_id: str,
                          fire_at_ms: int) -> None:
        # Only the fast path for the next replay: on its errors Cassandra answers that one,
        # and so it does after the entry expired (the row keeps the key's promise). So the
        # entry lives as long as retries are likely, not until a fire time years ahead.
        ttl_ms = min(CACHE_MAX_MS, (max(0, fire_at_ms - self._clock.now_ms()) // 1000
                                    + self._retention_s) * 1000)
        entry = CachedKey(True, request_hash, trigger_id, fire_at_ms)
        try:
            await self._cache.put_done(t.caller, idem_key, entry, ttl_ms)
        except CacheError as e:
            log.warning("idem_cache_unavailable", error=str(e))


    async def _cache_release(self, caller: str, idem_key: str) -> None:
        try:
            await self._cache.release(caller, idem_key)
        except CacheError as e:
            # The claim then expires by itself; the next request waits for it, then decides
            # in Cassandra.
            log.warning("idem_cache_unavailable", error=str(e))


def _reused() -> IdempotencyKeyReused:
    return IdempotencyKeyReused(
        "this Idempotency-Key was already used with a different request body")
