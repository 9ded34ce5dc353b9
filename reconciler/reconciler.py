"""The reconciler: the deep safety net behind the sweepers' due-scan. Each pass reads, shard
by shard, the due index from the shard's saved cursor up to ``now - grace`` (one (minute,
shard) partition at a time, never a table scan) and re-sends to SQS every trigger that should
have fired long ago but did not: still PENDING more than the grace past its due time, or
IN_FLIGHT with a claim nobody has finished. Each one is logged and counted: a leak means a
bug or an outage elsewhere.

The cursor (``sweep_cursors`` under the group ``reconciler:<sweep group>``) is a low
watermark: it moves up to the pass's end, or to just before the oldest trigger of the window
still open (a retry waiting, a leak just re-sent), so an open trigger is read again on every
pass until it finishes, however long the gap between passes; it never falls further back
than ``TRIGGER_RECONCILE_LOOKBACK_H``. A shard whose pass fails keeps its cursor and the
other shards go on.

Re-sending is safe: the dispatcher claims with an LWT, so a trigger that was only slow is
still delivered once.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Protocol

import structlog

from trigger_service.config.settings import Settings
from trigger_service.core.errors import AdapterError
from trigger_service.core.model import Trigger, is_overdue
from trigger_service.core.ports import (
    Clock,
    DueIndex,
    Enqueuer,
    Metrics,
    SweepCursors,
    TriggerStates,
)
from trigger_service.core.ports.values import OutgoingMessage
from trigger_service.platform.supervisor import every

log = structlog.get_logger("reconciler")

# Gentle on purpose: a pass is a background safety net and must not slow live traffic.
_SCAN_CONCURRENCY = 4
_READ_CHUNK = 500


_OWNER = "reconciler"


@dataclass(frozen=True)
class PassReport:
    scanned: int
    reinjected: int
    window_to_ms: int
    failed_shards: tuple[int, ...] = ()


class ReconcilerStore(TriggerStates, DueIndex, SweepCursors, Protocol):
    """What the reconciler reads (and its cursors) in the trigger store."""


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
        grace_ms = self._s.reconcile.grace_s * 1000
        return is_overdue(t, now_ms, grace_ms=grace_ms, claim_grace_ms=grace_ms,
                          callback_timeout_ms=int(self._s.dispatch.callback_timeout_s * 1000))

    @property
    def cursor_group(self) -> str:
        return f"reconciler:{self._s.sweep.group}"

    async def run_once(self) -> PassReport:
        """One pass over every shard, each from its cursor to ``now - grace``. A shard that
        fails is logged, counted (``reconcile_shard_failures_total``) and reported; the
        cursors cannot be read: raises ``StoreError``."""
        now_ms = self._clock.now_ms()
        rc = self._s.reconcile
        to_ms = now_ms - rc.grace_s * 1000
        oldest_ms = now_ms - rc.lookback_h * 3_600_000
        cursors = await self._store.load_cursors(self.cursor_group)
        slots = asyncio.Semaphore(_SCAN_CONCURRENCY)

        async def one(shard: int) -> tuple[int, int] | None:
            start_ms = cursors.get(shard, to_ms - rc.window_s * 1000)
            try:
                async with slots:
                    return await self._shard(shard, max(start_ms, oldest_ms), to_ms, now_ms)
            except AdapterError as e:
                self._metrics.inc("reconcile_shard_failures_total")
                log.warning("reconcile_shard_failed", shard=shard, error=str(e))
                return None

        results = await asyncio.gather(*(one(s) for s in range(self._s.shards)))
        failed = tuple(s for s, r in enumerate(results) if r is None)
        done = [r for r in results if r is not None]
        report = PassReport(sum(n for n, _ in done), sum(k for _, k in done), to_ms, failed)
        log.info("reconcile_pass", scanned=report.scanned, reinjected=report.reinjected,
                 failed_shards=len(failed))
        return report

    async def _shard(self, shard: int, from_ms: int, to_ms: int,
                     now_ms: int) -> tuple[int, int]:
        """Read, re-send the leaks, move the cursor; (entries read, leaks re-sent)."""
        entries = await self._store.bucket_entries(shard, from_ms, to_ms)
        rows: list[Trigger | None] = []
        for i in range(0, len(entries), _READ_CHUNK):
            rows += await self._store.get_many([e.trigger_id for e in entries[i:i + _READ_CHUNK]])
        open_ = [t for t in rows if t is not None and not t.status.terminal]
        leaked = [t for t in open_ if self.is_leak(t, now_ms)]
        if leaked:
            await self._queue.send_many([OutgoingMessage.of(t, 0) for t in leaked])
        for t in leaked:
            self._metrics.inc("leaks_reinjected_total")
            log.warning("leak_reinjected", trigger_id=t.trigger_id, caller=t.caller,
                        status=t.status.value, attempt=t.attempts, fire_at_ms=t.fire_at_ms,
                        late_ms=now_ms - t.due_at_ms())
        # The low watermark: just before the oldest trigger still open, else the window's end.
        cursor_ms = min((t.fire_at_ms - 1 for t in open_), default=to_ms)
        if cursor_ms != from_ms:
            await self._store.save_cursor(self.cursor_group, shard, cursor_ms, _OWNER, 0)
        return len(entries), len(leaked)

    async def run(self, stop: asyncio.Event) -> None:
        """A pass now, then one every ``TRIGGER_RECONCILE_INTERVAL_S``, until ``stop``."""
        await every(stop, self._s.reconcile.interval_s, self.run_once, name="reconcile")
