"""The sweeper: owns shards through Redis leases, reads their due buckets from Cassandra a
horizon ahead, holds each trigger in the timing wheel and hands it to SQS shortly before it
is due.

Why nothing is lost:

- a shard's progress is a cursor (``sweep_cursors``): every SWEEP trigger due at or before it
  has been sent to SQS (or found finished). It advances only past scan windows whose every
  trigger was dealt with, so a new owner that resumes there re-reads anything in flight;
- a SWEEP trigger is created due later than ``now + direct max``, beyond anything a sweeper
  has scanned (``now + horizon``, settings enforce horizon < direct max), so no write lands
  behind a scan;
- a promotion that fails (SQS down) puts the triggers back in the wheel for a retry.

Duplicates (a shard changing owner between a send and the cursor write, an owner that loses
its lease between the fencing check and the send) only duplicate the SQS message: the
dispatcher's claim LWT delivers once.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import os
import socket
import uuid
from collections import defaultdict, deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

import structlog

from sweeper.heal import DueScan, HealQueue, HealReport
from sweeper.promotion import Due, Promoter
from sweeper.timing_wheel import Expired, TimingWheel
from sweeper.wheel_driver import WheelDriver
from trigger_service.config.settings import Settings
from trigger_service.core.errors import AdapterError
from trigger_service.core.model import Route
from trigger_service.core.ports import (
    Clock,
    DueIndex,
    Lease,
    Metrics,
    SweepCursors,
    TriggerStates,
)
from trigger_service.core.trace_context import Tracing
from trigger_service.platform.supervisor import every, run_together

log = structlog.get_logger("sweeper")

# Bounds on concurrent work, so a hot minute cannot starve the lease upkeep that runs on the
# same event loop (a late renewal loses the shards and makes the next owner re-promote); the
# promotions' reads and sends have their own (sweeper.promotion).
_SCAN_CONCURRENCY = 8
_PROMOTE_CONCURRENCY = 4
_RETRY_PROMOTION_MS = 1000


@dataclass(eq=False)
class _Window:
    """One scan (after, end] of one shard: complete when every trigger read is dealt with."""

    end_ms: int
    outstanding: int = 0


@dataclass(eq=False)
class _Shard:
    fence: int
    scanned_until_ms: int
    promoted_until_ms: int
    saved_ms: int | None = None
    windows: deque[_Window] = field(default_factory=deque)
    keys: set[str] = field(default_factory=set)


@dataclass(frozen=True, slots=True)
class _Item:
    shard: int
    fence: int
    fire_at_ms: int
    window: _Window


class SweeperStore(TriggerStates, DueIndex, SweepCursors, Protocol):
    """What the sweeper reads and writes in the trigger store."""


class Sweeper:
    def __init__(
        self,
        settings: Settings,
        store: SweeperStore,
        queue: HealQueue,
        lease: Lease,
        clock: Clock,
        metrics: Metrics,
        *,
        owner: str | None = None,
        tracing: Tracing | None = None,
    ) -> None:
        """``tracing``: a ``trigger.promote`` span per trigger promoted (None: export
        off)."""
        self._s = settings
        self._sw = settings.sweep
        self._store = store
        self._queue = queue
        self._lease = lease
        self._clock = clock
        self._metrics = metrics
        self.owner = owner or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self._wheel: TimingWheel[_Item] = TimingWheel(
            tick_ms=self._sw.tick_ms, start_ms=clock.now_ms())
        self._driver = WheelDriver(self._wheel, clock, self._on_expired)
        self._shards: dict[int, _Shard] = {}
        self.due_scan = DueScan(settings, store, queue, clock, metrics)
        self._sweep_lock = asyncio.Lock()
        self._promotions: set[asyncio.Task[None]] = set()
        self._promote_slots = asyncio.Semaphore(_PROMOTE_CONCURRENCY)
        self._promoter = Promoter(store, queue, clock, settings.sqs.enqueue_lead_s, tracing)

    @property
    def owned(self) -> set[int]:
        return set(self._shards)

    @property
    def pending(self) -> int:
        """Triggers waiting in the wheel."""
        return len(self._wheel)

    # --- ownership ----------------------------------------------------------------------
    async def maintain_leases(self) -> None:
        """Heartbeat, renew what we hold, give back more than our fair share, take up to it;
        sweep newly taken shards at once (from the previous owner's cursor).

        Runs every lease TTL / 3, and a member whose heartbeat is a TTL old counts as dead,
        so a killed sweeper's shards are taken over within about 1.3 lease TTLs."""
        now_ms = self._clock.now_ms()
        ttl_ms = int(self._sw.lease_ttl_s * 1000)
        alive = await self._lease.heartbeat(self.owner, now_ms, ttl_ms)
        if self._shards:
            held = await self._lease.renew({s: st.fence for s, st in self._shards.items()},
                                           self.owner)
            for shard in self.owned - held:
                log.warning("lease_lost", shard=shard, owner=self.owner)
                self._forget(shard)
        target = math.ceil(self._s.shards / max(1, alive))
        extra = sorted(self._shards, reverse=True)[: max(0, len(self._shards) - target)]
        for shard in extra:
            await self._give_up(shard)
        if len(self._shards) < target:
            before = self.owned
            await self._take_free_shards(target)
            gained = self.owned - before
            if gained:
                await self.sweep(gained)
                self._driver.poke()
        self._metrics.set("sweeper_shards_owned", len(self._shards), sweeper=self.owner)

    async def _take_free_shards(self, target: int) -> None:
        cursors: dict[int, int] | None = None
        start = hash(self.owner) % self._s.shards
        for i in range(self._s.shards):
            if len(self._shards) >= target:
                break
            shard = (start + i) % self._s.shards
            if shard in self._shards:
                continue
            fence = await self._lease.acquire(shard, self.owner)
            if fence is None:
                continue
            if cursors is None:
                try:
                    cursors = await self._store.load_cursors(self._sw.group)
                except BaseException:
                    # Without its cursor the shard cannot be swept: give the lease back so
                    # that the next round (ours or a peer's) can take it again at once.
                    await self._lease.release(shard, fence, self.owner)
                    raise
            now_ms = self._clock.now_ms()
            resume_ms = cursors.get(shard, now_ms - self._sw.lookback_s * 1000)
            self._shards[shard] = _Shard(fence, resume_ms, resume_ms, saved_ms=resume_ms)
            self._metrics.inc("shard_acquisitions_total")
            log.info("lease_acquired", shard=shard, owner=self.owner, fence=fence,
                     resume_from_ms=resume_ms)

    async def _give_up(self, shard: int) -> None:
        st = self._shards[shard]
        await self._save_cursor(shard, st)
        self._forget(shard)
        await self._lease.release(shard, st.fence, self.owner)
        log.info("lease_released", shard=shard, owner=self.owner)

    def _forget(self, shard: int) -> None:
        """Drop a shard we no longer own, and its timers: the new owner re-reads them."""
        st = self._shards.pop(shard, None)
        self.due_scan.forget(shard)
        if st is None:
            return
        for key in st.keys:
            self._wheel.cancel(key)

    # --- scanning -----------------------------------------------------------------------
    async def sweep(self, shards: Iterable[int] | None = None) -> int:
        """Read the owned shards' (or these of them) due index from their last scan up to
        now + horizon into the wheel; returns how many triggers were added. Sweeps run one at
        a time (the periodic one and one for newly taken shards may meet)."""
        async with self._sweep_lock:
            return await self._sweep(shards)

    async def _sweep(self, shards: Iterable[int] | None) -> int:
        until_ms = self._clock.now_ms() + self._sw.horizon_s * 1000
        slots = asyncio.Semaphore(_SCAN_CONCURRENCY)

        async def one(shard: int, st: _Shard) -> int:
            async with slots:
                entries = await self._store.bucket_entries(shard, st.scanned_until_ms, until_ms)
            if self._shards.get(shard) is not st:
                return 0  # lost the shard while reading
            window = _Window(until_ms)
            ahead_ms = self._sw.promote_ahead_s * 1000
            for e in entries:
                if e.route is not Route.SWEEP or e.trigger_id in self._wheel:
                    continue  # DIRECT ones were sent by the API; the reconciler watches both
                self._wheel.add(e.trigger_id, e.fire_at_ms - ahead_ms,
                                _Item(shard, st.fence, e.fire_at_ms, window))
                st.keys.add(e.trigger_id)
                window.outstanding += 1
            st.windows.append(window)
            st.scanned_until_ms = until_ms
            return window.outstanding

        chosen = [(s, st) for s, st in list(self._shards.items())
                  if shards is None or s in shards]
        added = sum(await asyncio.gather(*(one(s, st) for s, st in chosen)))
        self._driver.poke()
        self._advance_cursors()
        return added

    # --- promotion ----------------------------------------------------------------------
    async def _on_expired(self, batch: list[Expired[_Item]]) -> None:
        # Everything due in this tick is promoted together, whatever its shard, so its
        # messages share full SendMessageBatch requests; in a task of its own, so the
        # wheel's driver goes straight back to ticking.
        task = asyncio.create_task(self._promote(batch))
        self._promotions.add(task)
        task.add_done_callback(self._promotions.discard)

    async def _promote(self, batch: list[Expired[_Item]]) -> None:
        async with self._promote_slots:
            await self._promote_now(batch)

    async def _promote_now(self, batch: list[Expired[_Item]]) -> None:
        # The shard states as they are now: an item of a shard lost or re-taken since it
        # was read (another fence) is the new owner's.
        shards = {e.value.shard: st for e in batch
                  if (st := self._shards.get(e.value.shard)) is not None}
        items = [e for e in batch
                 if e.value.shard in shards and e.value.fence == shards[e.value.shard].fence]
        if not items:
            return
        try:
            # The fencing check, one request for every shard: only the current holder of
            # this exact lease sends.
            held = await self._lease.held({s: shards[s].fence for s in _shards_of(items)},
                                          self.owner)
        except AdapterError as error:
            self._retry(items, shards, str(error))
            return
        for shard in _shards_of(items) - held:
            log.warning("lease_lost_before_promotion", shard=shard, owner=self.owner)
            self._forget(shard)
        items = _round_robin([e for e in items if e.value.shard in held])
        outcome = await self._promoter.promote([Due(e.key, e.value.fire_at_ms) for e in items])
        if outcome.failed:
            self._retry([e for e in items if e.key in outcome.failed], shards,
                        outcome.error or "")
        self._metrics.inc("promoted_total", outcome.sent)
        self._metrics.inc("promotion_skipped_total", outcome.skipped)
        for e in items:
            if e.key not in outcome.failed:
                e.value.window.outstanding -= 1
                shards[e.value.shard].keys.discard(e.key)
        self._advance_cursors()

    def _retry(self, items: list[Expired[_Item]], shards: dict[int, _Shard],
               error: str) -> None:
        """Put triggers whose promotion failed back in the wheel, a second from now (unless
        their shard changed hands meanwhile: the new owner re-reads them)."""
        retry_ms = self._clock.now_ms() + _RETRY_PROMOTION_MS
        for e in items:
            if e.key not in self._wheel and self._shards.get(e.value.shard) is shards[
                    e.value.shard]:
                self._wheel.add(e.key, retry_ms, e.value)
        self._driver.poke()
        self._metrics.inc("promotion_retries_total")
        log.warning("promotion_failed_will_retry", shards=sorted(_shards_of(items)),
                    count=len(items), error=error)

    def _advance_cursors(self) -> None:
        for st in self._shards.values():
            while st.windows and st.windows[0].outstanding <= 0:
                st.promoted_until_ms = st.windows.popleft().end_ms

    async def save_cursors(self) -> None:
        for shard, st in list(self._shards.items()):
            await self._save_cursor(shard, st)

    async def _save_cursor(self, shard: int, st: _Shard) -> None:
        if st.saved_ms != st.promoted_until_ms:
            await self._store.save_cursor(
                self._sw.group, shard, st.promoted_until_ms, self.owner, st.fence)
            st.saved_ms = st.promoted_until_ms

    async def drain_promotions(self) -> None:
        while self._promotions:
            await asyncio.gather(*list(self._promotions), return_exceptions=True)

    # --- loops --------------------------------------------------------------------------
    async def run_once(self) -> int:
        """One full round, for tests and tools: leases, a sweep, every promotion now due.
        Returns how many triggers the sweep added."""
        await self.maintain_leases()
        added = await self.sweep()
        await self._driver.run_once()
        await self.drain_promotions()
        await self.save_cursors()
        return added

    async def run(self, stop: asyncio.Event) -> None:
        """Lease upkeep, periodic sweeps and the wheel, until ``stop``; then save the cursors,
        give the shards back and leave."""
        try:
            await run_together(stop, [
                # Without a renewed lease the fencing check stops our promotions and another
                # sweeper takes the shards over, so a failing step just retries next round.
                every(stop, self._sw.lease_ttl_s / 3, self.maintain_leases, name="lease"),
                every(stop, self._sw.interval_s, self._sweep_and_save, name="sweep"),
                every(stop, self._s.heal.interval_s, self.heal, name="heal"),
                self._driver.run(stop),
            ])
        finally:
            await self.drain_promotions()
            await self._shutdown()

    async def heal(self) -> HealReport:
        """One due-scan pass over the owned shards (``sweeper.heal``)."""
        return await self.due_scan.run_once(sorted(self._shards))

    async def _sweep_and_save(self) -> None:
        await self.sweep()
        await self.save_cursors()

    async def _shutdown(self) -> None:
        for shard in list(self._shards):
            try:
                await self._give_up(shard)
            except AdapterError as e:
                log.warning("shutdown_release_failed", shard=shard, error=str(e))
                self._forget(shard)
        try:
            await self._lease.leave(self.owner)
        except AdapterError:
            pass  # our heartbeat simply ages out of the member set


def _shards_of(items: Iterable[Expired[_Item]]) -> set[int]:
    return {e.value.shard for e in items}


def _round_robin(items: list[Expired[_Item]]) -> list[Expired[_Item]]:
    """One item of each shard in turn (each shard's in deadline order): a hot shard's crowd
    goes after the other shards' few, so it holds none of them up."""
    by_shard: dict[int, list[Expired[_Item]]] = defaultdict(list)
    for e in items:
        by_shard[e.value.shard].append(e)
    rounds = itertools.zip_longest(*by_shard.values())
    return [e for r in rounds for e in r if e is not None]
