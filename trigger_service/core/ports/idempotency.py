"""The Idempotency-Key ports (``app.idempotency``): the cache that orders one key's requests
and remembers outcomes (Redis), and the ``idempotency`` table of releases before keyed
rows (migration 011; read for the keys it still holds). A key used since is recorded by its
trigger row itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from trigger_service.core.model import Trigger


# --- the earlier releases' records -------------------------------------------------------
@dataclass(frozen=True, slots=True)
class IdempotencyRecord:
    """What one (caller, Idempotency-Key) was first used for, as releases before keyed rows
    (011) recorded it in the ``idempotency`` table: the request's hash and the trigger it created
    (enough to re-create the trigger if its first writer died). Keys used since are recorded
    by their trigger row itself (``Trigger.request_hash``)."""

    caller: str
    idem_key: str
    request_hash: str
    trigger: Trigger


class LegacyIdempotency(Protocol):
    """The ``idempotency`` table of releases before keyed rows (011), read so that a key recorded
    there keeps its promise (its records expire by their own TTL; ``adapters.schema`` says
    when the table can be dropped)."""

    async def legacy_record(self, caller: str, idem_key: str) -> IdempotencyRecord | None:
        """The record of (caller, key), None if there is none. Raises ``StoreError``."""
        ...

    async def legacy_records_exist(self) -> bool:
        """Whether the table holds any live record (one row read, not per key): while it
        holds none, no key can be found there. Raises ``StoreError``."""
        ...


class IdempotencyStore(LegacyIdempotency, Protocol):
    """``LegacyIdempotency`` and the earlier releases' writer, which no use case calls any
    more: tests record a key the way the old code path did with it."""

    async def put_if_absent(
        self, record: IdempotencyRecord, ttl_s: int
    ) -> IdempotencyRecord | None:
        """Insert unless (caller, key) exists (an LWT): None if ours, else the existing
        record. Raises ``StoreError``."""
        ...


# --- ordering a key's requests ------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class CachedKey:
    """What Redis holds for one (caller, Idempotency-Key): in progress, or done."""

    done: bool
    request_hash: str
    trigger_id: str | None = None
    fire_at_ms: int | None = None


class IdempotencyCache(Protocol):
    """Orders the requests of one key (one owner at a time) and remembers outcomes. Never the
    truth (the trigger row is): every method may raise ``CacheError``, and losing an entry
    only sends the next request to Cassandra."""

    async def get(self, caller: str, idem_key: str) -> CachedKey | None:
        """What is held for the key (None: nothing, or nothing this release can read)."""
        ...

    async def claim(self, caller: str, idem_key: str, request_hash: str) -> CachedKey | None:
        """In one step: set a short-lived in-progress marker unless the key holds anything,
        and answer what it held. None: this call set the marker (its caller owns the key
        until it expires or ``put_done``); else the entry there, in progress or done. An
        entry it cannot read raises ``CacheError`` (nothing was set)."""
        ...

    async def put_done(self, caller: str, idem_key: str, entry: CachedKey, ttl_ms: int) -> None:
        """Record the finished outcome (``entry.done``) for ``ttl_ms``."""
        ...

    async def release(self, caller: str, idem_key: str) -> None:
        """Forget whatever the key holds (an owner that failed gives the key back; a
        ``done`` entry lost this way only sends the next request to Cassandra)."""
        ...
