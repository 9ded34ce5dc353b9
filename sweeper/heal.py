"""The due-scan: each sweeper heals its own shards within seconds.

Every ``TRIGGER_HEAL_INTERVAL_S`` it reads the due index of each owned shard from where it
left off up to ``now - TRIGGER_HEAL_OVERDUE_GRACE_S`` (both routes: DIRECT triggers have no other
fast net) and the rows of what it found (where each entry says the row is), plus those of the
triggers it watches whose time to be looked at again has come. A trigger that is overdue
(``core.model.is_overdue``: PENDING past the grace, or IN_FLIGHT with a claim stale past it)
has leaked: its SQS message was lost (a queue lost or purged, a failed send) or its claimer
died. It is re-sent, counted (``overdue_resent_total``) and logged (``overdue_resent``).
Re-sending is harmless when it was only slow (the claim LWT delivers once) but not free, so
an overloaded system is not flooded with copies: while SQS holds at least as many visible
messages as there are rows to look at, the dispatchers are behind, not missing messages, and
nothing is read (``heal_deferred_total``; they are looked at a grace later); and each trigger
is re-sent again only after a doubling pause (grace, 2 x grace, ... up to 5 minutes).

What the scan reads does not grow with what is stored: a trigger that is not finished is
watched only until the moment it could next be overdue (its retry time plus the grace, its
claim's staleness, the next re-send's pause) and not read before then; one whose next
occurrence lies beyond the scan's cursor is not watched at all, since that occurrence's index
entry brings it back when it is due. The scan never reads a bucket twice. A new owner starts
``TRIGGER_HEAL_LOOKBACK_S`` back. What falls out (more than ``_MAX_WATCHED`` open triggers per
shard, a gap while nobody owned a shard) is the reconciler's, which reads the last hours.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, replace
from functools import partial
from typing import Protocol, TypeVar

import structlog

from trigger_service.config.settings import Settings
from trigger_service.core.model import Status, Trigger, is_overdue
from trigger_service.core.ports import Clock, DueIndex, Enqueuer, Metrics, QueueDepth, TriggerStates
from trigger_service.core.ports.values import OutgoingMessage

log = structlog.get_logger("sweeper")
T = TypeVar("T")

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
    look_at_ms: int = 0  # not read again before this
    resent_at_ms: int = 0
    resends: int = 0


@dataclass(frozen=True)
class HealReport:
    scanned: int  # index entries read
    watched: int  # open triggers still watched afterwards
    resent: int
    deferred: int = 0  # to be looked at, but SQS has a backlog at least as large: not read


@dataclass(frozen=True)
class _Part:
    """One shard's part of a pass: what its index gave, and what is to be read now."""

    shard: int
    epoch: int  # the shard's forget count when the pass began
    until_ms: int  # the cursor after this pass
    scanned: int
    to_read: dict[str, _Watched]
    resting: dict[str, _Watched]  # watched, not to be looked at yet


