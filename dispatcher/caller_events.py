"""Events to the caller (``core.caller_events``): emitted where the dispatcher decides an
outcome, queued durably, and sent by a sender of their own with their own retries, so a
trigger's delivery never waits for them or fails by them.

- ``CallerEvents.emit`` (``platform.caller_events``; from ``Finishing``, the dispatcher's
  drop of a FAILED row, and the endpoint events through ``AnnouncedOpsEvents``) returns at
  once and queues, in the background, one message per subscription that wants the event
  on the events queue (SQS, apart from the triggers' queue). A dead letter found again on
  its FAILED row is emitted again (the same ids).
- ``EventSender`` (a loop of every dispatcher) receives the events queue and POSTs each
  event to its subscription, signed like a callback, through the webhook channel (its SSRF
  guard, its sessions). Sends run apart from the receives, at most ``PER_CALLER`` of one
  caller at once: a caller's slow or hanging endpoint delays no other caller's events.
  Success deletes the message; a failure hides it until its next send
  (``TRIGGER_EVENTS_RETRY_BACKOFF_S``; a message's receives are its sends); after
  ``TRIGGER_EVENTS_MAX_ATTEMPTS``, a 410, or a URL no longer allowed, it is listed as the
  subscription's failed event (``event_failures``) and deleted. A failed event is never
  announced: nothing loops. A subscription deleted, or no longer wanting the type, drops
  the messages still queued for it.

At least once: a sender that dies after the POST sends it again after the receive's
visibility; the ``webhook-id`` (the event's id) is the same every time.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence

import structlog

from trigger_service.config.callers import parse_callback_url
from trigger_service.config.events import EventSettings
from trigger_service.config.live_callers import Callers
from trigger_service.core.caller_events import CallerEvent, FailedEvent
from trigger_service.core.dead_letters import truncate
from trigger_service.core.errors import AdapterError
from trigger_service.core.ports import Clock, Metrics
from trigger_service.core.ports.caller_events import EventQueue, ReceivedEvent, SubscriptionStore
from trigger_service.core.ports.values import DeliveryResult
from trigger_service.platform.caller_events import CallerEvents, SubscriptionBook

log = structlog.get_logger(__name__)

# (caller, url, event id, body, timeout s) -> the answer: ``WebhookChannel.post_event``.
PostEvent = Callable[[str, str, str, str, float], Awaitable[DeliveryResult]]
_RECEIVE_WAIT_S = 20
_RECEIVE_ERROR_BACKOFF_MS = 1_000
RECEIVE_BATCH = 10  # SQS's most a receive
PER_CALLER = 4  # one caller's sends at once: a slow endpoint holds these, no more
WAITING_PER_CALLER = 2 * RECEIVE_BATCH  # more of a caller's events waiting: put back a while
BUSY_DEFER_S = 5
# Events in hand at most (sending or waiting for their caller's turn): a receive waits below
# it. Ten callers with hanging endpoints (24 each) hold it all; fewer leave the rest room.
MAX_TASKS = 256


class EventSender:
    def __init__(self, settings: EventSettings, queue: EventQueue, book: SubscriptionBook,
                 store: SubscriptionStore, callers: Callers, post: PostEvent, clock: Clock,
                 metrics: Metrics, *, failed_ttl_s: int) -> None:
        """``post``: ``WebhookChannel.post_event``; ``failed_ttl_s``: how long a failed
        event is listed (the retention)."""
        self._s = settings
        self._schedule = settings.schedule
        self._queue = queue
        self._book = book
        self._store = store
        self._callers = callers
        self._post = post
        self._clock = clock
        self._metrics = metrics
        self._failed_ttl_s = failed_ttl_s
        # A send in hand outlasts its time limit by this much before the message shows again.
        self._visibility_s = settings.send_timeout_s + 30
        self._tasks: set[asyncio.Task[None]] = set()
        self._room = asyncio.Event()
        # Per caller (dropped once it has nothing in hand): its sends at once, its waiting.
        self._gates: dict[str, asyncio.Semaphore] = {}
        self._waiting: Counter[str] = Counter()

    async def run(self, stop: asyncio.Event) -> None:
        """Receive and send until ``stop``; the sends under way finish."""
        while not stop.is_set():
            try:
                await self.receive_once()
            except AdapterError as e:
                log.warning("event_receive_failed", error=str(e))
                await self._clock.sleep_ms(_RECEIVE_ERROR_BACKOFF_MS)
        await self.drain()

    async def run_once(self, wait_s: int = _RECEIVE_WAIT_S) -> int:
        """One receive, and the sends of what it received, waited for; how many."""
        n = await self.receive_once(wait_s)
        await self.drain()
        return n

    async def receive_once(self, wait_s: int = _RECEIVE_WAIT_S) -> int:
        """One receive (once there is room: ``MAX_TASKS``), each event's send started and
        not waited for, so that a slow endpoint delays no other event; how many."""
        while len(self._tasks) > MAX_TASKS - RECEIVE_BATCH:
            self._room.clear()
            await self._room.wait()
        received = await self._queue.receive_events(max_messages=RECEIVE_BATCH, wait_s=wait_s,
                                                    visibility_s=self._visibility_s)
        for r in received:
            task = asyncio.ensure_future(self._send_in_turn(r))
            self._tasks.add(task)
            task.add_done_callback(self._done)
        return len(received)

    async def drain(self) -> None:
        """Wait for every send started."""
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self._room.set()

    async def _send_in_turn(self, r: ReceivedEvent) -> None:
        """Send ``r`` once its caller has a send free (``PER_CALLER``): one caller's slow
        endpoint holds that many sends, never another caller's. Past ``WAITING_PER_CALLER``
        of its events waiting, the event is put back for ``BUSY_DEFER_S`` (a receive more:
        counted as one of that event's attempts, the slow caller's own cost)."""
        caller = r.delivery.event.caller
        gate = self._gates.get(caller)
        if gate is None:
            gate = self._gates[caller] = asyncio.Semaphore(PER_CALLER)
        if gate.locked() and self._waiting[caller] >= WAITING_PER_CALLER:
            self._metrics.inc("caller_event_busy_deferrals_total")
            try:
                await self._queue.retry_event(r.receipt_handle, BUSY_DEFER_S)
            except AdapterError as e:  # it shows again after its visibility anyway
                log.warning("event_defer_failed", event_id=r.delivery.event.event_id,
                            error=str(e))
            return
        self._waiting[caller] += 1
        try:
            async with gate:
                self._waiting[caller] -= 1
                await self._handle_safely(r)
        finally:
            if self._waiting[caller] <= 0 and not gate.locked():
                self._waiting.pop(caller, None)  # keyed by caller: dropped once idle
                self._gates.pop(caller, None)

    async def _handle_safely(self, r: ReceivedEvent) -> None:
        try:
            await self.handle(r)
        except AdapterError as e:
            # Nothing to undo: the message shows again after its visibility, a send more.
            log.warning("event_send_failed", event_id=r.delivery.event.event_id, error=str(e))

    async def handle(self, r: ReceivedEvent) -> None:
        """Send one event to its subscription, and deal with its message. Raises
        ``AdapterError`` (the message is then left to show again)."""
        d, e = r.delivery, r.delivery.event
        sub = next((s for s in await self._book.of(e.caller) if s.name == d.subscription), None)
        if sub is None or not sub.wants(e.type):
            self._metrics.inc("caller_events_unwanted_total")
            await self._queue.delete_event(r.receipt_handle)
            return
        caller = self._callers.by_name(e.caller)
        url = parse_callback_url(sub.url)
        if caller is None or url is None or not caller.allows_callback(url):
            await self._give_up(r, "refused: the URL is no longer under a callback prefix")
            return
        result = await self._post(e.caller, sub.url, e.event_id, e.body(),
                                  float(self._s.send_timeout_s))
        if result.ok:
            self._metrics.inc("caller_events_sent_total", type=e.type.value)
            await self._queue.delete_event(r.receipt_handle)
            return
        wait_s = None if result.refused or result.gone else self._schedule.wait_s(
            r.receive_count)
        if wait_s is None:
            await self._give_up(r, result.error)
            return
        if result.retry_after_s is not None:  # never sooner than the receiver asked
            wait_s = max(wait_s, min(int(result.retry_after_s) + 1, self._schedule.backoff_s[-1]))
        self._metrics.inc("caller_event_retries_total")
        log.info("event_send_will_retry", caller=e.caller, subscription=d.subscription,
                 event_id=e.event_id, attempts=r.receive_count, error=result.error,
                 retry_in_s=wait_s)
        await self._queue.retry_event(r.receipt_handle, wait_s)

    async def _give_up(self, r: ReceivedEvent, error: str | None) -> None:
        d, e = r.delivery, r.delivery.event
        self._metrics.inc("caller_events_failed_total", type=e.type.value)
        log.warning("event_given_up", caller=e.caller, subscription=d.subscription,
                    event_id=e.event_id, attempts=r.receive_count, error=error)
        await self._store.put_failed_event(FailedEvent(
            e.caller, d.subscription, e.event_id, e.type, e.at_ms, self._clock.now_ms(),
            r.receive_count, truncate(error), e.data_json), ttl_s=self._failed_ttl_s)
        await self._queue.delete_event(r.receipt_handle)


def emit_all(events: CallerEvents | None, emitted: Sequence[CallerEvent]) -> None:
    """Emit each of ``emitted`` (nothing without ``events``)."""
    if events is not None:
        for event in emitted:
            events.emit(event)
