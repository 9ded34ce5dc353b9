"""Recipient profiles: put, get, list and delete a caller's people, and what a
change of a profile means for that person's triggers. No HTTP here.

- A profile's addresses pass the caller's recipient controls (``config/recipient_controls.py``)
  like a trigger's channels: ``422 recipient_not_allowed`` naming ``email``, ``phone``,
  ``pushTokens`` or ``telegram``.
- A changed ``timeZone`` moves every pending occurrence of the person's floating triggers
  (``"timeZone": "recipient"``) to the same wall time in the new zone, DST policy respected
  (``core.time.series.same_occurrence``, the rezone pass's step). Durably: the PUT records the
  change before it writes the profile, re-resolves at once, and forgets the change once
  every open trigger of the person is on the new zone; a crash (or a trigger in flight, or
  a lost LWT) leaves the change recorded, and ``run_once`` (every second in each API
  process) completes it. Each move is an LWT on the state read, so a repeat changes nothing.
  A wall time already past in the new zone is not fired late: the next one is (a one-time
  wall time then fires at once).
- Deleting a profile fails each of the person's open triggers: FAILED with ``lastError``
  ``recipient_deleted: ...`` and a dead letter ``recipient_deleted``. One in flight, or one
  this misses (a crash), fails the same way when it is sent (``dispatcher/recipients.py``).
- Both find the person's triggers through their index, read a page at a time to its last
  page: it has no bound, and it holds finished triggers until their TTL (skipped here).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Protocol

import structlog

from trigger_service.config.callers import Caller
from trigger_service.config.settings import Settings
from trigger_service.core.dead_letters import DeadLetter, DeadLetterReason, truncate
from trigger_service.core.errors import AdapterError, NotFound, RecipientNotAllowed
from trigger_service.core.model import Route, Status, Trigger, route_for
from trigger_service.core.ports import Clock, Enqueuer, Metrics, TriggerStates
from trigger_service.core.ports.history import DeadLetterIndex
from trigger_service.core.ports.recipient import RecipientStore, ZoneChange
from trigger_service.core.ports.values import OutgoingMessage
from trigger_service.core.recipient_profiles import (
    RECIPIENT_DELETED,
    RecipientProfile,
    address_specs,
    deleted_error,
    parse_profile,
)
from trigger_service.core.time import series
from trigger_service.core.time.timing import sqs_delay_s
from trigger_service.core.time.zones import TZDATA_VERSION

log = structlog.get_logger(__name__)

ZONE_CHANGES_PER_PASS = 100
# Moves (or failures) of one pass in flight at once: one LWT each, so a person's thousands of
# triggers take seconds rather than minutes, and a pass still holds few requests at a time.
STEPS_AT_ONCE = 32


class RecipientTriggerStore(TriggerStates, DeadLetterIndex, Protocol):
    """What this module reads and writes of the triggers."""


class RecipientService:
    def __init__(self, settings: Settings, recipients: RecipientStore,
                 triggers: RecipientTriggerStore, queue: Enqueuer, clock: Clock,
                 metrics: Metrics) -> None:
        self._s = settings
        self._recipients = recipients
        self._triggers = triggers
        self._queue = queue
        self._clock = clock
        self._metrics = metrics

    async def put(self, caller: Caller, recipient_id: str, body: object
                  ) -> tuple[RecipientProfile, bool]:
        """Create or replace (idempotent); the profile and whether it is new. Raises
        ``InvalidRequest``, ``RecipientNotAllowed`` or ``StoreError``."""
        now_ms = self._clock.now_ms()
        profile = parse_profile(recipient_id, body, now_ms)
        for field, spec in address_specs(profile):
            refused = caller.recipients.spec_refusal(spec)
            if refused is not None:
                raise RecipientNotAllowed(f"{field}: {refused[1]}", field=field)
        old = await self._recipients.get_profile(caller.name, recipient_id)
        change = None
        if old is not None and old.time_zone != profile.time_zone:
            change = ZoneChange(caller.name, recipient_id, now_ms)
            await self._recipients.record_zone_change(change)  # before: never forgotten
        await self._recipients.put_profile(caller.name, profile)
        if change is not None:
            self._metrics.inc("recipient_zone_changes_total")
            await self.complete(change)
        return profile, old is None

    async def get(self, caller: str, recipient_id: str) -> RecipientProfile:
        """Raises ``NotFound`` or ``StoreError``."""
        found = await self._recipients.get_profile(caller, recipient_id)
        if found is None:
            raise NotFound(f"recipient {recipient_id} not found")
        return found

    async def list_profiles(self, caller: str, after: str, limit: int) -> list[RecipientProfile]:
        return await self._recipients.list_profiles(caller, after, limit)

    async def count(self, caller: str) -> int:
        return await self._recipients.count_profiles(caller)

    async def delete(self, caller: str, recipient_id: str) -> int:
        """Delete the profile and fail the person's open triggers; how many failed here.
        Raises ``NotFound`` or ``StoreError``."""
        await self.get(caller, recipient_id)
        await self._recipients.delete_profile(caller, recipient_id)
        failed = 0
        async for page in self._open_triggers(caller, recipient_id):
            # Not one in flight: it fails at its send.
            idle = [t for t in page if t.status is not Status.IN_FLIGHT]
            failed += await _each(idle, lambda t: self.fail(t, recipient_id))
        return failed

    async def fail(self, t: Trigger, recipient_id: str) -> int:
        """End ``t`` FAILED for its deleted recipient, and dead-letter its occurrence; 1 if
        this did (0: it changed meanwhile)."""
        now_ms = self._clock.now_ms()
        error = deleted_error(recipient_id)
        new = series.finished(t, fired=False, now_ms=now_ms, error=error)
        if not await self._triggers.compare_and_set(
                t, new, ttl_s=self._s.terminal_ttl_s(t.registered_fire_at_ms, now_ms)):
            return 0
        await self._triggers.put_dead_letter(DeadLetter(
            t.occurrence_id, t.trigger_id, t.caller, DeadLetterReason.RECIPIENT_DELETED,
            truncate(error), t.attempts, now_ms, t.fire_at_ms, t.callback_url),
            ttl_s=self._s.retention_s)
        self._metrics.inc("dead_lettered_total", reason=RECIPIENT_DELETED)
        return 1

    async def _open_triggers(self, caller: str, recipient_id: str
                             ) -> AsyncIterator[list[Trigger]]:
        """The person's open triggers, a page of their index at a time to its last page.
        Entries of finished triggers are skipped, not deleted: a replay takes a FAILED
        trigger back to PENDING under the same entry."""
        async for entries in self._recipients.linked(caller, recipient_id):
            found = await self._triggers.get_many_at(
                [(e.trigger_id, e.home_at_ms, e.shard) for e in entries])
            yield [t for t in found if t is not None and not t.status.terminal
                   and t.caller == caller and t.recipient == recipient_id]

    # --- zone changes -----------------------------------------------------------------
    async def run_once(self) -> int:
        """Complete the zone changes still recorded; how many were completed. Raises
        ``StoreError`` (the next pass goes on)."""
        done = 0
        for change in await self._recipients.zone_changes(ZONE_CHANGES_PER_PASS):
            done += await self.complete(change)
        return done

    async def complete(self, change: ZoneChange) -> int:
        """Move the person's floating triggers to the profile's zone, every page of their
        index read; forget ``change`` once none is left on another zone (1), else keep it
        for the next pass (0)."""
        try:
            profile = await self._recipients.get_profile(change.caller, change.recipient_id)
            left = 0
            if profile is not None:
                zone = profile.time_zone
                async for page in self._open_triggers(change.caller, change.recipient_id):
                    away = [t for t in page if t.recipient_zone and t.schedule is not None
                            and t.schedule.time_zone != zone]
                    # Not one in flight: its finish steps it in the old zone.
                    idle = [t for t in away if t.status is not Status.IN_FLIGHT]
                    left += len(away) - await _each(idle, lambda t: self._move(t, zone))
            if left:
                return 0
            await self._recipients.complete_zone_change(change)
            return 1
        except AdapterError as e:
            log.warning("recipient_zone_change_deferred", caller=change.caller,
                        recipient=change.recipient_id, error=str(e))
            return 0

    async def _move(self, t: Trigger, zone: str) -> bool:
        """``t``'s pending occurrence at the same wall time in ``zone`` (one LWT)."""
        assert t.schedule is not None
        now_ms = self._clock.now_ms()
        rec = replace(t.schedule, time_zone=zone)
        horizon = self._s.api.max_fire_ahead_days
        occ = series.same_occurrence(t, rec, now_ms=now_ms, horizon_days=horizon,
                                     not_before_ms=now_ms) \
            or series.same_occurrence(t, rec, now_ms=now_ms, horizon_days=horizon)
        at_ms = max(occ.at_ms, now_ms) if occ is not None else t.scheduled_at_ms
        new = replace(t, schedule=rec, tzdata_version=TZDATA_VERSION,
                      revision=(t.revision or 0) + 1)
        if occ is not None:  # jittered as the occurrence is (``core.time.jitter``)
            new = replace(new, occurrence_index=occ.index, occurrence_second=occ.second,
                          attempts=0, next_attempt_at_ms=None, channel_states=(),
                          last_error=None).jittered(at_ms)
            new = replace(new, route=route_for(new.fire_at_ms, now_ms,
                                               self._s.direct_max_delay_s))
        if not await self._triggers.advance(
                t, new, self._s.index_ttl_s(new.fire_at_ms, now_ms), now_ms):
            return False  # it changed meanwhile: the next pass looks again
        self._metrics.inc("recipient_rezoned_total")
        log.info("occurrence_follows_recipient", trigger_id=t.trigger_id, caller=t.caller,
                 old_fire_at_ms=t.fire_at_ms, fire_at_ms=new.fire_at_ms, zone=zone)
        if new.route is Route.DIRECT and new.fire_at_ms != t.fire_at_ms:
            await self._queue.send(OutgoingMessage.of(new, sqs_delay_s(
                new.fire_at_ms, now_ms, self._s.sqs.enqueue_lead_s)))
        return True


async def _each(triggers: Sequence[Trigger], step: Callable[[Trigger], Awaitable[int]]) -> int:
    """``step`` of each of ``triggers``, ``STEPS_AT_ONCE`` at a time; the sum of what they
    return. Raises the first error of a chunk once the whole chunk has settled, so no step
    runs on after its pass has ended."""
    total = 0
    for start in range(0, len(triggers), STEPS_AT_ONCE):
        chunk = triggers[start:start + STEPS_AT_ONCE]
        for result in await asyncio.gather(*(step(t) for t in chunk), return_exceptions=True):
            if isinstance(result, BaseException):
                raise result
            total += result
    return total
