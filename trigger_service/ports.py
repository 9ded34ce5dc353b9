"""The boundaries, one ``Protocol`` each. Implementations live one per module.

- ``TriggerStore``     durable truth (``cassandra_store.CassandraStore``)
- ``DelayQueue``       the execution lane (``sqs_queue.SqsQueue``)
- ``IdempotencyCache`` fast path for Idempotency-Key (``redis_cache.RedisIdempotencyCache``)
- ``Channel``          how a due trigger is delivered (``dispatcher.http_channel.HttpChannel``)
- ``Clock``            in ``clock.py``
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from trigger_service.model import Path, Status, Trigger


@dataclass(frozen=True, slots=True)
class IdempotencyRecord:
    """What one (caller, Idempotency-Key) was first used for."""

    caller: str
    idem_key: str
    request_hash: str
    trigger_id: str
    request_json: str  # the Trigger's creation fields, to re-create it if its writer died
    response_json: str
    created_at_ms: int


@dataclass(frozen=True, slots=True)
class BucketEntry:
    """One due-index entry: which trigger fires when, in which shard, enqueued by whom."""

    trigger_id: str
    fire_at_ms: int
    shard: int
    path: Path


@dataclass(frozen=True, slots=True)
class ListPage:
    triggers: list[Trigger]
    next_cursor: tuple[int, int, str] | None  # (fire_month, fire_at_ms, trigger_id)


class TriggerStore(Protocol):
    async def create(self, trigger: Trigger, index_ttl_s: int) -> None:
        """Write a new PENDING trigger and its index entries (the entries first, the row last,
        so every row that exists can be found through the indexes).

        Idempotent: writes carry the creation time as their timestamp, so repeating the call
        with the same trigger rewrites identical cells and can never undo a later transition.
        Raises ``StoreError``.
        """
        ...

    async def get(self, trigger_id: str) -> Trigger | None:
        """Read one trigger (None if unknown or expired). Raises ``StoreError``."""
        ...

    async def get_many(self, trigger_ids: Sequence[str]) -> list[Trigger | None]:
        """``get`` for each id, concurrently, in order."""
        ...

    async def compare_and_set(
        self, old: Trigger, new: Trigger, *, ttl_s: int | None = None
    ) -> bool:
        """LWT: write ``new``'s mutable fields iff status, claim_id and attempts still equal
        ``old``'s. With ``ttl_s`` every column is rewritten with that TTL (terminal states).
        Returns whether it applied. Raises ``StoreError`` (outcome unknown on a timeout).
        """
        ...

    async def list_by_caller(
        self,
        caller: str,
        *,
        start: tuple[int, int, str],
        last_month: int,
        limit: int,
        status: Status | None,
    ) -> ListPage:
        """The caller's triggers with (month, fire_at_ms, id) after ``start``, by fire time."""
        ...

    async def idem_put_if_absent(
        self, record: IdempotencyRecord, ttl_s: int
    ) -> tuple[bool, IdempotencyRecord | None]:
        """``INSERT ... IF NOT EXISTS``: (True, None) if ours, else (False, the existing one)."""
        ...

    async def ping(self) -> None:
        """Raise ``StoreError`` unless Cassandra answers a query."""
        ...

    async def bucket_entries(
        self, shard: int, after_ms: int, until_ms: int, *, page_size: int = 2000
    ) -> list[BucketEntry]:
        """Due-index entries of ``shard`` with ``after_ms < fire_at_ms <= until_ms``."""
        ...

    async def sweep_cursors(self, group: str) -> dict[int, int]:
        """shard → promoted_until_ms of a sweeper group."""
        ...

    async def save_sweep_cursor(
        self, group: str, shard: int, promoted_until_ms: int, owner: str, fence: int
    ) -> None: ...


@dataclass(frozen=True, slots=True)
class OutgoingMessage:
    trigger_id: str
    fire_at_ms: int
    delay_s: int


@dataclass(frozen=True, slots=True)
class ReceivedMessage:
    message_id: str
    receipt_handle: str
    trigger_id: str
    fire_at_ms: int
    receive_count: int


class DelayQueue(Protocol):
    async def send_many(self, messages: Sequence[OutgoingMessage]) -> None:
        """Enqueue all (batched); raises ``QueueError`` if any could not be sent."""
        ...

    async def receive(
        self, *, max_messages: int, wait_s: int, visibility_s: int
    ) -> list[ReceivedMessage]: ...

    async def delete_many(self, receipt_handles: Sequence[str]) -> None: ...

    async def change_visibility(self, receipt_handle: str, visibility_s: int) -> None: ...

    async def send_dead_letter(self, trigger_id: str, fire_at_ms: int, reason: str) -> None: ...

    async def ping(self) -> None: ...


class IdempotencyCache(Protocol):
    """Optional accelerator: every method may raise ``CacheError`` and callers carry on."""

    async def get(self, caller: str, idem_key: str) -> dict[str, str] | None: ...

    async def lock(self, caller: str, idem_key: str, request_hash: str) -> bool:
        """SET NX a short-lived ``pending`` marker; True if this request got it."""
        ...

    async def put_done(
        self, caller: str, idem_key: str, request_hash: str, response_json: str, ttl_ms: int
    ) -> None: ...

    async def ping(self) -> None: ...


@dataclass(frozen=True, slots=True)
class DeliveryResult:
    ok: bool
    status_code: int | None
    error: str | None


class Channel(Protocol):
    async def deliver(self, trigger: Trigger, attempt: int) -> DeliveryResult:
        """Deliver once; never raises for the receiver's failures (they are a result)."""
        ...
