"""The dispatcher: receive trigger ids from SQS, hold each until its fire time, then hand it
to :class:`dispatcher.delivery.Delivery` (claim → deliver → record).

An occurrence's later attempt (a retry, an escalation step, a channel due after quiet hours)
is due soon after the attempt that wrote it, often sooner than the enqueue lead: a message
shown again then would be visible at once, and would reach this dispatcher's own poll while
its first receipt is still being handled here (it would be passed over as "the same message
again", and come back only when that receive's visibility ends), or any poll only after its
lane's next receive. So the dispatcher that wrote the attempt keeps the message in hand when
the attempt is due within the hold horizon (``hold_max_ms``), exactly as it holds an early
message: kept hidden on SQS past the attempt's send, claimed again (the claim is an LWT on
the row as written: a cancel, an acknowledgement or an edit in between wins) and sent at its
due time. One due later is hidden on SQS until the enqueue lead before it, and held by
whichever dispatcher receives it then.

Why each failure here is safe: killed before the claim (an early message, or a later
attempt held here), the message reappears after its visibility timeout, which outlasts the
send it was held for; a message that is redundant (the trigger finished or was cancelled) is
deleted, and counted when it is a duplicate of a fired trigger.

Fair shares (``fair_share.Shares``): at ``max_inflight`` messages in hand the dispatcher
keeps receiving, so that another caller's messages behind a herd on the queue are found; a
message is held only if its caller is under its share of the cap, else it is hidden again on
SQS for a while (``_over_share_until_ms``: a herd's excess until about its turn, by the
caller's pace) and comes back no earlier. So at most twice
``max_inflight`` are in hand. A message whose body names its caller
(``ReceivedMessage.caller``) is hidden without a read of its row. What the dispatcher has
not received it cannot share out: each caller's messages are in its lane of the queue
(``core.lanes``), and every lane has a long poll of its own (``_receiving``).

Priority (``core.model.Priority``): a caller's high-priority messages come on high lanes of
their own and have shares of their own (``high_shares``, the same cap): the caller's herd of
normal or low ones filling its share, or its bulkhead's waiting room, never hides a high one
back on SQS. In hand, a caller's messages are claimed and sent in priority order (the claim
gate's lead and slots, the bulkhead's places: ``ranked``). So at most twice ``max_inflight``
high messages are in hand besides the others.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import replace

import structlog

from dispatcher.caller_events import emit_all
from dispatcher.claiming import NOT_NOW
from dispatcher.claiming import new_claim_id as random_claim_id
from dispatcher.delivery import Delivery, DispatchDeps
from dispatcher.endpoint_health import EndpointParking, EndpointWatch
from dispatcher.fair_share import FAIR_DEFER_S, Shares
from dispatcher.fanout import UNCONFIGURED, Notifiers
from dispatcher.finishing import DispatchStore, NextAttempt
from dispatcher.flow_control import FlowGate
from dispatcher.ops_report import OpsReporter
from dispatcher.screening import PausedCallers, Screening
from dispatcher.succession import Succession
from dispatcher.visibility import REFRESH_AFTER_RECEIVES
from trigger_service.config.live_callers import Callers
from trigger_service.config.settings import Settings
from trigger_service.core import caller_events as announce
from trigger_service.core.dead_letters import letter_for_failed
from trigger_service.core.errors import AdapterError
from trigger_service.core.model import Priority, Status, Trigger
from trigger_service.core.ports import Channel, Clock, DeliveryQueue, Metrics
from trigger_service.core.ports.endpoint_health import EndpointHealthStore, OpsEvents
from trigger_service.core.ports.ops import OpsBoard
from trigger_service.core.ports.pause import CallerPauses
from trigger_service.core.ports.recipient import RecipientStore
from trigger_service.core.ports.values import ReceivedMessage
from trigger_service.core.time.timing import SQS_MAX_BATCH
from trigger_service.core.trace_context import Tracing
from trigger_service.platform.caller_events import CallerEvents
from trigger_service.platform.supervisor import run_together

log = structlog.get_logger("dispatcher")

# A message (or a later attempt) due later than this is hidden again on SQS rather than held
# in memory; with an enqueue lead this long or longer, the lead and a second (``hold_max_ms``).
_HOLD_MAX_MS = 20_000
_CAS_ROUNDS = 4
# How often a watched claim's claimer is asked about again (``Succession.proven_dead``: a
# Redis read at most once a second per claimer, however many of its claims are watched).
WATCH_STEP_MS = 1_000
_FULL_BACKOFF_MS = 50
_RECEIVE_ERROR_BACKOFF_MS = 1000
# A message counted in hand: the shares it is counted in, and what they answered.
Held = tuple[Shares, tuple[str, int]]


class Dispatcher:
    def __init__(
        self,
        settings: Settings,
        store: DispatchStore,
        queue: DeliveryQueue,
        channel: Channel,
        callers: Callers,
        clock: Clock, metrics: Metrics,
        *,
        new_claim_id: Callable[[], str] = random_claim_id,
        notifiers: Notifiers = UNCONFIGURED,
        board: OpsBoard | None = None,
        recipients: RecipientStore | None = None,
        pauses: CallerPauses | None = None,
        endpoints: tuple[EndpointHealthStore, OpsEvents] | None = None,
        flow: FlowGate | None = None,
        tracing: Tracing | None = None,
        succession: Succession | None = None,
        events: CallerEvents | None = None,  # the callers' events (None: none emitted)
    ) -> None:
        """``board``: where breaker states and fire lag are published for the ops page
        (``dispatcher.ops_report``); without one they are only in the metrics.
        ``recipients``: the profiles a trigger's channels are resolved from at send time.
        ``pauses``: the operators' paused callers (None: no caller is ever paused here).
        ``endpoints``: the endpoint health records and the operators' events (None: no
        endpoint is ever disabled here). ``flow``: flow control per destination (None: none).
        ``tracing``: spans of each occurrence's steps (None: export off). ``succession``:
        names this process's claim ids, proves others dead (``dispatcher.succession``)."""
        deps = DispatchDeps(settings, store, queue, clock, metrics, tracing or Tracing(), events)
        self.endpoints = (EndpointWatch(endpoints[0], endpoints[1], callers,
                                        settings.endpoint_health, clock, metrics)
                          if endpoints is not None else None)
        self.delivery = Delivery(deps, channel, callers, claim_ids=new_claim_id,
                                 notifiers=notifiers, recipients=recipients,
                                 endpoints=self.endpoints, flow=flow, succession=succession)
        self.succession = succession  # its run declares its predecessor dead
        self._visibility = self.delivery.visibility
        parking = (EndpointParking(self.endpoints, endpoints[0], store, callers,
                                   self.delivery.finishing, self._visibility, metrics,
                                   parked_ttl_s=settings.retention_s)
                   if self.endpoints is not None and endpoints is not None else None)
        self.screening = Screening(settings, store, self._visibility, clock, metrics,
                                   PausedCallers(pauses, clock) if pauses is not None else None,
                                   parking)
        self._s, self._d = settings, settings.dispatch
        # Anything put back is hidden at least a second (``sqs_delay_s``: until the lead
        # before it is due, rounded down): one shown again at once would be received again
        # while it is still in hand here, and passed over.
        self.hold_max_ms = max(_HOLD_MAX_MS, (settings.sqs.enqueue_lead_s + 1) * 1000)
        self._store, self._queue, self._clock, self._metrics = store, queue, clock, metrics
        self._tasks: set[asyncio.Task[None]] = set()
        # (trigger id, fire time) -> the message id being handled: one occurrence at a time
        # (a series' next occurrence may arrive while the previous one finishes).
        self._handling: dict[tuple[str, int], str] = {}
        self.shares, self.high_shares = self._two_shares()
        self._stopping = asyncio.Event()
        self._lane_polls: dict[int, int] = {}  # lane -> long polls running on it
        self.max_polls = 0  # the most long polls that ran at once
        self.reporter = (OpsReporter(self.delivery, board, clock, metrics)
                         if board is not None else None)

    # --- loops ----------------------------------------------------------------------
    async def run(self, stop: asyncio.Event) -> None:
        """Receive with ``receivers`` concurrent long-polls until ``stop``; then drain:
        held messages are handed back to SQS, deliveries under way finish."""
        loops = [self._receiving(stop)]
        if self.succession is not None:
            loops.append(self.succession.run(stop))
        if self.reporter is not None:
            loops.append(self.reporter.run(stop))
        try:
            await run_together(stop, loops)
        finally:
            self._stopping.set()
            await self.drain()

    async def _receiving(self, stop: asyncio.Event) -> None:
        """As many long polls as keep their batches full, at most ``receivers`` in all: one
        always on each of the queue's lanes (``core.lanes``: a caller's herd is in its lane,
        another caller's messages are received from theirs at once); a receive that comes
        back full starts another on its lane, and one that comes back less than half full
        ends its poll (never its lane's last). A herd is received by many polls at once; a
        trickle by one, ten messages a call where it can, not one message per poll."""
        async with asyncio.TaskGroup() as polls:
            def start(lane: int) -> None:
                self._lane_polls[lane] = self._lane_polls.get(lane, 0) + 1
                self.max_polls = max(self.max_polls, self.polls)
                polls.create_task(self._receive_loop(stop, lane, start))
            for lane in range(self._queue.lanes):
                start(lane)

    async def _receive_loop(self, stop: asyncio.Event, lane: int,
                            start_another: Callable[[int], None]) -> None:
        try:
            while not stop.is_set():
                try:
                    received = await self.run_once(lane)
                except AdapterError as e:
                    log.warning("receive_failed", lane=lane, error=str(e))
                    await self._clock.sleep_ms(_RECEIVE_ERROR_BACKOFF_MS)
                    continue
                if received >= SQS_MAX_BATCH and self.polls < self._d.receivers:
                    start_another(lane)
                elif received < SQS_MAX_BATCH // 2 and self._lane_polls[lane] > 1:
                    return
        finally:
            self._lane_polls[lane] -= 1

    @property
    def polls(self) -> int:
        """Long polls running now (over all lanes)."""
        return sum(self._lane_polls.values())

    async def run_once(self, lane: int = 0) -> int:
        """One receive from ``lane``: start handling every message received; return how
        many."""
        # Messages waiting for their caller's bulkhead do not count: one slow caller must
        # not stop receives for every other. A high lane counts the high messages only.
        high = lane >= self._queue.lanes - self._queue.high_lanes
        held = self.high_shares.total if high else len(self._tasks) - self.delivery.waiting
        free = self._d.max_inflight - held
        if free <= 0:
            # Full: the polls go on receiving (fair shares hide what is over a caller's
            # share, without a read: a herd's excess is passed over quickly to whatever is
            # behind it), up to the bound fair shares keep to.
            if held >= 2 * self._d.max_inflight:
                await self._clock.sleep_ms(_FULL_BACKOFF_MS)
                return 0
            free = SQS_MAX_BATCH
        messages = await self._queue.receive(
            max_messages=min(SQS_MAX_BATCH, free), wait_s=self._d.wait_time_s,
            visibility_s=self._visibility.receive_s, lane=lane)
        deferrals = []
        for m in messages:
            at_ms = self._unread_deferral_ms(m, m.caller) if m.caller is not None else None
            if at_ms is not None:
                deferrals.append((m, at_ms))
                continue
            task = asyncio.create_task(self._handle_safely(m))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        if deferrals:
            # A herd's excess, hidden again in one request per receive (this poll waits for
            # it: the receives go no faster than the excess is passed over).
            try:
                await self._visibility.defer_many_until(deferrals)
            except AdapterError as e:  # they come back when their receive ends
                log.warning("deferral_failed", messages=len(deferrals), error=str(e))
        return len(messages)

    async def drain(self, timeout_s: float | None = None) -> None:
        """Wait until every message being handled is done (held ones are let go)."""
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=timeout_s)
        await self._visibility.drain()
        if (events := self.delivery.finishing.events) is not None:
            await events.drain()
        if self.endpoints is not None:
            await self.endpoints.drain()

    @property
    def inflight(self) -> int:
        return len(self._tasks)

    # --- one message ------------------------------------------------------------------
    async def _handle_safely(self, m: ReceivedMessage) -> None:
        key = (m.trigger_id, m.fire_at_ms)
        in_hand = self._handling.get(key) if m.trigger_id else None
        if in_hand is not None:
            if in_hand != m.message_id:
                # Another copy of this trigger is in our hands already (a due-scan re-send,
                # a duplicate send): it is enough, and if we die it reappears. This one goes
                # without a Cassandra read.
                self._metrics.inc("duplicate_messages_total")
                await self._visibility.delete_quietly(m)
            return  # (the same message again: its first receipt is being handled)
        if m.trigger_id:
            self._handling[key] = m.message_id
        try:
            await self.handle(m)
        except asyncio.CancelledError:
            raise
        except AdapterError as e:
            # Nothing to undo: the message reappears after its visibility timeout. A message
            # that keeps failing for a dependency (not for itself) is refreshed so that an
            # outage does not walk it into SQS's DLQ.
            log.warning("handle_failed", trigger_id=m.trigger_id, error=str(e))
            if m.receive_count >= REFRESH_AFTER_RECEIVES:
                with contextlib.suppress(AdapterError):
                    await self._visibility.defer(m, self._visibility.receive_s)
        except Exception:
            log.exception("handle_crashed", trigger_id=m.trigger_id)
        finally:
            if self._handling.get(key) == m.message_id:
                del self._handling[key]

    async def handle(self, m: ReceivedMessage) -> None:
        """Process one received message to the end (delivered, rescheduled or dropped)."""
        if not m.trigger_id:
            await self._queue.send_dead_letter("", 0, "malformed message body")
            await self._visibility.delete(m)
            return
        held: list[Held] = []  # counted in its caller's share while it is held
        if m.caller is not None:
            at_ms = self._unread_deferral_ms(m, m.caller)
            if at_ms is not None:
                await self._visibility.defer_until(m, at_ms)
                return
            # Counted from now, not from after the read: while rows are read (slowly, under
            # a herd) the receives must not admit more of the caller than its share.
            shares = self._shares(m.priority)
            held.append((shares, shares.enter(m.caller, m.fire_at_ms)))
        try:
            hidden_until_ms = self._visibility.hidden_until_ms()
            t = None
            if m.home_at_ms is not None and m.shard is not None:
                t = await self._store.get_at(m.trigger_id, m.home_at_ms, m.shard)
            if t is None:
                t = await self._store.get(m.trigger_id)
            await self._hold_and_deliver(m, t, hidden_until_ms, held)
        finally:
            for shares, entry in held:
                shares.leave(entry)

    async def _hold_and_deliver(self, m: ReceivedMessage, t: Trigger | None,
                                hidden_until_ms: int, held: list[Held]) -> None:
        """``handle`` after the read: ``t`` is the trigger as read (None: unknown). Appends
        its caller to ``held`` when it is counted in the caller's share. Goes on through
        the occurrence's later attempts while each is due within ``hold_max_ms``."""
        lost_rounds = 0
        while lost_rounds < _CAS_ROUNDS:
            if t is None or t.status.terminal or t.status is Status.PAUSED:
                await self._drop(m, t)
                return
            if t.fire_at_ms != m.fire_at_ms:
                # A message for an occurrence the trigger has moved past (the series went on,
                # or an edit moved it): the current occurrence has its own message.
                self._metrics.inc("stale_messages_total")
                log.info("stale_message_dropped", trigger_id=m.trigger_id,
                         message_fire_at_ms=m.fire_at_ms, fire_at_ms=t.fire_at_ms)
                await self._visibility.delete(m)
                return
            due_ms = t.due_at_ms()
            if self._stopping.is_set() or due_ms - self._clock.now_ms() > self.hold_max_ms:
                await self._put_back(m, due_ms)
                return
            if not await self._count_in_hand(m, t, due_ms, held):
                return
            hidden_until_ms = await self._visibility.keep_hidden(m, hidden_until_ms, due_ms)
            if watched := await self._watch(m, t, hidden_until_ms):  # a few times at most
                (t, hidden_until_ms), lost_rounds = watched, lost_rounds + 1
                continue
            if await self.screening.screened_out(m, t):  # caller paused, endpoint off, passed over
                return
            starts_ms = await self.delivery.starts_at(t)  # flow control may spread it
            if starts_ms - self._clock.now_ms() > self.hold_max_ms:
                self._metrics.inc("flow_control_deferrals_total")
                await self._put_back(m, starts_ms)
                return
            hidden_until_ms = await self._visibility.keep_hidden(m, hidden_until_ms, starts_ms)
            # Held until its claim time (ahead of the start by the claim gate's lead).
            outcome = await self.delivery.claim_and_deliver(m, t, hidden_until_ms,
                                                            self._stopping, starts_ms)
            if outcome is NOT_NOW:
                await self._put_back(m, due_ms)
                return
            if outcome is None:
                return
            if isinstance(outcome, NextAttempt):
                # Written back PENDING for a later attempt, the message still hidden: held
                # here for it, or put back, as any message (the row as written is the row
                # as read: whatever changes it meanwhile makes the claim lose).
                t = outcome.trigger
                continue
            lost_rounds += 1
            t = outcome  # the claim lost a race: look again at the trigger's current state
        log.warning("claim_gave_up", trigger_id=m.trigger_id)

    async def _count_in_hand(self, m: ReceivedMessage, t: Trigger, due_ms: int,
                             held: list[Held]) -> bool:
        """Count ``t`` in its caller's share (of its priority's shares) as read, or hide it
        again on SQS if the caller is over its share (False)."""
        shares = self._shares(t.priority)
        if not held:
            if not shares.admits(t.caller, self.delivery.waiting):
                await self._visibility.defer_until(
                    m, self._over_share_until_ms(m, t.caller, due_ms, shares))
                return False
            held.append((shares, shares.enter(t.caller, due_ms)))
        elif held[0] != (shares, (t.caller, due_ms)):  # counted before the read: as read
            before, entry = held.pop()
            before.leave(entry)
            held.append((shares, shares.enter(t.caller, due_ms)))
        return True

    async def _watch(self, m: ReceivedMessage, t: Trigger, hidden_until_ms: int
                     ) -> tuple[Trigger | None, int] | None:
        """Someone else's claim on ``t``, not yet watched for its lease: watched here with
        the message kept in hand (deferred to SQS, it could come back to another dispatcher,
        whose watch would start over); the row read again after, and until when the message
        stays hidden. None: nothing to watch (not IN_FLIGHT, watched long enough, or a
        watch too long to hold: the claim's check defers the message)."""
        if t.status is not Status.IN_FLIGHT:
            return None
        watch_ms = await self.delivery.watch_ms(t)
        if not 0 < watch_ms <= max(self.hold_max_ms, self.delivery.longest_watch_ms):
            return None
        until_ms = self._clock.now_ms() + watch_ms
        hidden_until_ms = await self._visibility.keep_hidden(m, hidden_until_ms, until_ms)
        # Asked again while watching: a death declared meanwhile (the successor's first
        # declaration, or its next one after a Redis flush lost the record) ends the watch
        # within a step, not a lease later.
        while (now_ms := self._clock.now_ms()) < until_ms:
            await self._clock.sleep_until_ms(min(until_ms, now_ms + WATCH_STEP_MS))
            if not await self.delivery.watch_ms(t):
                break
        return await self._store.get(m.trigger_id), hidden_until_ms

    async def _drop(self, m: ReceivedMessage, t: Trigger | None) -> None:
        if t is None:
            log.warning("message_for_unknown_trigger", trigger_id=m.trigger_id)
        elif t.status is Status.FIRED:
            self._metrics.inc("duplicate_messages_total")
        elif t.status is Status.FAILED:
            # FAILED is written before the dead letter is listed and sent and the message
            # deleted: a message that comes back to a FAILED trigger may mean either failed.
            # Listing it when it is missing (never over a replayed or purged one) and sending
            # it again keep the dead letter at least once (DLQ readers dedupe by trigger id).
            letter = letter_for_failed(t, self._clock.now_ms())
            await self._store.put_dead_letter_if_new(letter, ttl_s=self._s.retention_s)
            # Its events may have been lost with the process that wrote FAILED: again, with
            # the same ids (the occurrence as it was when it failed).
            before = replace(t, occurrence_seq=max(0, t.occurrence_seq - 1))
            emit_all(self.delivery.finishing.events, [
                announce.dead_lettered(before, letter.reason.value, t.last_error,
                                       letter.dead_at_ms),
                announce.failed(before, letter.reason.value, t.last_error,
                                letter.dead_at_ms)])
            await self._queue.send_dead_letter(t.trigger_id, t.fire_at_ms,
                                               t.last_error or "failed")
            self._metrics.inc("dead_letter_resends_total")
        log.debug("message_dropped", trigger_id=m.trigger_id,
                 status=t.status.value if t else None)
        await self._visibility.delete(m)

    def _unread_deferral_ms(self, m: ReceivedMessage, caller: str) -> int | None:
        """Until when to hide ``m``, whose body names its ``caller``, without reading its row,
        if it cannot be held (None: it can): the caller is over its share, or it is due and
        its caller's queue for the bulkhead is full (then it comes back at about its
        turn). A high-priority message is counted in the high shares, and never waits for
        room behind the caller's others in its bulkhead."""
        shares = self._shares(m.priority)
        if not shares.admits(caller, self.delivery.waiting):
            return self._over_share_until_ms(m, caller, m.fire_at_ms, shares)
        bulkheads = self.delivery.bulkheads
        if m.fire_at_ms <= self._clock.now_ms() and bulkheads.full(caller, m.priority):
            self._metrics.inc("bulkhead_deferrals_total")
            return bulkheads.come_back_ms(caller, m.receive_count)
        return None

    def _two_shares(self) -> tuple[Shares, Shares]:
        """The shares of the in-flight cap, and the high-priority messages' own."""
        return (Shares(self._d.max_inflight, self.delivery.weight),
                Shares(self._d.max_inflight, self.delivery.weight))

    def _shares(self, priority: Priority) -> Shares:
        return self.high_shares if priority is Priority.HIGH else self.shares

    def _over_share_until_ms(self, m: ReceivedMessage, caller: str, due_ms: int,
                             shares: Shares) -> int:
        """The dispatcher is full and ``caller`` holds its share of it: until when to hide
        the message (due at ``due_ms``) rather than hold it. One due later than the
        caller's earliest held message (by a second or more: room is made for it before it
        is due, as those are sent) for half the time left, at least ``FAIR_DEFER_S``. One
        due no later (a herd: its held messages are due with it) until ``FAIR_DEFER_S``
        after its due time: no room is made before, and the receives meanwhile pass over
        it, once, to what is behind it. One due already until about its turn, behind the
        caller's messages in hand (``DrainPace``)."""
        self._metrics.inc("fair_share_deferrals_total", caller=caller)
        now_ms = self._clock.now_ms()
        ahead_ms = due_ms - now_ms
        earliest_ms = shares.earliest_due_ms(caller)
        if ahead_ms > 0 and earliest_ms is not None and earliest_ms <= due_ms - 1000:
            return now_ms + max(FAIR_DEFER_S, ahead_ms // 2000) * 1000
        if ahead_ms > 0:
            return due_ms + FAIR_DEFER_S * 1000
        return self.delivery.bulkheads.pace.come_back_ms(
            caller, now_ms, shares.in_hand(caller), m.receive_count)

    async def _put_back(self, m: ReceivedMessage, due_ms: int) -> None:
        """Hide the message until the enqueue lead before it is due, at least a second
        (``hold_max_ms``), or hand it back now if stopping."""
        if self._stopping.is_set():
            await self._visibility.hand_back(m)
            return
        await self._visibility.show_before(m, due_ms)
