"""What the API does, without HTTP: register, read, cancel and list triggers.

Durability order for a registration: (1) the idempotency record, when a key is given, (2) the
index entries and then the trigger row, (3) the SQS message for a direct
trigger, (4) the Redis ``done`` marker, (5) the response. A crash after (2) leaves a PENDING
row that the sweeper or the reconciler enqueues; a crash between (1) and (2) is repaired by
the next request with the same key, which re-creates the trigger from the stored request.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import structlog
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from trigger_service.batcher import Batcher
from trigger_service.callers import Caller
from trigger_service.cassandra_store import decode_request, encode_request
from trigger_service.clock import Clock
from trigger_service.errors import (
    CacheError,
    IdempotencyKeyReused,
    NotCancellable,
    NotFound,
    QueueError,
)
from trigger_service.metrics import Metrics
from trigger_service.model import (
    Path,
    Status,
    Trigger,
    fire_month,
    format_rfc3339_ms,
    is_trigger_id,
    new_trigger_id,
    shard_of,
)
from trigger_service.ports import (
    DelayQueue,
    IdempotencyCache,
    IdempotencyRecord,
    OutgoingMessage,
    TriggerStore,
)
from trigger_service.settings import Settings

log = structlog.get_logger(__name__)

# How long a request that lost the Redis SET NX race waits for the winner's answer before
# asking Cassandra (the truth) itself.
_IDEM_WAIT_S = 2.0
_IDEM_POLL_S = 0.02


@dataclass(frozen=True, slots=True)
class NewTrigger:
    """A validated registration request."""

    callback_url: str
    payload_json: str
    fire_at_ms: int  # already clamped to >= received_at_ms
    received_at_ms: int  # the one "now" of this request: delays and the path derive from it


@dataclass(frozen=True, slots=True)
class Registered:
    body: dict[str, Any]
    replayed: bool


def trigger_view(t: Trigger) -> dict[str, Any]:
    """The public JSON shape of a trigger."""
    return {
        "triggerId": t.trigger_id,
        "status": t.status.value,
        "fireAt": format_rfc3339_ms(t.fire_at_ms),
        "createdAt": format_rfc3339_ms(t.created_at_ms),
        "attempts": t.attempts,
        "lastError": t.last_error,
        "firedAt": format_rfc3339_ms(t.fired_at_ms) if t.fired_at_ms is not None else None,
        "callbackUrl": t.callback_url,
        "payload": json.loads(t.payload_json),
    }


class TriggerService:
    def __init__(
        self,
        settings: Settings,
        store: TriggerStore,
        queue: DelayQueue,
        cache: IdempotencyCache,
        clock: Clock,
        metrics: Metrics,
    ) -> None:
        self._s = settings
        self._store = store
        self._queue = queue
        self._cache = cache
        self._clock = clock
        self._metrics = metrics
        # Up to 10 sends share one SendMessageBatch; waiting 5 ms for company costs little
        # latency and saves most of the per-call cost (request signing, LocalStack work).
        self._sender: Batcher[OutgoingMessage] = Batcher(
            queue.send_many, max_batch=10, linger_s=0.005)

    async def close(self) -> None:
        await self._sender.drain()

    # --- register ----------------------------------------------------------------------
    async def register(
        self, caller: Caller, req: NewTrigger, idem_key: str | None, request_hash: str
    ) -> Registered:
        trigger = self._new_trigger(caller, req, req.received_at_ms, idem_key)
        if idem_key is None:
            await self._persist_and_enqueue(trigger)
            self._metrics.inc("triggers_registered_total")
            return Registered(self._created_body(trigger), replayed=False)
        return await self._register_idempotent(caller, trigger, idem_key, request_hash)

    def _new_trigger(
        self, caller: Caller, req: NewTrigger, now_ms: int, idem_key: str | None
    ) -> Trigger:
        trigger_id = new_trigger_id(now_ms)
        direct = req.fire_at_ms - now_ms <= self._s.direct_max_delay_s * 1000
        return Trigger(
            trigger_id=trigger_id,
            caller=caller.name,
            callback_url=req.callback_url,
            payload_json=req.payload_json,
            fire_at_ms=req.fire_at_ms,
            created_at_ms=now_ms,
            shard=shard_of(trigger_id, self._s.shards),
            path=Path.DIRECT if direct else Path.SWEEP,
            idem_key=idem_key,
        )

    @staticmethod
    def _created_body(t: Trigger) -> dict[str, Any]:
        return {"triggerId": t.trigger_id, "fireAt": format_rfc3339_ms(t.fire_at_ms),
                "status": Status.PENDING.value}

    def index_ttl_s(self, t: Trigger) -> int:
        """Index entries outlive the row's own retention by the whole retry schedule."""
        d = self._s.dispatch
        retry_span_s = sum(d.retry_backoff_s) + d.max_attempts * int(d.callback_timeout_s)
        ahead_s = max(0, (t.fire_at_ms - t.created_at_ms) // 1000)
        return ahead_s + self._s.retention_s + retry_span_s + 86_400

    async def _persist_and_enqueue(self, t: Trigger) -> None:
        await self._store.create(t, self.index_ttl_s(t))
        if t.path is Path.DIRECT:
            await self.enqueue(t)

    async def enqueue(self, t: Trigger) -> None:
        """Send a direct trigger to SQS, retrying; on final failure log and carry on.

        The row is already durable and PENDING, so a trigger whose send failed is not lost:
        the reconciler re-sends PENDING rows past their fire time. This only costs lateness.
        """
        delay_s = max(0, (t.fire_at_ms - self._clock.now_ms()) // 1000 - self._s.sqs.enqueue_lead_s)
        msg = OutgoingMessage(t.trigger_id, t.fire_at_ms, delay_s)
        try:
            async for attempt in AsyncRetrying(
                stop=stop_after_attempt(max(1, self._s.api.enqueue_retry_attempts)),
                wait=wait_exponential(multiplier=0.05, max=1),
                retry=retry_if_exception_type(QueueError),
                reraise=True,
            ):
                with attempt:
                    await self._sender.submit(msg)
        except QueueError as e:
            self._metrics.inc("enqueue_failures_total")
            log.error("enqueue_failed", trigger_id=t.trigger_id, caller=t.caller, error=str(e))

    async def _register_idempotent(
        self, caller: Caller, trigger: Trigger, idem_key: str, request_hash: str
    ) -> Registered:
        cached = await self._cache_get(caller.name, idem_key)
        if cached is None:
            got_lock = await self._cache_lock(caller.name, idem_key, request_hash)
            if not got_lock:
                cached = await self._wait_for_done(caller.name, idem_key)
        if cached is not None and cached.get("state") == "done":
            return self._replay(cached["hash"], request_hash, cached["response"])

        body = self._created_body(trigger)
        record = IdempotencyRecord(
            caller=caller.name, idem_key=idem_key, request_hash=request_hash,
            trigger_id=trigger.trigger_id, request_json=encode_request(trigger),
            response_json=json.dumps(body), created_at_ms=trigger.created_at_ms,
        )
        ttl_s = self._idem_ttl_s(trigger.fire_at_ms)
        applied, existing = await self._store.idem_put_if_absent(record, ttl_s)
        if not applied:
            assert existing is not None
            if existing.request_hash != request_hash:
                raise IdempotencyKeyReused(
                    "this Idempotency-Key was already used with a different request body")
            await self._ensure_created(existing)
            await self._cache_done(existing, ttl_s)
            return self._replay(existing.request_hash, request_hash, existing.response_json)
        await self._persist_and_enqueue(trigger)
        self._metrics.inc("triggers_registered_total")
        await self._cache_done(record, ttl_s)
        return Registered(body, replayed=False)

    def _idem_ttl_s(self, fire_at_ms: int) -> int:
        ahead_s = max(0, (fire_at_ms - self._clock.now_ms()) // 1000)
        return ahead_s + self._s.idempotency_retention_s

    def _replay(self, stored_hash: str, request_hash: str, response_json: str) -> Registered:
        if stored_hash != request_hash:
            raise IdempotencyKeyReused(
                "this Idempotency-Key was already used with a different request body")
        self._metrics.inc("idempotent_replays_total")
        return Registered(json.loads(response_json), replayed=True)

    async def _ensure_created(self, rec: IdempotencyRecord) -> None:
        """Re-create the trigger a crashed first request recorded but may not have written.

        Safe against a slow first writer: both writes carry the creation timestamp, so they
        write identical cells and neither can overwrite a later state transition.
        """
        if await self._store.get(rec.trigger_id) is not None:
            return
        t = decode_request(rec.trigger_id, rec.caller, rec.idem_key, rec.request_json)
        log.warning("idempotent_repair", trigger_id=t.trigger_id, caller=t.caller)
        await self._persist_and_enqueue(t)

    async def _wait_for_done(self, caller: str, idem_key: str) -> dict[str, Any] | None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _IDEM_WAIT_S
        while loop.time() < deadline:
            await asyncio.sleep(_IDEM_POLL_S)
            cached = await self._cache_get(caller, idem_key)
            if cached is None or cached.get("state") == "done":
                return cached
        return None

    async def _cache_get(self, caller: str, idem_key: str) -> dict[str, Any] | None:
        try:
            return await self._cache.get(caller, idem_key)
        except CacheError as e:  # the cache is only a fast path: Cassandra decides
            log.warning("idem_cache_unavailable", error=str(e))
            return None

    async def _cache_lock(self, caller: str, idem_key: str, request_hash: str) -> bool:
        try:
            return await self._cache.lock(caller, idem_key, request_hash)
        except CacheError as e:
            log.warning("idem_cache_unavailable", error=str(e))
            return True

    async def _cache_done(self, rec: IdempotencyRecord, ttl_s: int) -> None:
        try:
            await self._cache.put_done(
                rec.caller, rec.idem_key, rec.request_hash, rec.response_json, ttl_s * 1000)
        except CacheError as e:
            log.warning("idem_cache_unavailable", error=str(e))

    # --- read, cancel, list ------------------------------------------------------------
    async def get(self, caller: Caller, trigger_id: str) -> Trigger:
        """The caller's trigger; another caller's is ``NotFound`` exactly like an unknown id."""
        t = await self._store.get(trigger_id) if is_trigger_id(trigger_id) else None
        if t is None or t.caller != caller.name:
            raise NotFound(f"no trigger {trigger_id}")
        return t

    async def cancel(self, caller: Caller, trigger_id: str) -> Trigger:
        """PENDING → CANCELLED (idempotent). Raises ``NotCancellable`` once it is in flight
        or finished. Lazy: the SQS message stays; the dispatcher drops it at fire time."""
        for _ in range(5):
            t = await self.get(caller, trigger_id)
            if t.status is Status.CANCELLED:
                return t
            if t.status is not Status.PENDING:
                raise NotCancellable(f"trigger {trigger_id} is {t.status.value}",
                                     status=t.status.value)
            new = t.with_status(Status.CANCELLED, next_attempt_at_ms=None)
            if await self._store.compare_and_set(t, new, ttl_s=self._s.retention_s):
                log.info("trigger_cancelled", trigger_id=trigger_id, caller=caller.name)
                return new
        raise NotCancellable(f"trigger {trigger_id} is changing state; try again",
                             status=t.status.value)

    async def list(
        self, caller: Caller, *, status: Status | None, limit: int,
        cursor: tuple[int, int, str] | None,
    ) -> tuple[Sequence[Trigger], tuple[int, int, str] | None]:
        now_ms = self._clock.now_ms()
        day_ms = 86_400_000
        first = fire_month(now_ms - (self._s.retention_days + 2) * day_ms)
        last = fire_month(now_ms + (self._s.api.max_fire_ahead_days + 2) * day_ms)
        start = cursor or (first, -(2**63), "")
        page = await self._store.list_by_caller(
            caller.name, start=start, last_month=last, limit=limit, status=status)
        return page.triggers, page.next_cursor