class DueScan:
    def __init__(self, settings: Settings, store: HealStore, queue: HealQueue, clock: Clock,
                 metrics: Metrics) -> None:
        self._grace_ms = settings.heal.overdue_grace_s * 1000
        self._lookback_ms = settings.heal.lookback_s * 1000
        self._timeout_ms = int(settings.dispatch.callback_timeout_s * 1000)
        self._store = store
        self._queue = queue
        self._clock = clock
        self._metrics = metrics
        self._scanned_until: dict[int, int] = {}
        # shard -> open trigger id -> where its row is, when to look at it, its re-sends
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

        async def bounded(step: Callable[[], Awaitable[T]]) -> T:
            # The step's coroutine is made once a slot is held: one made before would be
            # left never awaited when the pass is cancelled (the sweeper stopping) meanwhile.
            async with slots:
                return await step()

        parts = await asyncio.gather(*(bounded(partial(self._index, s, now_ms))
                                       for s in shards))
        scanned = sum(p.scanned for p in parts)
        wanted = sum(len(p.to_read) for p in parts)
        if wanted and await self._queue.visible_backlog() >= wanted:
            later = now_ms + self._grace_ms
            for p in parts:
                self._settle(p, {**p.resting, **{
                    tid: replace(w, look_at_ms=later) for tid, w in p.to_read.items()}})
            self._metrics.inc("heal_deferred_total", wanted)
            log.info("heal_deferred_backlog", waiting=wanted)
            return HealReport(scanned, self._watch_count(), 0, wanted)
        found = await asyncio.gather(*(bounded(partial(self._look, p, now_ms)) for p in parts))
        overdue = [t for ts in found for t in ts]
        if overdue:
            await self._queue.send_many(
                [OutgoingMessage.of(t, 0) for t in overdue])
        for t in overdue:
            shard_watch = self._watched.setdefault(t.shard, {})
            before = shard_watch.get(t.trigger_id, _Watched(t.home_at_ms, t.shard))
            resends = before.resends + 1
            shard_watch[t.trigger_id] = replace(
                before, resent_at_ms=now_ms, resends=resends,
                look_at_ms=now_ms + self._pause_ms(resends))
            self._metrics.inc("overdue_resent_total")
            log.warning("overdue_resent", trigger_id=t.trigger_id, caller=t.caller,
                        status=t.status.value, attempt=t.attempts, route=t.route.value,
                        late_ms=now_ms - t.due_at_ms())
        return HealReport(scanned, self._watch_count(), len(overdue))

    def _watch_count(self) -> int:
        return sum(len(w) for w in self._watched.values())

    def _pause_ms(self, resends: int) -> int:
        """How long after its last re-send a trigger waits for the next one."""
        return min(self._grace_ms << max(0, resends - 1), _MAX_RESEND_PAUSE_MS)

    def _may_resend(self, w: _Watched, now_ms: int) -> bool:
        return w.resends == 0 or now_ms - w.resent_at_ms >= self._pause_ms(w.resends)

    def _overdue_at(self, t: Trigger) -> int:
        """The first moment ``is_overdue`` holds for ``t`` as it is now."""
        if t.status is Status.IN_FLIGHT:
            return t.watch_from_ms(self._timeout_ms, self._grace_ms) + 1
        return t.due_at_ms() + self._grace_ms + 1

    async def _index(self, shard: int, now_ms: int) -> _Part:
        """A shard's new index entries, and which of its watched triggers to read now."""
        until_ms = now_ms - self._grace_ms
        epoch = self._forgotten.get(shard, 0)
        start_ms = self._scanned_until.get(shard, now_ms - self._lookback_ms)
        entries = (await self._store.bucket_entries(shard, start_ms, until_ms)
                   if until_ms > start_ms else [])
        watch = self._watched.get(shard, {})
        to_read = {tid: w for tid, w in watch.items() if w.look_at_ms <= now_ms}
        resting = {tid: w for tid, w in watch.items() if w.look_at_ms > now_ms}
        for e in entries:
            if e.trigger_id not in resting:
                to_read.setdefault(e.trigger_id, _Watched(e.home_at_ms, e.shard))
        return _Part(shard, epoch, max(start_ms, until_ms), len(entries), to_read, resting)

    async def _look(self, p: _Part, now_ms: int) -> list[Trigger]:
        """Read ``p``'s rows; returns the overdue ones to re-send now, and keeps watching
        what is not finished until it could next be overdue."""
        where = [(tid, w.home_at_ms, w.shard) for tid, w in p.to_read.items()]
        rows: list[Trigger | None] = []
        for i in range(0, len(where), _READ_CHUNK):
            # Rows read where the entries say (one request per row partition), not through
            # each trigger's pointer.
            rows += await self._store.get_many_at(where[i:i + _READ_CHUNK])
        if self._forgotten.get(p.shard, 0) != p.epoch:
            return []  # changed owner meanwhile: the new ownership starts afresh
        still = dict(p.resting)
        overdue: list[Trigger] = []
        for (tid, w), t in zip(p.to_read.items(), rows, strict=True):
            if t is None or t.status.terminal or t.status is Status.PAUSED:
                continue  # (a resume enqueues it; the reconciler is the net behind that)
            if is_overdue(t, now_ms, grace_ms=self._grace_ms,
                          callback_timeout_ms=self._timeout_ms):
                if self._may_resend(w, now_ms):
                    overdue.append(t)
                    still[tid] = w  # run_once updates it once sent; unsent, the next pass
                else:
                    still[tid] = replace(
                        w, look_at_ms=w.resent_at_ms + self._pause_ms(w.resends))
            elif (t.status is Status.PENDING and t.due_at_ms() == t.fire_at_ms
                  and t.fire_at_ms > p.until_ms):
                continue  # its next occurrence's index entry brings it back when due
            else:
                still[tid] = replace(w, look_at_ms=self._overdue_at(t))
        self._settle(p, still)
        return overdue

    def _settle(self, p: _Part, watch: dict[str, _Watched]) -> None:
        """Keep ``watch`` and move the cursor, unless the shard changed owner meanwhile."""
        if self._forgotten.get(p.shard, 0) != p.epoch:
            return
        if len(watch) > _MAX_WATCHED:
            log.warning("heal_watch_overflow", shard=p.shard, open=len(watch))
            watch = dict(sorted(watch.items(), key=lambda i: i[1].look_at_ms)[:_MAX_WATCHED])
        self._watched[p.shard] = watch
        self._scanned_until[p.shard] = p.until_ms
