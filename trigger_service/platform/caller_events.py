"""Emitting events to the caller (``core.caller_events``), shared by the dispatchers (the
outcomes they decide, the endpoints they disable) and the API (an endpoint enabled): each
event is queued, in the background, once per subscription of its caller that wants it, on
the events queue its senders read (``dispatcher.caller_events``).

``CallerEvents.emit`` never waits and never raises. With the caller's subscriptions known
(the ``SubscriptionBook``'s copy, at most ``TRIGGER_EVENTS_CACHE_S`` old) and none wanting
the event, a dictionary lookup is all it costs: a caller without subscriptions costs a read
of its (empty) partition per cache period and process, nothing per delivery. Otherwise a
background task reads them if need be and queues the event. Those tasks are bounded
(``TRIGGER_EVENTS_MAX_PENDING``: past it an event is dropped and counted in
``caller_events_dropped_total``), as is a failure to queue (counted, logged): an outage of
the events queue costs the deliveries nothing. A process that dies between an outcome and
the queueing loses that event (the outcome itself is written first)."""

from __future__ import annotations

import asyncio
import functools
from collections import Counter, OrderedDict

import structlog

from trigger_service.core.caller_events import (
    CallerEvent,
    EventDelivery,
    Subscription,
    endpoint_changed,
)
from trigger_service.core.endpoint_health import OpsEvent
from trigger_service.core.errors import AdapterError
from trigger_service.core.ports import Clock, Metrics
from trigger_service.core.ports.caller_events import EventQueue, SubscriptionStore
from trigger_service.core.ports.endpoint_health import OpsEvents

log = structlog.get_logger(__name__)


class SubscriptionBook:
    """Each caller's subscriptions, read at most every ``refresh_s`` per caller, for at most
    ``max_callers`` callers (least recently used dropped)."""

    def __init__(self, store: SubscriptionStore, clock: Clock, refresh_s: int,
                 max_callers: int = 10_000) -> None:
        self._store = store
        self._clock = clock
        self._refresh_ms = refresh_s * 1000
        self._max_callers = max(1, max_callers)
        self._cache: OrderedDict[str, tuple[int, tuple[Subscription, ...]]] = OrderedDict()

    def cached(self, caller: str) -> tuple[Subscription, ...] | None:
        """The copy of ``caller``'s, if it is fresh (None: to be read)."""
        kept = self._cache.get(caller)
        if kept is not None:
            self._cache.move_to_end(caller)
        if kept is None or self._clock.now_ms() - kept[0] >= self._refresh_ms:
            return None
        return kept[1]

    async def of(self, caller: str) -> tuple[Subscription, ...]:
        """``caller``'s subscriptions, from the copy or read. Raises ``StoreError``."""
        subs = self.cached(caller)
        if subs is None:
            subs = tuple(await self._store.subscriptions(caller))
            self._cache[caller] = (self._clock.now_ms(), subs)
            self._cache.move_to_end(caller)
            while len(self._cache) > self._max_callers:
                self._cache.popitem(last=False)
        return subs


# A caller's events waiting to be queued: at most this fraction of ``max_pending``.
CALLER_SHARE_DIVISOR = 4


class CallerEvents:
    """Emits events: queued for each subscription of their caller that wants them (past
    ``max_pending`` waiting, or a caller's share of it, an event is dropped and counted)."""

    def __init__(self, book: SubscriptionBook, queue: EventQueue, metrics: Metrics, *,
                 max_pending: int = 1_000) -> None:
        self._book = book
        self._queue = queue
        self._metrics = metrics
        self._max_pending = max_pending
        # One caller's burst (a herd dead-lettered at once) takes this share of the room at
        # most: the rest stays for the other callers' events.
        self._max_per_caller = max(1, max_pending // CALLER_SHARE_DIVISOR)
        self._pending: set[asyncio.Task[None]] = set()
        self._by_caller: Counter[str] = Counter()  # keyed by caller, dropped at zero

    def emit(self, event: CallerEvent) -> None:
        """Queue ``event`` in the background (never raises, never waits)."""
        subs = self._book.cached(event.caller)
        if subs is not None and not any(s.wants(event.type) for s in subs):
            return  # the common case: nobody asked for it
        caller = event.caller
        if (len(self._pending) >= self._max_pending
                or self._by_caller[caller] >= self._max_per_caller):
            self._metrics.inc("caller_events_dropped_total", type=event.type.value)
            log.warning("caller_event_dropped", caller=caller, type=event.type.value,
                        event_id=event.event_id)
            return
        task = asyncio.create_task(self._queue_event(event))
        self._pending.add(task)
        self._by_caller[caller] += 1
        task.add_done_callback(functools.partial(self._queued, caller))

    def _queued(self, caller: str, task: asyncio.Task[None]) -> None:
        self._pending.discard(task)
        self._by_caller[caller] -= 1
        if self._by_caller[caller] <= 0:
            del self._by_caller[caller]

    async def _queue_event(self, event: CallerEvent) -> None:
        try:
            for sub in await self._book.of(event.caller):
                if sub.wants(event.type):
                    await self._queue.send_event(EventDelivery(sub.name, event))
                    self._metrics.inc("caller_events_queued_total", type=event.type.value)
        except AdapterError as e:
            # Lost (the outcome it tells of is recorded): counted and logged, never retried
            # here, so an outage of the events queue costs the deliveries nothing.
            self._metrics.inc("caller_events_dropped_total", type=event.type.value)
            log.warning("caller_event_not_queued", caller=event.caller, type=event.type.value,
                        event_id=event.event_id, error=str(e))

    @property
    def pending(self) -> int:
        return len(self._pending)

    async def drain(self, timeout_s: float | None = 5.0) -> None:
        """Wait for the events being queued (at most ``timeout_s``)."""
        if self._pending:
            await asyncio.wait(list(self._pending), timeout=timeout_s)


class AnnouncedOpsEvents:
    """``OpsEvents`` that also emit each endpoint event as its caller's."""

    def __init__(self, ops: OpsEvents, events: CallerEvents) -> None:
        self._ops = ops
        self._events = events

    async def send(self, event: OpsEvent) -> bool:
        self._events.emit(endpoint_changed(event))
        return await self._ops.send(event)
