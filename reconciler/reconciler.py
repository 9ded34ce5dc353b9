"""The reconciler: the safety net. Each pass reads the due index of the past window (one
(minute, shard) partition at a time, never a table scan) and re-sends to SQS every trigger
that should have fired long ago but did not: still PENDING more than the grace past its due
time, or IN_FLIGHT with a claim nobody has finished. Each one is logged and counted: a leak
means a bug or an outage elsewhere.

Re-sending is safe: the dispatcher claims with an LWT, so a trigger that was only slow is
still delivered once.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Protocol

import structlog

from trigger_service.config.settings import Settings
from trigger_service.core.model import Trigger, is_overdue
from trigger_service.core.ports import (
    Clock,
    DueIndex,
    Enqueuer,
    Metrics,
    OutgoingMessage,
    TriggerStates,
)
from trigger_service.platform.supervisor import every

log = structlog.get_logger("reconciler")

# Gentle on purpose: a pass is a background safety net and must not slow live traffic.
_SCAN_CONCURRENCY = 4
_READ_CHUNK = 500


@dataclass(frozen=True)
class PassReport:
    scanned: int
    reinjected: int
    window_from_ms: int
    window_to_ms: int


class ReconcilerStore(TriggerStates, DueIndex, Protocol):
    """What the reconciler reads in the trigger store."""


class Reconciler:
    def __init__(
        self,
        settings: Settings,
        store: ReconcilerStore,
        queue: Enqueuer,
        clock: Clock,
        metrics: Metrics,
    ) -> None:
        self._s = settings
        self._store = store
        self._queue = queue
        self._clock = clock
        self._metrics = metrics

    def is_leak(self, t: Trigger, now_ms: int) -> bool:
        return is_overdue(t, now_ms, grace_ms=self._s.sweep.reconcile_grace_s * 1000,
                       callback_timeout_ms=int(self._s.dispatch.callback_timeout_s * 1000))

    async def run_once(self) -> PassReport:
        """One pass over [now - grace - window, now - grace]. Raises adapter errors."""
        now_ms = self._clock.now_ms()
        to_ms = now_ms - self._s.sweep.reconcile_grace_s * 1000
        from_ms = to_ms - self._s.sweep.reconcile_window_s * 1000
        slots = asyncio.Semaphore(_SCAN_CONCURRENCY)

        async def scan(shard: int) -> list[str]:
            async with slots:
                entries = await self._store.bucket_entries(shard, from_ms, to_ms)
            return [e.trigger_id for e in entries]

        ids = [i for chunk in await asyncio.gather(*(scan(s) for s in range(self._s.shards)))
               for i in chunk]
        leaked: list[Trigger] = []
        for i in range(0, len(ids), _READ_CHUNK):
            rows = await self._store.get_many(ids[i:i + _READ_CHUNK])
            leaked += [t for t in rows if t is not None and self.is_leak(t, now_ms)]
        if leaked:
            await self._queue.send_many([OutgoingMessage(t.trigger_id, t.fire_at_ms, 0)
                                         for t in leaked])
        for t in leaked:
            self._metrics.inc("leaks_reinjected_total")
            log.warning("leak_reinjected", trigger_id=t.trigger_id, caller=t.caller,
                        status=t.status.value, attempt=t.attempts, fire_at_ms=t.fire_at_ms,
                        late_ms=now_ms - t.due_at_ms())
        report = PassReport(len(ids), len(leaked), from_ms, to_ms)
        log.info("reconcile_pass", scanned=report.scanned, reinjected=report.reinjected)
        return report

    async def run(self, stop: asyncio.Event) -> None:
        """A pass now, then one every ``TRIGGER_RECONCILE_INTERVAL_S``, until ``stop``."""
        await every(stop, self._s.sweep.reconcile_interval_s, self.run_once, name="reconcile")
