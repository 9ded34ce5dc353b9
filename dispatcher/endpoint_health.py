"""Endpoint health in a dispatcher (``core.endpoint_health``): the records as last read,
updated by this process's attempts, and the screening of due occurrences for a disabled
endpoint.

Cheap on purpose: the records are read at most every ``refresh_s`` (in pages: the origins
failing now, at most ``max_per_caller`` a caller), whoever asks meanwhile; a failure writes
only at the transition healthy → failing (``IF NOT EXISTS``) and then at most every
``write_every_s`` per origin; a success writes only when a record is known (this process's
or the last read's). A store outage keeps the last answer (logged): it must not stop
deliveries, nor lift a disable. A caller at its ``max_per_caller`` records gets no record
for a new failing origin (checked against the records known here first, then by the
store): that origin is not tracked, so never disabled, until one of the caller's records
goes (a success, an enable, the TTL).

The disable is an LWT on the record, so exactly one dispatcher applies it and sends the
operators' event (with retries). Should it die first, every dispatcher's read sends the
events of records disabled more than ``NOTIFY_GRACE_MS`` ago and not marked sent: the event
goes at least once (its ``webhook-id`` is stable, for the receiver to dedupe).
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

import structlog

from dispatcher.finishing import Finishing
from dispatcher.visibility import Visibility
from trigger_service.config.endpoint_health import EndpointHealthSettings
from trigger_service.config.live_callers import Callers
from trigger_service.core.dead_letters import DeadLetterReason
from trigger_service.core.endpoint_health import (
    ENDPOINT_DISABLED,
    EndpointHealth,
    OnDisabled,
    ParkedTrigger,
    disable_due,
    disabled_event,
    failed_again,
    first_failure,
    write_due,
)
from trigger_service.core.errors import AdapterError
from trigger_service.core.model import Trigger
from trigger_service.core.pause import paused
from trigger_service.core.ports import Clock, Metrics, TriggerStates
from trigger_service.core.ports.endpoint_health import EndpointHealthStore, OpsEvents
from trigger_service.core.ports.values import DeliveryResult, ReceivedMessage
from trigger_service.core.urls import callback_origin

log = structlog.get_logger("dispatcher")

NOTIFY_GRACE_MS = 60_000  # the disabling dispatcher's own retries come first
Key = tuple[str, str]  # (caller, origin)


class Records:
    """The records known in a dispatcher, by caller then origin: a caller's count (its cap)
    without a scan of every caller's records at each failure."""

    def __init__(self) -> None:
        self._by_caller: dict[str, dict[str, EndpointHealth]] = {}

    def get(self, key: Key) -> EndpointHealth | None:
        mine = self._by_caller.get(key[0])
        return mine.get(key[1]) if mine is not None else None

    def __contains__(self, key: Key) -> bool:
        return self.get(key) is not None

    def put(self, h: EndpointHealth) -> EndpointHealth:
        self._by_caller.setdefault(h.caller, {})[h.origin] = h
        return h

    def pop(self, key: Key) -> None:
        mine = self._by_caller.get(key[0])
        if mine is not None and mine.pop(key[1], None) is not None and not mine:
            del self._by_caller[key[0]]

    def count(self, caller: str) -> int:
        return len(self._by_caller.get(caller, ()))


