"""Idempotency-Key: the same caller + key + request creates one trigger, however often and
however concurrently it is sent, with no Paxos round on the normal path.

The record is the trigger row itself. A keyed registration's trigger id is derived from
(caller, key) (``core.model.keyed_trigger_id``), and its row carries the request's hash and
the fire time answered to it. That the id has exactly one row, whatever the key's requests
do (retries with another ``delaySeconds`` fire time, duplicates at once, writes that land
after their timeout, Redis lost or down), is the store's promise
(``TriggerCatalog.create_keyed``, ``adapters.homes``): plain writes for a request that is
alone, a Paxos election when several wrote. This module only decides who answers what.

Redis orders a key's requests and answers replays without Cassandra, in one round trip:
``SET idem:{caller}:{key} <pending> NX GET PX 10 s`` (``IdempotencyCache.claim``).

- Nothing was there: this request owns the key and creates (an earlier use of the key that
  Redis forgot is found by the creation, which then answers the row there: a replay). Then
  ``done`` (id, fire time, hash) is written to Redis for fire time +
  ``TRIGGER_IDEMPOTENCY_RETENTION_S``, at most a day (``CACHE_MAX_MS``: a replay after that
  reads the row). An owner that fails (a store error, a full quota, a reused key) deletes
  its claim, so the caller's retry owns the key at once.
- ``done``: a replay straight from Redis.
- ``pending``: another request owns the key; this one polls for its ``done`` (2 s), then
  creates itself: the store makes both requests one trigger.
- Redis unavailable: the same creation.

A replay answers the first request's trigger id and fire time with ``replayed``; a request
whose hash differs from the recorded one is ``IdempotencyKeyReused`` (422). A request that
finds its key's creation unfinished (another request's home elected, its row not written)
writes that row itself, with that home's fire time: both are answered the same time. A
replay is answered before anything is reserved when Redis knows it; the caller's quota place
is taken only to create, and a quota refusal is checked against the row once more, so a
retry at the caller's ``max_pending`` is answered its trigger, not 429.

What is promised, and where it is weaker:

- One key never names two triggers, and its id never has two live rows (the store's
  promise above: a cancel answered 200 governs every delivery).
- Two *different* bodies sent at once with one key, without Redis ordering them: each may
  be answered 201 if neither finds the other's row yet; the row is one of them (the later
  creation's cells win whole), the other body's next request is answered 422.
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
from trigger_service.core.ports.values import KeyedCreation

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
    the first request's), whether this was a replay, and whether it was debounced."""

    trigger_id: str
    fire_at_ms: int
    replayed: bool
    debounced: bool = False  # joined an open trigger of its debounce key (``app.debouncing``)


@dataclass(frozen=True, slots=True)
class LegacyReplay:
    """An earlier release's record of a key, as this request's answer: ``answer`` (a
    replay), and whether the record's trigger has no row (``lost``: its writer died between
    the record and the row; the registration writes ``record.trigger`` before it answers)."""

    answer: Registered
    record: IdempotencyRecord
    lost: bool


