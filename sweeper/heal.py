"""The due-scan: each sweeper heals its own shards within seconds.

Every ``TRIGGER_HEAL_INTERVAL_S`` it reads the due index of each owned shard from where it
left off up to ``now - TRIGGER_OVERDUE_GRACE_S`` (both routes: DIRECT triggers have no other
fast net) and the rows of what it found, plus the triggers it is still watching. A trigger
that is overdue (``core.model.is_overdue``: PENDING past the grace, or IN_FLIGHT with a claim
stale past it) has leaked: its SQS message was lost (a queue lost or purged, a failed send)
or its claimer died. It is re-sent, counted (``overdue_resent_total``) and logged
(``overdue_resent``). Re-sending is harmless when it was only slow (the claim LWT delivers
once) but not free, so an overloaded system is not flooded with copies: while SQS holds at
least as many visible messages as there are overdue triggers, the dispatchers are behind, not
missing messages, and the re-sends wait (``heal_deferred_total``); and each trigger is
re-sent again only after a doubling pause (grace, 2 x grace, ... up to 5 minutes).

A trigger that is not finished yet (due within the grace, or waiting for a retry) stays
watched and is looked at again on the next passes until it finishes; the scan itself never
reads a bucket twice. A new owner starts ``TRIGGER_HEAL_LOOKBACK_S`` back. What falls out
(more than ``_MAX_WATCHED`` open triggers per shard, a gap while nobody owned a shard) is the
reconciler's, which reads the last hours.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass, replace
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
    QueueDepth,
    TriggerStates,
)

log = structlog.get_logger("sweeper")

_READ_CHUNK = 200
_SCAN_CONCURRENCY = 4
_MAX_WATCHED = 20_000
_MAX_RESEND_PAUSE_MS = 300_000


class HealStore(TriggerStates, DueIndex, Protocol):
    """What the due-scan reads."""


class HealQueue(Enqueuer, QueueDepth, Protocol):
    """What the due-scan sends to, and asks how far behind it is."""


@dataclass(frozen=True, slots=True)
class _Watched:
    home_at_ms: int | None  # where its row is, as its index entry said (None: ask `triggers`)
    shard: int
    resent_at_ms: int = 0
    resends: int = 0


@dataclass(frozen=True)
class HealReport:
    scanned: int  # index entries read
    watched: int  # open triggers still watched afterwards
    resent: int
    deferred: int = 0  # overdue, but SQS has a backlog at least as large: not re-sent yet


class DueScan:
    def __init__(self, settings: Settings, store: HealStore, queue: HealQueue, clock: Clock,
                 metrics: Metrics) -> None:
        self._grace_ms = settings.sweep.overdue_grace_s * 1000
        self._lookback_ms = settings.sweep.heal_lookback_s * 1000
        self._timeout_ms = int(settings.dispatch.callback_timeout_s * 1000)
        self._store = store
        self._queue = queue
        self._clock = clock
        self._metrics = metrics
        self._scanned_until: dict[int, int] = {}
        # shard -> open trigger id -> its re-sends so far
        self._watched: dict[int, dict[str, _Watched]] = {}
        # shard -> how often it was forgotten: a pass that began before a forget must not
        # write its cursor and watch back over the new ownership's fresh start.
        self._forgotten: dict[int, int] = {}

    def forget(self, shard: int) -> None:
        """Stop healing a shard (it changed owner). A pass over it still running ends
        without effect, so a shard owned again starts ``TRIGGER_HEAL_LOOKBACK_S`` back."""
        self._scanned_until.pop(shard, None)
        self._watched.pop(shard, None)
        self._forgotten[shard] = self._forgotten.get(shard, 0) + 1

    async def run_once(self, shards: Iterable[int]) -> HealReport:
        """One pass over ``shards``; raises adapter errors (the next pass retries: the cursor
        of a shard whose pass failed did not move)."""
        now_ms = self._clock.now_ms()
        slots = asyncio.Semaphore(_SCAN_CONCURRENCY)

        async def one(shard: int) -> tuple[int, list[Trigger]]:
            async with slots:
                return await self._shard(shard, now_ms)

        results = await asyncio.gather(*(one(s) for s in shards))
        overdue = [t for _, found in results for t in found]
        scanned = sum(n for n, _ in results)
        if overdue and await self._queue.visible_backlog() >= len(overdue):
            self._metrics.inc("heal_deferred_total", len(overdue))
            log.info("heal_deferred_backlog", overdue=len(overdue))
            return HealReport(scanned, self._watch_count(), 0, len(overdue))
        if overdue:
            await self._queue.send_many(
                [OutgoingMessage.of(t, 0) for t in overdue])
        for t in overdue:
            shard_watch = self._watched.setdefault(t.shard, {})
            before = shard_watch.get(t.trigger_id, _Watched(t.home_at_ms, t.shard))
            shard_watch[t.trigger_id] = replace(before, resent_at_ms=now_ms,
                                                resends=before.resends + 1)
            self._metrics.inc("overdue_resent_total")
            log.warning("overdue_resent", trigger_id=t.trigger_id, caller=t.caller,
                        status=t.status.value, attempt=t.attempts, route=t.route.value,
                        late_ms=now_ms - t.due_at_ms())
        return HealReport(scanned, self._watch_count(), len(overdue))

    def _watch_count(self) -> int:
        return sum(len(w) for w in self._watched.values())

    def _may_resend(self, w: _Watched, now_ms: int) -> bool:
        pause_ms = min(self._grace_ms << max(0, w.resends - 1), _MAX_RESEND_PAUSE_MS)
        return w.resends == 0 or now_ms - w.resent_at_ms >= pause_ms

    async def _shard(self, shard: int, now_ms: int) -> tuple[int, list[Trigger]]:
        """Scan one shard; returns (entries read, the overdue triggers to re-send)."""
        until_ms = now_ms - self._grace_ms
        epoch = self._forgotten.get(shard, 0)
        start_ms = self._scanned_until.get(shard, now_ms - self._lookback_ms)
        entries = (await self._store.bucket_entries(shard, start_ms, until_ms)
                   if until_ms > start_ms else [])
        if self._forgotten.get(shard, 0) != epoch:
            return len(entries), []
        watched = dict(self._watched.get(shard, {}))
        for e in entries:
            watched.setdefault(e.trigger_id, _Watched(e.home_at_ms, e.shard))
        ids = list(watched)
        where = [(tid, w.home_at_ms, w.shard) for tid, w in watched.items()]
        rows: list[Trigger | None] = []
        for i in range(0, len(where), _READ_CHUNK):
            # Rows read where the entries say (one request per row partition), not through
            # each trigger's pointer.
            rows += await self._store.get_many_at(where[i:i + _READ_CHUNK])
        if self._forgotten.get(shard, 0) != epoch:
            return len(entries), []
        still: dict[str, _Watched] = {}
        overdue: list[Trigger] = []
        for tid, t in zip(ids, rows, strict=True):
            if t is None or t.status.terminal:
                continue
            if (is_overdue(t, now_ms, grace_ms=self._grace_ms,
                           callback_timeout_ms=self._timeout_ms)
                    and self._may_resend(watched[tid], now_ms)):
                overdue.append(t)
            still[tid] = watched[tid]
        if len(still) > _MAX_WATCHED:
            log.warning("heal_watch_overflow", shard=shard, open=len(still))
            still = dict(sorted(still.items())[-_MAX_WATCHED:])
        self._watched[shard] = still
        self._scanned_until[shard] = max(start_ms, until_ms)
        return len(entries), overdue
