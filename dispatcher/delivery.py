"""One delivery attempt: claim the trigger with an LWT ahead of its due time (``claim_gate``:
the lead grows with the backlog), send it at the due time through the channel inside the
caller's bulkhead and the circuit breaker of its (caller, callback origin), and record the
outcome.

The pipeline for a herd due at one instant: the claims are spread over the seconds before it
(at most ``claim_concurrency`` LWTs in flight), so at the instant only the sends are left; the
bulkhead bounds concurrent sends per caller, not claims; outcomes (FIRED, the retry, the
history line) are written after their send answered, few at a time while other sends are due
(``_finish_slot``). The claim decides a race with a cancel: both are LWTs on the row, so
Paxos lets exactly one apply; a claim that applied is sent without another read, and a cancel
that comes after it answers 409 (``TriggerService.cancel``).

Why each failure is safe:

- killed after the claim: the message reappears; a dispatcher that has watched the same
  claim on the row for the claim's lease takes it over by LWT (``claim_takeovers_total``;
  the receiver may see that attempt twice). No clock decides it: a send goes out only
  within its claim's lease, checked last before the send, and the takeover waits the lease
  out on its own clock (``claim_keeping``), so a cancel that applies after a takeover is
  never followed by the first claimer's send;
- killed after a 2xx but before FIRED is written: the message reappears and the trigger is
  delivered again (at-least-once; the receiver dedupes on the occurrence id,
  ``X-Trigger-Occurrence-Id``: the trigger id is the same for every occurrence of a series);
- two dispatchers with the same message or duplicates of it: only one claim LWT applies;
  the loser hides its copy until the winner's claim would be stale (it may be the winner's
  only copy: deleting it would leave a dead winner's trigger to the reconciler); it is
  dropped, and counted once (``duplicate_messages_total``), when it comes back to a
  finished trigger.

Deferrals (an open circuit, a caller at its limit, someone else's live claim) spend no
attempt, and no redrive budget either (``visibility``).

``Delivery`` is composed of plain parts, each its own idea: the ``ClaimGate`` (when to claim)
and ``DueTimers`` (when to send), ``Visibility`` (the only part that hides, shows, passes on
or deletes the message in hand), ``FanOut`` (notification channels) and ``Finishing`` (the
outcome). The origin's breaker slot is held by a ``with`` block from the claim to the send's
answer, so every way out gives it back once.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import os
import random
import socket
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace

import structlog
from opentelemetry.trace import Span, SpanKind, StatusCode

from dispatcher.breaker import CircuitBreaker, TrialSlot
from dispatcher.breakers import Breakers
from dispatcher.bulkheads import Bulkheads
from dispatcher.claim_gate import ClaimGate, DueTimers, Waves
from dispatcher.claim_keeping import (
    LEASE_SLACK_MS,
    TAKEOVER_MARGIN_MS,
    Claim,
    ClaimKeeper,
    KeptClaim,
    Sightings,
)
from dispatcher.endpoint_health import EndpointWatch
from dispatcher.fair_share import caller_weights
from dispatcher.fanout import UNCONFIGURED, FanOut, Notifiers
from dispatcher.finishing import (
    Attempted,
    DispatchStore,
    Finishing,
    NextAttempt,
    RetryPolicies,
)
from dispatcher.flow_control import FlowGate
from dispatcher.recipients import SendTimeProfiles
from dispatcher.visibility import REFRESH_AFTER_RECEIVES, Visibility
from trigger_service.config.callers import parse_callback_url
from trigger_service.config.live_callers import Callers
from trigger_service.config.settings import Settings
from trigger_service.core.deadlines import expired
from trigger_service.core.model import Status, Trigger, row_partition
from trigger_service.core.ports import (
    Channel,
    Clock,
    DeliveryQueue,
    DeliveryResult,
    Metrics,
    ReceivedMessage,
)
from trigger_service.core.ports.recipient import RecipientStore
from trigger_service.core.time.lag import LagTally
from trigger_service.core.trace_context import Tracing
from trigger_service.core.urls import callback_origin

log = structlog.get_logger("dispatcher")

# A send that starts late is given what is left of its claim's lease, down to this; with
# less left the claim is renewed first.
MIN_SEND_TIMEOUT_MS = 2_000
# Renewals the fence tries before a send when each one's time is lost again to the waits
# before the check (keeping the message hidden): then nothing is sent, and the claim is left
# to run out (it is taken over after its lease).
FENCE_RENEWALS = 3
# Outcomes recorded at once while sends are due: an outcome mostly waits (its write shares a
# Paxos round with its wave's, waiting up to a few hundred ms for them), so the bound is on
# the work after the wait, not on the waits.
FINISH_CONCURRENCY_WHILE_SENDING = 256
# A dispatcher that stops gives back the claims it took more than this ahead of their send.
GIVE_BACK_AHEAD_MS = 2_000

__all__ = ["HELD_BACK", "REFRESH_AFTER_RECEIVES", "Delivery", "DispatchDeps", "HeldBack",
           "NextAttempt"]


class HeldBack(enum.Enum):
    """``claim_and_deliver``'s answer when the dispatcher started stopping before the send
    (a claim taken ahead is given back first)."""

    HELD_BACK = "held_back"


HELD_BACK = HeldBack.HELD_BACK


@dataclass(frozen=True, slots=True)
class DispatchDeps:
    """What the dispatcher's parts share."""

    settings: Settings
    store: DispatchStore
    queue: DeliveryQueue
    clock: Clock
    metrics: Metrics
    # Spans of each occurrence's claim, send and outcome; export off by default.
    tracing: Tracing = field(default_factory=Tracing)