class IdempotentRegistration:
    """The decisions of a keyed registration, one step at a time; its caller
    (``TriggerService.register``) writes between them and calls nothing back here:

    1. ``claim``: an answer from Redis (a replay), or None: this request creates;
    2. ``legacy_replay``: an earlier release's record of the key answers, if there is one;
    3. the caller writes the trigger (``TriggerCatalog.create_keyed``), then
       ``created`` with what the write left, or ``refused`` with its ``QuotaExceeded``;
    4. ``release`` if anything after a None ``claim`` raised.
    """

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

    async def claim(self, trigger: Trigger, idem_key: str) -> Registered | None:
        """Order ``trigger``'s request among its key's (Redis): the first request's answer
        when the key was answered, or is while this one waits for its owner (a replay);
        None when this request is to create ``trigger`` (the key is its own, or Redis did
        not answer in time: the store decides). After None, the caller ends with
        ``created``, ``refused`` or ``legacy_replay``'s answer, or else ``release``.

        ``trigger``: the new trigger with its derived id, ``request_hash`` and
        ``registered_fire_at_ms`` set. Raises ``IdempotencyKeyReused`` (another body)."""
        assert trigger.request_hash is not None
        caller, request_hash = trigger.caller, trigger.request_hash
        try:
            held = await self._cache.claim(caller, idem_key, request_hash)
        except CacheError as e:
            log.warning("idem_cache_unavailable", error=str(e))
            held = None  # unordered: the store alone decides, as it does anyway
        # None: ours, or not answered in time. Redis holding nothing does not mean the key
        # is new (an eviction, a flush, a failover): the store says.
        return await self._held_answer(held, caller, idem_key, request_hash)

    async def legacy_replay(self, trigger: Trigger, idem_key: str) -> LegacyReplay | None:
        """The answer of the earlier releases' record of the key, None without one (read
        only while their table holds any). Written first if both exist: an earlier release
        recorded it before anything of this release could write the derived row. When the
        record's row is ``lost`` the caller writes ``record.trigger`` (safe against a slow
        first writer: both writes carry the creation timestamp, so they write identical
        cells and neither can overwrite a later transition), then ``remember_legacy``.
        Raises ``IdempotencyKeyReused`` (another body) or ``StoreError``."""
        assert trigger.request_hash is not None
        rec = (await self._legacy.legacy_record(trigger.caller, idem_key)
               if await self._legacy_table_live() else None)
        if rec is None:
            return None
        t = rec.trigger
        answer = self._replay(rec.request_hash, trigger.request_hash, t.trigger_id,
                              t.fire_at_ms)
        lost = await self._triggers.get(t.trigger_id) is None
        if lost:
            log.warning("idempotent_repair", trigger_id=t.trigger_id, caller=t.caller)
        return LegacyReplay(answer, rec, lost)

    async def remember_legacy(self, rec: IdempotencyRecord) -> None:
        """Redis's ``done`` entry for a legacy record's key (never raises)."""
        t = rec.trigger
        await self._cache_done(t.caller, rec.idem_key, rec.request_hash, t.trigger_id, t.fire_at_ms)

    async def created(self, trigger: Trigger, idem_key: str,
                      done: KeyedCreation) -> Registered:
        """The answer once ``trigger`` was written (``TriggerCatalog.create_keyed`` left
        ``done``): the first one, or a replay when the id's row is another request's (its
        fire time, its hash: ``IdempotencyKeyReused`` for another body). Redis's ``done``
        entry is written either way."""
        assert trigger.request_hash is not None
        if not done.created:
            return await self._replay_row(done.trigger, trigger.request_hash, idem_key)
        t = done.trigger
        await self._cache_done(t.caller, idem_key, trigger.request_hash, t.trigger_id, t.fire_at_ms)
        if t.fire_at_ms != trigger.fire_at_ms:
            # Written at another request's elected home, with its fire time: that request
            # is the first, this one its replay (it wrote the row in case that one stopped).
            return self._replay(trigger.request_hash, trigger.request_hash, t.trigger_id,
                                t.fire_at_ms)
        return Registered(t.trigger_id, t.fire_at_ms, replayed=False)

    async def refused(self, trigger: Trigger, idem_key: str,
                      refusal: QuotaExceeded) -> Registered:
        """A full quota (or a spent budget) is no answer for a key whose trigger exists (a
        first write that was slow, or timed out and landed after the read): that trigger
        is, as a replay. Raises ``refusal`` when there is none."""
        assert trigger.request_hash is not None
        row = await self._reads.get(trigger.trigger_id)
        if row is None:
            raise refusal
        return await self._replay_row(row, trigger.request_hash, idem_key)

    async def answered(self, caller: str, idem_key: str, request_hash: str
                       ) -> Registered | None:
        """The key's answer as Redis holds it, for an operation whose only record of its
        key is Redis (a run now of a one-time trigger: ``app.running``): a replay when the
        key is done (``IdempotencyKeyReused`` for another body), None when Redis holds
        nothing, does not answer, or the key's owner does not finish within the wait. Sets
        nothing: the operation itself must be safe to repeat."""
        try:
            held = await self._cache.get(caller, idem_key)
        except CacheError as e:
            log.warning("idem_cache_unavailable", error=str(e))
            return None
        return await self._held_answer(held, caller, idem_key, request_hash)

    async def _held_answer(self, held: CachedKey | None, caller: str, idem_key: str,
                           request_hash: str) -> Registered | None:
        """What Redis held for the key as this request's answer: the owner's, once done
        (another request owns the key right now: its answer is ours); None when nothing
        is held or the owner does not finish in time."""
        if held is not None and not held.done:
            held = await self._wait_for_done(caller, idem_key)
        if held is None:
            return None
        assert held.trigger_id is not None and held.fire_at_ms is not None
        return self._replay(held.request_hash, request_hash, held.trigger_id, held.fire_at_ms)

    async def remember(self, caller: str, idem_key: str, request_hash: str,
                       answer: Registered) -> None:
        """Redis's ``done`` entry for ``answer`` (what ``answered`` gives back to a retry;
        never raises)."""
        await self._cache_done(caller, idem_key, request_hash, answer.trigger_id,
                               answer.fire_at_ms)

    async def release(self, caller: str, idem_key: str) -> None:
        """Give the key back after a failure, so that a retry owns it at once instead of
        waiting for the claim to expire (the store, not this entry, says whether anything
        was written). Never raises."""
        try:
            await self._cache.release(caller, idem_key)
        except CacheError as e:
            # The claim then expires by itself; the next request waits for it, then decides
            # in Cassandra.
            log.warning("idem_cache_unavailable", error=str(e))

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
        await self._cache_done(row.caller, idem_key, row.request_hash, row.trigger_id, fire_at_ms)
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

    async def _cache_done(self, caller: str, idem_key: str, request_hash: str,
                          trigger_id: str, fire_at_ms: int) -> None:
        # Only the fast path for the next replay: on its errors Cassandra answers that one,
        # and so it does after the entry expired (the row keeps the key's promise). So the
        # entry lives as long as retries are likely, not until a fire time years ahead.
        ttl_ms = min(CACHE_MAX_MS, (max(0, fire_at_ms - self._clock.now_ms()) // 1000
                                    + self._retention_s) * 1000)
        entry = CachedKey(True, request_hash, trigger_id, fire_at_ms)
        try:
            await self._cache.put_done(caller, idem_key, entry, ttl_ms)
        except CacheError as e:
            log.warning("idem_cache_unavailable", error=str(e))


def _reused() -> IdempotencyKeyReused:
    return IdempotencyKeyReused(
        "this Idempotency-Key was already used with a different request body")
