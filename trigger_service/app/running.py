"""Run now (``POST /v1/triggers/{id}/run``): a trigger fires now, outside its schedule. No
HTTP here.

What runs depends on what the trigger is:

- a PENDING one-time trigger is moved: its fire time becomes now (no jitter), same
  occurrence id, by the LWT an edit makes (``TriggerCatalog.advance``; a claim, an edit or
  a cancel that comes first wins and the run looks again). Its old SQS message is dropped
  as stale, a new one is sent at once. One already due is answered as it is, and so is
  one being delivered (IN_FLIGHT): it fires now either way.
- a series (PENDING, PAUSED or between occurrences IN_FLIGHT), and a PAUSED one-time
  trigger, get an extra occurrence: a one-time copy (its callback, payload, channels,
  recipient, tags, labels, flow control and lateness bound) registered to fire now,
  linked back by ``snoozedFrom``, its own occurrence id ``<copy id>.1``. The trigger itself
  is not touched: a series' schedule goes on, a paused trigger stays paused.
- a finished trigger (FIRED, FAILED, CANCELLED) is ``NotRunnable`` (409).

With an Idempotency-Key a run happens once, and its retries are answered its answer:
a copy is a keyed registration (the caller's key space, like a snooze's: the row is the
key's record, durable). A moved one-time trigger has no row of its own, so its record is
Redis's ``done`` entry (``IdempotentRegistration.answered``), kept as long as a
registration's; a retry that Redis forgot is run again, which moves nothing that is due or
in flight already (no second delivery), but is answered ``not_runnable`` once the trigger
finished.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace

import structlog

from trigger_service.app.background_sends import BackgroundSends
from trigger_service.app.idempotency import IdempotentRegistration, Registered
from trigger_service.app.registration import NewTrigger
from trigger_service.app.settling import ROUNDS
from trigger_service.config.settings import Settings
from trigger_service.core.errors import NotRunnable
from trigger_service.core.model import Route, Status, Trigger, route_for
from trigger_service.core.ports import Clock, Metrics, TriggerCatalog

log = structlog.get_logger(__name__)

Get = Callable[[str, str], Awaitable[Trigger]]
# ``TriggerService.register_planned``: (caller, request, key, hash, snoozed_from=...).
RegisterCopy = Callable[..., Awaitable[Registered]]


@dataclass(frozen=True, slots=True)
class Run:
    """What a run started: the trigger asked to run (``trigger_id``), the occurrence that
    fires now and when, and the trigger that fires it (``run_trigger_id``: the same, or
    its one-time copy). ``replayed``: a retry with the key, answered the first run."""

    trigger_id: str
    occurrence_id: str
    fire_at_ms: int
    run_trigger_id: str
    replayed: bool = False


def copies(t: Trigger) -> bool:
    """Whether a run of ``t`` is an extra occurrence (a copy) rather than ``t`` moved."""
    return (t.schedule is not None and t.schedule.recurring) or t.status is Status.PAUSED


def copy_request(t: Trigger, fire_at_ms: int, now_ms: int) -> NewTrigger:
    """A one-time copy of ``t`` firing at ``fire_at_ms`` (no jitter), asked at ``now_ms``:
    ``t``'s callback, payload, channels, recipient, tags, labels, flow control, lateness
    bound and priority as they are now (a run's copy, a backfill's: ``app.backfills``)."""
    return NewTrigger(
        callback_url=t.callback_url, payload_json=t.payload_json, fire_at_ms=fire_at_ms,
        received_at_ms=now_ms, plan=t.plan, tags=t.tags, labels=t.labels,
        recipient=t.recipient, max_lateness_s=t.max_lateness_s, flow_control=t.flow_control,
        priority=t.priority)


class Running:
    def __init__(self, settings: Settings, catalog: TriggerCatalog, clock: Clock,
                 metrics: Metrics, get: Get, sends: BackgroundSends,
                 keys: IdempotentRegistration, register_copy: RegisterCopy) -> None:
        """``get``: the caller's trigger or ``NotFound``; ``sends``: the SQS sends of
        direct triggers; ``keys``: the Idempotency-Key decisions; ``register_copy``:
        registers a timed request (``TriggerService.register_planned``)."""
        self._s = settings
        self._catalog = catalog
        self._clock = clock
        self._metrics = metrics
        self._get = get
        self._sends = sends
        self._keys = keys
        self._register_copy = register_copy

    async def run(self, caller: str, trigger_id: str, idem_key: str | None,
                  request_hash: str) -> Run:
        """Fire ``caller``'s trigger now (the module docstring), once per ``idem_key``.
        Raises ``NotFound``, ``NotRunnable``, ``IdempotencyKeyReused`` (the key was used
        for another request), what a registration raises for a copy (``QuotaExceeded``,
        ``StoreError``, ``OutcomeUnknown``) or ``StoreError``."""
        t = await self._get(caller, trigger_id)
        if idem_key is not None:
            earlier = await self._keys.answered(caller, idem_key, request_hash)
            if earlier is not None:
                return self._answer(t, earlier, replayed=True)
        if copies(t) and not t.status.terminal:
            copy = await self._run_copy(t, idem_key, request_hash)
            return self._answer(t, copy, replayed=copy.replayed)
        moved = await self._run_moved(t)
        done = Registered(moved.trigger_id, moved.fire_at_ms, replayed=False)
        if idem_key is not None:
            await self._keys.remember(caller, idem_key, request_hash, done)
        return self._answer(moved, done, replayed=False)

    def _answer(self, t: Trigger, done: Registered, *, replayed: bool) -> Run:
        if done.trigger_id == t.trigger_id:  # moved: the occurrence it fired, or fires
            occurrence_id = f"{t.trigger_id}.{t.fire_seq}"
        else:  # a copy: one-time, its first occurrence
            occurrence_id = f"{done.trigger_id}.1"
        return Run(t.trigger_id, occurrence_id, done.fire_at_ms, done.trigger_id, replayed)

    async def _run_copy(self, t: Trigger, idem_key: str | None,
                        request_hash: str) -> Registered:
        now_ms = self._clock.now_ms()
        new = copy_request(t, now_ms, now_ms)
        done: Registered = await self._register_copy(t.caller, new, idem_key, request_hash,
                                                     snoozed_from=t.trigger_id)
        if not done.replayed:
            self._metrics.inc("triggers_run_total", kind="copy")
            log.info("trigger_run", trigger_id=t.trigger_id, caller=t.caller,
                     copy_id=done.trigger_id)
        return done

    async def _run_moved(self, t: Trigger) -> Trigger:
        """``t`` (one-time) due now: moved by an LWT, looked at again when it loses."""
        for _ in range(ROUNDS):
            if t.status.terminal or t.status is Status.PAUSED:
                # PAUSED: paused since it was read (a copy is the caller's next try).
                raise NotRunnable(f"trigger {t.trigger_id} is {t.status.value}",
                                  status=t.status.value)
            now_ms = self._clock.now_ms()
            if t.status is Status.IN_FLIGHT or (t.next_attempt_at_ms is None
                                                and t.fire_at_ms <= now_ms):
                return t  # being delivered, or due already: it fires now as it is
            new = replace(t, fire_at_ms=now_ms, jitter_s=0, next_attempt_at_ms=None,
                          revision=(t.revision or 0) + 1,
                          route=route_for(now_ms, now_ms, self._s.direct_max_delay_s))
            if await self._catalog.advance(
                    t, new, self._s.index_ttl_s(new.fire_at_ms, now_ms), now_ms):
                self._metrics.inc("triggers_run_total", kind="moved")
                log.info("trigger_run", trigger_id=t.trigger_id, caller=t.caller,
                         from_ms=t.due_at_ms(), to_ms=now_ms)
                if new.route is Route.DIRECT:
                    self._sends.start(new)
                return new
            t = await self._get(t.caller, t.trigger_id)  # a claim or an edit came first
        raise NotRunnable(f"trigger {t.trigger_id} is changing state; try again",
                          status=t.status.value)
