"""The rezone pass: after an upgrade of the zone rules (the ``tzdata`` package), wall-clock
occurrences resolved with an older release are resolved again; those whose instant moved are
moved, with their index entries and an SQS message, in one LWT each.

Governments change DST rules with weeks of notice. A reminder "09:00 in Casablanca" stored as
an instant under the old rules would fire an hour off; this pass finds it through the
``zoned_triggers`` index (by release and shard, never a table scan), re-resolves the same
occurrence (same wall instance, same DST policy) under the rules in use, and moves it:

- exactly once: the move is an LWT conditioned on the state that was read; a second pass (or
  a second reconciler) finds the row already on the current release and leaves it;
- losslessly: the new index entries are written before the LWT; the old message becomes
  stale (the dispatcher drops a message whose fire time is not the row's).

Only PENDING triggers move (one being delivered finishes under the rules it started with; its
next occurrence is resolved with the current rules anyway).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol

import structlog

from trigger_service.config.settings import Settings
from trigger_service.core.model import Route, Status, Trigger, route_for
from trigger_service.core.ports import Clock, Enqueuer, Metrics, TriggerStates, ZoneIndex
from trigger_service.core.ports.values import OutgoingMessage
from trigger_service.core.time.series import same_occurrence
from trigger_service.core.time.timing import sqs_delay_s
from trigger_service.core.time.zones import TZDATA_VERSION

log = structlog.get_logger("reconciler")


class RezoneStore(TriggerStates, ZoneIndex, Protocol):
    """What the rezone pass reads and writes."""


@dataclass(frozen=True)
class RezoneReport:
    checked: int
    moved: int
    current: str = TZDATA_VERSION


class Rezoner:
    def __init__(self, settings: Settings, store: RezoneStore, queue: Enqueuer, clock: Clock,
                 metrics: Metrics, *, current_version: str = TZDATA_VERSION) -> None:
        self._s = settings
        self._store = store
        self._queue = queue
        self._clock = clock
        self._metrics = metrics
        self._current = current_version

    async def run_once(self) -> RezoneReport:
        """One pass over every older release's entries, a page of ids at a time (a release's
        entries are never all held at once); what it checked and moved. Raises
        ``StoreError`` (the next pass starts again: what moved stays moved)."""
        checked = moved = 0
        for version in await self._store.zoned_versions():
            if version == self._current:
                continue
            for shard in range(self._s.shards):
                # Each move writes under the current release, never into the partition read.
                async for ids in self._store.zoned_trigger_ids(version, shard):
                    page_checked, page_moved = await self._rezone_page(version, ids)
                    checked += page_checked
                    moved += page_moved
        if checked:
            log.info("rezone_pass", checked=checked, moved=moved, current=self._current)
        return RezoneReport(checked, moved, self._current)

    async def _rezone_page(self, version: str, ids: Sequence[str]) -> tuple[int, int]:
        """Rezone those of ``ids`` still PENDING on ``version``; (checked, moved)."""
        checked = moved = 0
        for t in await self._store.get_many(ids):
            if t is None or t.status is not Status.PENDING:
                continue
            if t.tzdata_version != version:
                continue  # moved on since (its entry for the new release exists)
            checked += 1
            moved += await self.rezone(t)
        return checked, moved

    async def rezone(self, t: Trigger) -> int:
        """Re-resolve ``t``'s pending occurrence under the current rules; 1 if it moved."""
        now_ms = self._clock.now_ms()
        assert t.schedule is not None
        occ = same_occurrence(t, t.schedule, now_ms=now_ms,
                              horizon_days=self._s.api.max_fire_ahead_days)
        # A wall time that no longer exists keeps its instant (only its release is updated).
        new = replace(t, tzdata_version=self._current, revision=(t.revision or 0) + 1)
        if occ is not None and occ.at_ms != t.scheduled_at_ms:  # jitter goes with it
            new = replace(new, occurrence_second=occ.second).jittered(occ.at_ms)
            new = replace(new, route=route_for(new.fire_at_ms, now_ms,
                                               self._s.direct_max_delay_s))
        if not await self._store.advance(t, new, self._s.index_ttl_s(new.fire_at_ms, now_ms),
                                         now_ms):
            return 0  # it changed meanwhile (fired, edited, moved by another pass)
        if new.fire_at_ms == t.fire_at_ms:
            return 0
        self._metrics.inc("rezoned_total")
        log.warning("occurrence_rezoned", trigger_id=t.trigger_id, caller=t.caller,
                    old_fire_at_ms=t.fire_at_ms, fire_at_ms=new.fire_at_ms,
                    old_tzdata=t.tzdata_version, tzdata=self._current)
        if new.route is Route.DIRECT:
            await self._queue.send(OutgoingMessage.of(new, sqs_delay_s(
                new.fire_at_ms, now_ms, self._s.sqs.enqueue_lead_s)))
        return 1