class EndpointWatch:
    def __init__(self, store: EndpointHealthStore, events: OpsEvents, callers: Callers,
                 settings: EndpointHealthSettings, clock: Clock, metrics: Metrics) -> None:
        self._store = store
        self._events = events
        self._callers = callers
        self._s = settings
        self._clock = clock
        self._metrics = metrics
        self._known = Records()  # as last read, or written here since
        self._written_at_ms: dict[Key, int] = {}  # this process's last write of a record
        self._read_at_ms: int | None = None
        self._reading: asyncio.Future[None] | None = None  # the read under way
        self._notifying: set[Key] = set()
        self._writing: set[Key] = set()  # endpoints with a record write under way
        self._tasks: set[asyncio.Task[None]] = set()

    # --- reads ----------------------------------------------------------------------------
    async def refresh(self, *, force: bool = False) -> None:
        """Read the records if the copy is older than ``refresh_s`` (or ``force``). One read
        at a time, shared: a caller meanwhile waits for its answer, not the copy before it
        (which can be older than ``refresh_s``: an endpoint enabled since would be taken for
        disabled); ``force`` reads again after a read under way."""
        reading = self._reading
        if reading is not None:
            await asyncio.shield(reading)
            if not force:
                return
        now_ms = self._clock.now_ms()
        if (not force and self._read_at_ms is not None
                and now_ms - self._read_at_ms < self._s.refresh_s * 1000):
            return
        if self._reading is None:  # (else another caller started one meanwhile: shared)
            self._read_at_ms = now_ms
            self._reading = asyncio.ensure_future(self._read(now_ms))
            self._reading.add_done_callback(self._read_done)
        await asyncio.shield(self._reading)

    def _read_done(self, read: asyncio.Future[None]) -> None:
        if self._reading is read:
            self._reading = None

    async def _read(self, now_ms: int) -> None:
        try:
            rows = await self._store.endpoint_health()
        except AdapterError as e:
            log.warning("endpoint_health_unread", error=str(e))
            return
        known = Records()
        for h in rows:
            mine = self._known.get(h.key)
            if mine is not None and mine.first_failure_at_ms == h.first_failure_at_ms:
                # Failures counted here and not written yet are kept.
                h = replace(h, failures=max(h.failures, mine.failures),
                            last_failure_at_ms=max(h.last_failure_at_ms,
                                                   mine.last_failure_at_ms))
            known.put(h)
            if (h.disabled_at_ms is not None and h.notified_at_ms is None
                    and now_ms - h.disabled_at_ms >= NOTIFY_GRACE_MS):
                self._notify(h)
        self._known = known
        self._written_at_ms = {k: v for k, v in self._written_at_ms.items() if k in known}

    async def disabled(self, caller: str, origin: str) -> bool:
        """Is the endpoint disabled (as of the last read, at most ``refresh_s`` old)?"""
        await self.refresh()
        h = self._known.get((caller, origin))
        return h is not None and h.disabled_at_ms is not None

    async def disabled_for(self, t: Trigger) -> bool:
        """Is ``t``'s webhook endpoint disabled (notification channels have none)?"""
        return t.plan is None and await self.disabled(t.caller, callback_origin(t.callback_url))

    # --- the attempts' outcomes -----------------------------------------------------------
    async def observe(self, t: Trigger, result: DeliveryResult) -> None:
        """Count one webhook attempt's answer (a refused URL says nothing of the origin).
        Never raises for the store (logged: the next failure tries again)."""
        if result.refused or t.plan is not None:
            return
        key = (t.caller, callback_origin(t.callback_url))
        try:
            if result.origin_failed:
                await self._failed(key, result.error or f"HTTP {result.status_code}")
            elif key in self._known:
                await self._succeeded(key)
        except AdapterError as e:
            log.warning("endpoint_health_unwritten", caller=key[0], origin=key[1],
                        error=str(e))

    async def _failed(self, key: Key, error: str) -> None:
        now_ms = self._clock.now_ms()
        known = self._known.get(key)
        if known is None and self._full(key[0]):
            self._untracked(key)
            return
        h = self._known.put(first_failure(*key, now_ms, error) if known is None
                            else failed_again(known, now_ms, error))
        if key in self._writing:
            return  # its write is under way: this failure is counted in the record in memory
        self._writing.add(key)
        try:
            await self._write_failure(key, known, h, now_ms, error)
        finally:
            self._writing.discard(key)

    async def _write_failure(self, key: Key, known: EndpointHealth | None, h: EndpointHealth,
                             now_ms: int, error: str) -> None:
        """At most one at a time per endpoint (``_writing``): the failures of a herd that
        answer together are one write, not one LWT each."""
        if known is not None and write_due(self._written_at_ms.get(key, 0), now_ms,
                                           self._s.write_every_s * 1000):
            self._written_at_ms[key] = now_ms
            if not await self._store.note_failures(h):  # reset meanwhile: start again
                known = None
        if known is None:  # healthy → failing: the one write of the transition
            stored = await self._store.note_first_failure(first_failure(*key, now_ms, error),
                                                          self._s.max_per_caller)
            if stored is None:
                self._known.pop(key)
                self._untracked(key)
                return
            if stored.first_failure_at_ms != now_ms:  # another dispatcher's record
                stored = failed_again(stored, now_ms, error)
            counted = self._known.get(key)  # with the failures seen during the write
            h = self._known.put(replace(stored, failures=max(
                stored.failures, counted.failures if counted is not None else 0)))
            self._written_at_ms[key] = now_ms
            self._metrics.inc("endpoint_failing_total", caller=key[0])
        if disable_due(h, now_ms, self._disable_after_ms(key[0])):
            await self._disable(h, now_ms)

    async def _succeeded(self, key: Key) -> None:
        if key in self._writing:
            return  # a write is under way; the next success clears the record
        self._writing.add(key)
        try:
            if await self._store.clear_failing(*key):
                self._known.pop(key)
                self._written_at_ms.pop(key, None)
                log.info("endpoint_recovered", caller=key[0], origin=key[1])
        finally:
            self._writing.discard(key)

    def _full(self, caller: str) -> bool:
        """Whether ``caller`` has its ``max_per_caller`` records (as far as known here): a
        new failing origin is then not tracked, without a store call per failure."""
        return self._known.count(caller) >= self._s.max_per_caller

    def _untracked(self, key: Key) -> None:
        self._metrics.inc("endpoint_untracked_total", caller=key[0])
        log.debug("endpoint_untracked", caller=key[0], origin=key[1])

    def _disable_after_ms(self, caller: str) -> int:
        c = self._callers.by_name(caller)
        after_s = c.endpoints.disable_after_s if c is not None else None
        return (after_s or self._s.disable_after_s) * 1000

    async def _disable(self, h: EndpointHealth, now_ms: int) -> None:
        if not await self._store.note_failures(h) or not await self._store.mark_disabled(
                h, now_ms):
            await self.refresh(force=True)  # someone else's record, or disabled already
            return
        h = self._known.put(replace(h, disabled_at_ms=now_ms))
        self._metrics.inc("endpoints_disabled_total", caller=h.caller)
        log.warning("endpoint_disabled", caller=h.caller, origin=h.origin,
                    since_ms=h.first_failure_at_ms, failures=h.failures)
        self._notify(h)

    # --- the operators' event -------------------------------------------------------------
    def _notify(self, h: EndpointHealth) -> None:
        if h.key in self._notifying:
            return
        self._notifying.add(h.key)
        task = asyncio.create_task(self._send(h))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send(self, h: EndpointHealth) -> None:
        try:
            assert h.disabled_at_ms is not None
            if await self._events.send(disabled_event(h, h.disabled_at_ms)):
                await self._store.mark_notified(h, self._clock.now_ms())
        except AdapterError as e:
            log.warning("endpoint_notified_unwritten", caller=h.caller, error=str(e))
        finally:
            self._notifying.discard(h.key)

    async def drain(self, timeout_s: float = 5.0) -> None:
        """Let events being sent finish for a while; the rest are the next reader's."""
        if self._tasks:
            _, late = await asyncio.wait(list(self._tasks), timeout=timeout_s)
            for task in late:
                task.cancel()


