"""Backfill (``POST /v1/triggers/{id}/backfill``): fire a series' past occurrences in a range,
once each, oldest first, paced (``core.backfill`` says which, their identity and pace). No
HTTP here. ``plan`` checks a request and lists its occurrences before a job is made
(``TriggerJobRunner.start_backfill``); the job fires each with ``fire``.

- Any series may be backfilled whatever its status (PENDING, PAUSED, IN_FLIGHT, or finished:
  CANCELLED, FIRED, FAILED), as long as its row is there: a backfill is an explicit request
  for past occurrences, and the series itself is not touched (its schedule, status and
  cursor go on as they were). A one-time trigger has no occurrences to backfill:
  ``NotBackfillable``.
- Each occurrence is a one-time copy of the series as it is when the copy is made
  (``running.copy_request``: callback, payload, channels, recipient, tags, labels, flow
  control), ``snoozedFrom`` the series, registered with the occurrence's derived key
  (``core.backfill.occurrence_key``): a repeat finds the copy's row and makes nothing
  (``TriggerService.register_planned``), for as long as that row lives (its fire time +
  ``TRIGGER_RETENTION_DAYS``). Each copy takes a place in the caller's quota of pending
  triggers like any registration (a refusal fails that occurrence, the others go on).
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import structlog

from trigger_service.app.cpu_shares import metered
from trigger_service.app.idempotency import Registered
from trigger_service.app.running import RegisterCopy, copy_request
from trigger_service.config.callers import Caller
from trigger_service.config.flow_defaults import default_flow
from trigger_service.core.backfill import Backfill, occurrence_key, pace_ms, past_occurrences
from trigger_service.core.errors import InvalidRequest, NotBackfillable
from trigger_service.core.model import Trigger
from trigger_service.core.ports import Clock, Metrics

log = structlog.get_logger(__name__)

Get = Callable[[str, str], Awaitable[Trigger]]


@dataclass(frozen=True, slots=True)
class BackfillPlan:
    """A checked backfill and the scheduled instants of its occurrences, oldest first."""

    backfill: Backfill
    instants: list[int]


class Backfills:
    def __init__(self, clock: Clock, metrics: Metrics, get: Get,
                 register_copy: RegisterCopy) -> None:
        """``get``: the caller's trigger or ``NotFound`` (``TriggerService.get``);
        ``register_copy``: registers a timed request (``TriggerService.register_planned``)."""
        self._clock = clock
        self._metrics = metrics
        self._get = get
        self._register_copy = register_copy

    async def plan(self, caller: Caller, trigger_id: str, from_ms: int,
                   to_ms: int) -> BackfillPlan:
        """Check a backfill of ``caller``'s series ``trigger_id`` over ``[from_ms, to_ms)``
        and list its occurrences (those before now). Nothing is written. Raises
        ``InvalidRequest`` (``from`` not before ``to``; more than
        ``MAX_BACKFILL_OCCURRENCES``; ``RuleTooCostly``), ``NotFound`` (no such trigger of
        the caller's), ``NotBackfillable`` (a one-time trigger; ``from`` at or after now)
        or ``StoreError``."""
        if from_ms >= to_ms:
            raise InvalidRequest("from: must be before to", field="from")
        t = await self._get(caller.name, trigger_id)
        if t.schedule is None or not t.schedule.recurring:
            raise NotBackfillable(f"trigger {trigger_id} is one-time: it has no series of "
                                  "occurrences to backfill (run it instead)")
        now_ms = self._clock.now_ms()
        if from_ms >= now_ms:
            raise NotBackfillable("from: in the future; a backfill fires occurrences that "
                                  "are past")
        with metered():  # the expansion is the request's CPU (app/cpu_shares.py)
            instants = past_occurrences(t.schedule, from_ms, to_ms, now_ms)
        flow = t.flow_control or default_flow(caller.name, caller.flow_defaults,
                                              t.callback_url)
        return BackfillPlan(Backfill(trigger_id, from_ms, to_ms, pace_ms(flow)), instants)

    async def fire(self, caller: str, backfill: Backfill, at_ms: int,
                   fire_at_ms: int) -> Registered:
        """Register the copy that fires the occurrence scheduled at ``at_ms`` of
        ``backfill``'s series, due at ``fire_at_ms`` (the job's pace), unless it exists
        already (then it is answered, ``replayed``). Idempotent; safe to retry. Raises
        ``NotFound`` (the series is gone), what a registration raises
        (``QuotaExceeded``, ``StoreError``, ``OutcomeUnknown``)."""
        t = await self._get(caller, backfill.trigger_id)
        key = occurrence_key(t.trigger_id, at_ms)
        # The key's hash is the request's: the same for every backfill of this occurrence,
        # whatever the series' payload has become meanwhile (the copy made first stands).
        done: Registered = await self._register_copy(
            caller, copy_request(t, fire_at_ms, self._clock.now_ms()), key,
            hashlib.sha256(key.encode()).hexdigest(), snoozed_from=t.trigger_id)
        if not done.replayed:
            self._metrics.inc("triggers_backfilled_total")
            log.info("trigger_backfilled", trigger_id=t.trigger_id, caller=caller,
                     scheduled_at_ms=at_ms, copy_id=done.trigger_id)
        return done
