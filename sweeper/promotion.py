"""Promotion: handing the triggers the timing wheel says are due over to SQS, in full batches.

Whatever expires in one wheel tick is promoted together, whatever its shard: the rows are
read again (cancelled or finished ones are never sent) in ``get_many`` requests of 100, a
few at once, and the PENDING ones of each sent in one ``send_many`` call, a few at once: the
queue sends those of one delay as packs (``adapters.sqs_packs``), ten packs a
SendMessageBatch. A tick that holds one trigger in each of 30 shards costs one
SendMessageBatch request, not 30 of one message each; a herd of 100 due in one second, one
request of two messages. Nothing is sent early: only
what has expired is promoted, and each message's delay is computed when its batch is sent.

The outcome is per trigger: a failed read or send fails only the triggers it carried, and
the sweeper retries those (a send that failed may have been partly applied: the copies it
left are absorbed by the dispatcher's claim LWT).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass

from trigger_service.core.errors import AdapterError
from trigger_service.core.model import Status, Trigger
from trigger_service.core.ports import Clock, Enqueuer, TriggerStates
from trigger_service.core.ports.values import OutgoingMessage
from trigger_service.core.time.timing import sqs_delay_s
from trigger_service.core.trace_context import Tracing

# Bounds on concurrent requests, shared by every promotion of the sweeper, so that a hot
# minute cannot starve the lease upkeep on the same event loop.
_READ_CHUNK = 100
_READ_CONCURRENCY = 4
_SEND_CONCURRENCY = 8


@dataclass(frozen=True, slots=True)
class Due:
    """A trigger whose promotion time has come."""

    trigger_id: str
    fire_at_ms: int


@dataclass(frozen=True)
class Outcome:
    sent: int = 0
    skipped: int = 0  # not PENDING any more (cancelled, finished, expired): nothing to send
    failed: frozenset[str] = frozenset()  # read or send failed: to be promoted again
    error: str | None = None  # the first failure's

    def __add__(self, other: Outcome) -> Outcome:
        return Outcome(self.sent + other.sent, self.skipped + other.skipped,
                       self.failed | other.failed, self.error or other.error)


class Promoter:
    def __init__(self, store: TriggerStates, queue: Enqueuer, clock: Clock,
                 enqueue_lead_s: int, tracing: Tracing | None = None) -> None:
        """``tracing``: a ``trigger.promote`` span per trigger sent (None: export off)."""
        self._tracing = tracing or Tracing()
        self._store = store
        self._queue = queue
        self._clock = clock
        self._lead_s = enqueue_lead_s
        self._reads = asyncio.Semaphore(_READ_CONCURRENCY)
        self._sends = asyncio.Semaphore(_SEND_CONCURRENCY)

    async def promote(self, due: Sequence[Due]) -> Outcome:
        """Send each of ``due`` that is still PENDING. Never raises an adapter's error: the
        triggers it concerned are in ``Outcome.failed``. ``due`` is read in its order (put
        the ones that must not wait behind a crowd first)."""
        chunks = [due[i:i + _READ_CHUNK] for i in range(0, len(due), _READ_CHUNK)]
        outcomes = await asyncio.gather(*(self._chunk(c) for c in chunks))
        return sum(outcomes, Outcome())

    async def _chunk(self, chunk: Sequence[Due]) -> Outcome:
        try:
            async with self._reads:
                rows = await self._store.get_many([d.trigger_id for d in chunk])
        except AdapterError as e:
            return Outcome(failed=frozenset(d.trigger_id for d in chunk), error=str(e))
        # High priority first (each to its lane: ``core.lanes``), then normal, then low.
        pending = sorted(((d, t) for d, t in zip(chunk, rows, strict=True)
                          if t is not None and t.status is Status.PENDING),
                         key=lambda dt: dt[1].priority.rank)
        sent = await self._send(pending) if pending else Outcome()
        return sent + Outcome(skipped=len(chunk) - len(pending))

    async def _send(self, group: Sequence[tuple[Due, Trigger]]) -> Outcome:
        """One send_many of a chunk's pending triggers (each message says where its row is,
        as read)."""
        try:
            async with self._sends:
                now_ms = self._clock.now_ms()
                start_ns = time.time_ns()
                await self._queue.send_many([
                    OutgoingMessage(d.trigger_id, d.fire_at_ms,
                                    sqs_delay_s(d.fire_at_ms, now_ms, self._lead_s),
                                    t.home_at_ms, t.shard if t.home_at_ms is not None else None,
                                    t.caller, t.priority)
                    for d, t in group])
        except AdapterError as e:
            return Outcome(failed=frozenset(d.trigger_id for d, _ in group), error=str(e))
        if self._tracing.recording:  # one SendMessageBatch: each trigger's span is its time
            end_ns = time.time_ns()
            for _, t in group:
                self._tracing.record("trigger.promote", t, start_ns, end_ns,
                                     {"messaging.batch.message_count": len(group)})
        return Outcome(sent=len(group))