class EndpointParking:
    """Parks a due occurrence whose endpoint is disabled, per its caller's ``on_disabled``
    (``"hold"``: PAUSED, ``core.pause.paused``), or fails it with a dead letter (a series goes
    on), with ``last_error`` ``ENDPOINT_DISABLED`` either way. Both are LWTs on the row as
    read.

    A parked one is first entered in the index of parked triggers of its (caller, origin)
    (``EndpointHealthStore.note_parked``, for ``parked_ttl_s``), where an enable's replay
    finds it: a crash (or a lost LWT) after the entry leaves an entry of a trigger not
    parked, which the replay checks against the row; the other order could lose a parked
    trigger from it. A dead-lettered one is found by its dead letter."""

    def __init__(self, watch: EndpointWatch, index: EndpointHealthStore, store: TriggerStates,
                 callers: Callers, finishing: Finishing, visibility: Visibility,
                 metrics: Metrics, *, parked_ttl_s: int) -> None:
        self.watch = watch
        self._index = index
        self._parked_ttl_s = parked_ttl_s
        self._store = store
        self._callers = callers
        self._finishing = finishing
        self._visibility = visibility
        self._metrics = metrics

    async def park(self, m: ReceivedMessage, t: Trigger) -> bool:
        """Whether ``t`` (PENDING) was parked or dead-lettered here, its endpoint disabled
        (the message is then dealt with). Raises ``StoreError`` (the message is received
        again)."""
        if not await self.watch.disabled_for(t):
            return False
        c = self._callers.by_name(t.caller)
        self._metrics.inc("endpoint_held_total", caller=t.caller)
        if c is not None and c.endpoints.on_disabled is OnDisabled.DEAD_LETTER:
            await self._finishing.give_up(
                m, t, ENDPOINT_DISABLED, {"trigger_id": t.trigger_id, "caller": t.caller},
                DeadLetterReason.ENDPOINT_DISABLED)
            return True
        await self._index.note_parked(t.caller, callback_origin(t.callback_url),
                                      ParkedTrigger(t.trigger_id, t.due_at_ms()),
                                      self._parked_ttl_s)
        if not await self._store.compare_and_set(
                t, replace(paused(t), last_error=ENDPOINT_DISABLED)):
            return False
        log.info("trigger_held_endpoint_disabled", trigger_id=t.trigger_id, caller=t.caller)
        await self._visibility.delete_quietly(m)
        return True