def new_claim_id() -> str:
    # From the random module, not the OS's entropy (a system call per claim): unique is all
    # a claim id must be (the module reseeds in a forked child).
    return f"{random.getrandbits(128):032x}"


def _partition(t: Trigger) -> tuple[int, int] | None:
    """The store partition of ``t``'s row, if known: claims of one share a Paxos round
    (``ClaimGate``)."""
    return None if t.home_at_ms is None else row_partition(t.home_at_ms, t.shard)


@dataclass(frozen=True, slots=True)
class _Claimed:
    before: Trigger  # the row the claim replaced (given back if the dispatcher stops)
    claim: Claim  # as claimed, with its lease's end
    slot: TrialSlot  # the origin's breaker let this claim through
    starts_ms: int  # when the send starts: the due time, or its flow-control slot after it

    @property
    def trigger(self) -> Trigger:
        return self.claim.trigger


class Delivery:
    def __init__(self, deps: DispatchDeps, channel: Channel, callers: Callers, *,
                 claim_ids: Callable[[], str] = new_claim_id,
                 notifiers: Notifiers = UNCONFIGURED,
                 recipients: RecipientStore | None = None,
                 endpoints: EndpointWatch | None = None,
                 flow: FlowGate | None = None) -> None:
        """``flow``: flow control per destination (None: none, every send at its due
        time)."""
        self._s = deps.settings
        self.endpoints = endpoints  # counts each webhook answer for its endpoint's health
        self.flow = flow
        self._d = deps.settings.dispatch
        self._store = deps.store
        self._clock = deps.clock
        self._metrics = deps.metrics
        self._tracing = deps.tracing
        self._channel = channel
        self._callers = callers
        self._new_claim_id = claim_ids
        self.name = f"{socket.gethostname()}:{os.getpid()}"  # in the attempt history
        self.visibility = Visibility(deps.settings, deps.queue, deps.clock, deps.metrics)
        self._keeper = ClaimKeeper(deps.store, self.visibility, deps.clock, deps.metrics,
                                   claim_ids, int(self._d.callback_timeout_s * 1000),
                                   MIN_SEND_TIMEOUT_MS)
        self._sightings = Sightings(deps.clock)  # others' claims, watched before a takeover
        # The lease of a claim written before leases were: the longest such a claim was
        # (taken the maximum lead ahead, then a whole callback timeout and the slack).
        self._legacy_lease_ms = (self._d.claim_lead_max_ms
                                 + int(self._d.callback_timeout_s * 1000) + LEASE_SLACK_MS)
        self.finishing = Finishing(deps.settings, deps.store, deps.queue, self.visibility,
                                   RetryPolicies(callers, self._d), deps.clock, deps.metrics,
                                   self.name)
        self.fan_out = FanOut(deps.settings, deps.store, channel, notifiers, self.finishing,
                              self._callback_allowed, deps.clock,
                              deps.metrics, SendTimeProfiles(recipients, deps.clock)
                              if recipients is not None else None)
        self._timers = DueTimers(deps.clock)
        self._sending = 0  # sends due and not yet answered (_finish_slot)
        self._finish_slots = asyncio.Semaphore(FINISH_CONCURRENCY_WHILE_SENDING)
        self._wave = Waves()  # who may wait for company when recording an outcome
        self.weight = caller_weights(callers)  # in fair shares (``fair_share``)
        self.gate = ClaimGate(deps.clock, min_lead_ms=self._d.claim_lead_ms,
                              max_lead_ms=self._d.claim_lead_max_ms,
                              concurrency=self._d.claim_concurrency,
                              weight=self.weight)
        self.bulkheads = Bulkheads(callers, deps.clock,
                                   default_size=self._d.default_max_concurrency,
                                   max_waiting=self._d.max_inflight)
        self.breakers = Breakers(deps.clock, deps.metrics, fail_max=self._d.breaker_fail_max,
                                 reset_s=self._d.breaker_reset_s,
                                 max_per_caller=self._d.breaker_max_origins)
        self.lag = LagTally()  # fire lag not yet published to the ops board

    def breaker(self, caller: str, origin: str) -> CircuitBreaker | None:
        """The circuit of a caller's callbacks to an origin (``core.urls.callback_origin``);
        None when the caller is at its cap of circuits in trouble (``breakers``)."""
        return self.breakers.get(caller, origin)

    async def starts_at(self, t: Trigger) -> int:
        """When ``t``'s next send may start: its due time, or the rate slot flow control
        reserved for it (``flow_control``; the same one if asked again)."""
        return await self.flow.reserve(t) if self.flow is not None else t.due_at_ms()

    async def claim_and_deliver(self, m: ReceivedMessage, t: Trigger,
                                hidden_until_ms: int | None = None,
                                stopping: asyncio.Event | None = None,
                                starts_ms: int | None = None
                                ) -> Trigger | NextAttempt | HeldBack | None:
        """Wait for ``t``'s claim time (``claim_gate``), claim it and deliver it. Returns the
        current trigger if the claim lost a race or a cancel won before the send (the caller
        looks again), ``HELD_BACK`` if ``stopping`` was set before the send (a claim taken is
        given back; the caller hands the message back), a ``NextAttempt`` if the occurrence
        was written back PENDING for a later attempt (a retry, a channel due later: the
        message is still hidden, the caller holds it for that attempt or hides it until
        then), otherwise None (the message is dealt with).
        ``hidden_until_ms``: until when ``m`` is known to stay hidden; extended if the
        delivery could outlast it. ``starts_ms``: when the send starts (``starts_at``; None:
        the due time); the claim is taken ahead of it. One ``trigger.deliver`` span of
        ``t``'s occurrence (``core.trace_context``) holds the claim's, send's and outcome's."""
        with self._tracing.step("trigger.deliver", t, attributes={
                "messaging.message.id": m.message_id,
                "messaging.message.receive_count": m.receive_count}):
            return await self._claim_and_deliver(m, t, hidden_until_ms, stopping, starts_ms)

    async def _claim_and_deliver(self, m: ReceivedMessage, t: Trigger,
                                 hidden_until_ms: int | None, stopping: asyncio.Event | None,
                                 starts_ms: int | None
                                 ) -> Trigger | NextAttempt | HeldBack | None:
        starts_ms = t.due_at_ms() if starts_ms is None else starts_ms
        with contextlib.ExitStack() as held:  # the breaker slot, from the claim to the answer
            async with self.gate.turn(starts_ms, stopping, _partition(t), t.caller) as go:
                if not go:
                    return HELD_BACK
                claimed = await self._claim(m, t, held, starts_ms)
            if not isinstance(claimed, _Claimed):
                return claimed
            with self._wave.open(_partition(t)) as mates:
                outcome = await self._send_when_due(m, claimed, hidden_until_ms, stopping)
        if isinstance(outcome, Attempted):
            async with self._finish_slot():
                # The history and the outcome are independent writes: side by side.
                history = asyncio.ensure_future(self.finishing.record_attempt(outcome))
                try:
                    with self._tracing.child("trigger.outcome", attributes={
                            "trigger.delivered": outcome.result.ok}):
                        return await self.finishing.record_outcome(
                            m, outcome, patient=mates.waiting)
                finally:
                    await history
        return outcome

    @contextlib.asynccontextmanager
    async def _finish_slot(self) -> AsyncIterator[None]:
        """Sends first: while any are due and not yet answered, outcomes are recorded only
        ``FINISH_CONCURRENCY_WHILE_SENDING`` at a time, so that a herd's POSTs are not
        queued behind its FIRED writes (an outcome is only ever written after its send)."""
        if not self._sending:
            yield
            return
        async with self._finish_slots:
            yield

    async def _claim(self, m: ReceivedMessage, t: Trigger, held: contextlib.ExitStack,
                     starts_ms: int) -> _Claimed | Trigger | None:
        """The claim LWT (inside a claim slot), unless someone else's claim not yet watched
        for its lease (``claim_keeping.Sightings``), the caller's backlog or an open circuit
        defers the message, or the occurrence is past its deadline and dead-lettered
        (``Finishing.expire``) (None). The breaker's slot goes into ``held``."""
        if t.status is Status.IN_FLIGHT:
            wait_ms = self._sightings.wait_ms(t, self._lease_of(t))
            if wait_ms:
                # Someone may be delivering it right now: look again once this dispatcher
                # has watched their claim for its lease (a dead claimer's trigger is late by
                # about a lease from when its message came back, whatever the clocks say).
                await self.visibility.defer_until(m, self._clock.now_ms() + wait_ms)
                return None
        else:
            self._sightings.forget(t.trigger_id)
        # The send's earliest start: its due time, or its flow-control slot (a slot past
        # the deadline expires it now rather than at the slot).
        start_ms = max(self._clock.now_ms(), starts_ms)
        if expired(t, start_ms):  # past its deadline: dead-lettered, never sent
            await self.finishing.expire(m, t, start_ms, t.last_error)  # (a retry's: why)
            return None
        if self.endpoints is not None and await self.endpoints.disabled_for(t):
            return t  # disabled since the message was received: look again (it is held)
        if self.bulkheads.full(t.caller):
            self._metrics.inc("bulkhead_deferrals_total")
            await self.visibility.defer_until(
                m, self.bulkheads.come_back_ms(t.caller, m.receive_count))
            return None
        breaker = self.breaker(t.caller, callback_origin(t.callback_url))
        # No circuit to be had (every one of the caller's is in trouble): as if open.
        wait_ms = (breaker.try_acquire() if breaker is not None
                   else max(1, int(self._d.breaker_reset_s * 1000)))
        if wait_ms or breaker is None:
            # Open circuit: no attempt is spent; the message comes back when it may close.
            self._metrics.inc("circuit_open_deferrals_total")
            await self.visibility.defer_until(m, self._clock.now_ms() + wait_ms)
            return None
        slot = held.enter_context(breaker.slot())
        # The claim's time is when the POST starts: now, or the start (the due time, or the
        # flow-control slot) if that is later (a claim is taken ahead, by the gate's lead).
        # Never the time before a wait.
        claimed = replace(t, status=Status.IN_FLIGHT, claim_id=self._new_claim_id(),
                                claimed_at_ms=max(self._clock.now_ms(), starts_ms),
                                attempts=t.attempts + 1)
        with self._tracing.child("trigger.claim") as span:
            claim = await self._keeper.take(t, claimed)
            span.set_attribute("trigger.claim.applied", claim is not None)
        if claim is None:
            return await self._lost_claim(m, t)
        if t.status is Status.IN_FLIGHT:
            self._sightings.forget(t.trigger_id)
            self._metrics.inc("claim_takeovers_total")
            log.warning("claim_taken_over", trigger_id=t.trigger_id, caller=t.caller,
                        attempt=claimed.attempts, stale_claim=t.claim_id)
        if self._clock.now_ms() > starts_ms:
            # Claimed too late to send on time: the backlog outgrew the claim lead.
            self._metrics.inc("claims_late_total")
        return _Claimed(t, claim, slot, starts_ms)

    @property
    def waiting(self) -> int:
        """Messages waiting for a caller's bulkhead, over all callers."""
        return self.bulkheads.waiting

    def _stale_at(self, t: Trigger) -> int:
        return t.claim_stale_at_ms(int(self._d.callback_timeout_s * 1000))

    @property
    def longest_watch_ms(self) -> int:
        """The longest a claim is watched before a takeover (a claim taken as far ahead as
        the claim gate goes)."""
        return self._legacy_lease_ms + TAKEOVER_MARGIN_MS

    def watch_ms(self, t: Trigger) -> int:
        """How much longer this dispatcher must watch ``t``'s claim (``t`` as just read,
        IN_FLIGHT) before it may take it over: 0 now (``claim_keeping.Sightings``)."""
        return self._sightings.wait_ms(t, self._lease_of(t))

    def _lease_of(self, t: Trigger) -> int:
        return t.claim_lease_ms if t.claim_lease_ms is not None else self._legacy_lease_ms

    async def _send_when_due(self, m: ReceivedMessage, c: _Claimed, hidden_until_ms: int | None,
                             stopping: asyncio.Event | None
                             ) -> Attempted | Trigger | NextAttempt | HeldBack | None:
        """After the claim: at the due time the send, inside the caller's bulkhead."""
        claimed = c.trigger
        due_ms = c.starts_ms
        if due_ms - self._clock.now_ms() <= GIVE_BACK_AHEAD_MS:
            stopping = None  # sent during the drain
        if not await self._timers.wait_until(due_ms, stopping):  # never early
            # Stopping with a claim taken ahead: the row goes back as it was, so whoever
            # gets the message sends on time (the claim would outlive the drain).
            if await self._store.compare_and_set(claimed, c.before):
                self._metrics.inc("claims_given_back_total")
                return HELD_BACK
            return await self._store.get(claimed.trigger_id)
        # Flow control's place (before the bulkhead: a key at its bounds must not hold the
        # caller's other sends), held until the send has answered. A long wait for it keeps
        # the claim fresh (renewed, the message kept hidden): a send that starts long after
        # its claim's time is not taken over by another dispatcher meanwhile.
        kept = KeptClaim(c.claim, hidden_until_ms)
        async with (self.flow.admitted(claimed, claimed.claim_id or "",
                                       lambda: self._keeper.keep(m, kept))
                    if self.flow is not None else contextlib.nullcontext()):
            if kept.lost:
                return await self._store.get(claimed.trigger_id)
            claimed, hidden_until_ms = kept.claim.trigger, kept.hidden_until_ms
            c = dataclasses.replace(c, claim=kept.claim)
            self._sending += 1
            try:
                async with self.bulkheads.held(claimed.caller):
                    return await self._send_in_bulkhead(m, c, hidden_until_ms)
            finally:
                self._sending -= 1

    async def _send_in_bulkhead(self, m: ReceivedMessage, c: _Claimed,
                                hidden_until_ms: int | None
                                ) -> Attempted | Trigger | NextAttempt | None:
        slot = c.slot
        # Notification channels get a whole callback timeout each (the fan-out bounds each
        # send by what is left of the lease too: its recipient read comes after this).
        floor_ms = (MIN_SEND_TIMEOUT_MS if c.trigger.plan is None
                    else int(self._d.callback_timeout_s * 1000))
        fenced = await self._fence(m, c.claim, hidden_until_ms, floor_ms)
        if fenced is None:
            return await self._store.get(c.trigger.trigger_id)
        # Nothing awaited from here to the channel's send: the fence's check stays true.
        claim, left_ms = fenced
        claimed = claim.trigger
        timeout_s = min(self._d.callback_timeout_s, left_ms / 1000)
        self._observe_start(claimed)
        if claimed.plan is not None:  # notification channels: each with its own state
            slot.give_back()
            return await self.fan_out.fan_out(m, claimed, claim.ends_mono_ms)
        started_ms = self._clock.now_ms()
        if not self._callback_allowed(claimed):
            return Attempted(claimed, DeliveryResult(
                False, None, "callback URL not allowed for this caller any more"),
                started_ms, 0, refused=True)
        with self._tracing.child("trigger.send", SpanKind.CLIENT, {
                "trigger.callback_origin": callback_origin(claimed.callback_url)}) as span:
            # Current inside: the channel sends its traceparent with the callback.
            result = await self._channel.deliver(
                claimed, claimed.attempts,
                None if timeout_s >= self._d.callback_timeout_s else timeout_s)
            _annotate(span, result)
        # Only answers that show the origin in trouble open its breaker: a 4xx (410 too)
        # means it is up and answering. A refused address says nothing about it (the slot
        # is given back unsettled).
        if not result.refused:
            (slot.failed if result.origin_failed else slot.succeeded)()
        if self.endpoints is not None:
            await self.endpoints.observe(claimed, result)
        return Attempted(claimed, result, started_ms, self._clock.now_ms() - started_ms,
                         refused=result.refused)

    async def _fence(self, m: ReceivedMessage, claim: Claim, hidden_until_ms: int | None,
                     floor_ms: int) -> tuple[Claim, int] | None:
        """The claim to send under and how long its send may take (ms, at least
        ``floor_ms``), after every wait before the send: the message kept hidden for it
        (an SQS call that may stall), then the check of the lease (``claim_keeping``). A
        claim with too little left is renewed (a new claim id and lease, so a taker who
        watched the old one cannot apply) and checked again. None: lost meanwhile (taken
        over, cancelled), or its time lost again after each of ``FENCE_RENEWALS``
        renewals; nothing may be sent. Raises ``AdapterError``."""
        for renewals in range(FENCE_RENEWALS + 1):
            if hidden_until_ms is not None:
                hidden_until_ms = await self.visibility.keep_hidden(
                    m, hidden_until_ms, claim.trigger.claimed_at_ms or 0)
            left_ms = self._keeper.left_ms(claim)
            if left_ms >= floor_ms:
                return claim, left_ms
            if renewals == FENCE_RENEWALS:
                break
            renewed = await self._keeper.renew(claim)
            if renewed is None:
                return None
            claim = renewed
        log.warning("send_not_made_lease_lost", trigger_id=claim.trigger.trigger_id,
                    caller=claim.trigger.caller)
        return None

    def _callback_allowed(self, t: Trigger) -> bool:
        """Checked again at delivery: the callers file may have changed since registration
        (a prefix removed, the caller gone); on the normalised URL, IP literals classified
        (the channel's resolver checks the addresses of names)."""
        caller = self._callers.by_name(t.caller)
        url = parse_callback_url(t.callback_url)
        return caller is not None and url is not None and caller.allows_callback(url)

    def _observe_start(self, t: Trigger) -> None:
        """The POST starts: count the attempt; a first attempt's lag behind the fire time
        is the fire lag (a retry's start is set by its backoff)."""
        self._metrics.inc("delivery_attempts_total", caller=t.caller)
        if t.attempts == 1:
            now_ms = self._clock.now_ms()
            lag_s = max(0, now_ms - t.fire_at_ms) / 1000
            self._metrics.observe("fire_lag_seconds", lag_s)
            self.lag.add(now_ms, lag_s)

    async def _lost_claim(self, m: ReceivedMessage, t: Trigger) -> Trigger | None:
        current = await self._store.get(t.trigger_id)
        if (current is not None and current.status is Status.IN_FLIGHT
                and current.claim_id != t.claim_id):
            # Another dispatcher claimed it just now. This copy may be the winner's only one
            # (the same SQS message received twice): keep it hidden until the winner's claim
            # would be stale; if the winner finished by then it is dropped as a duplicate.
            log.info("claim_lost_copy_hidden", trigger_id=t.trigger_id, caller=t.caller,
                     attempt=t.attempts + 1)
            await self.visibility.defer_until(m, self._stale_at(current) + 1)
            return None
        return current


def _annotate(span: Span, result: DeliveryResult) -> None:
    """The answer on the send's span (the status code; on a failure its error)."""
    if result.status_code is not None:
        span.set_attribute("http.response.status_code", result.status_code)
    if not result.ok:
        span.set_status(StatusCode.ERROR, (result.error or "failed")[:200])
