"""The send under a claim that applied, and its outcome. ``Sending`` is one of the parts
``Delivery`` holds.

In order: the wait for the send's start (never early; ``wait_for_start`` says no when the
dispatcher stops well before it, and the claim is given back), flow control's place for the
destination (held until the send has answered; a long wait for it keeps the claim fresh), the
caller's bulkhead, the fence (the message kept hidden, then the claim's lease checked last:
``claim_keeping``), and the send: through the webhook channel, its answer settling the
origin's breaker slot, or through the notification channels (``fanout``). The outcome
(``finish``) is written after the send answered, few at a time while other sends are due
(``_finish_slot``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Callable

import structlog
from opentelemetry.trace import Span, SpanKind, StatusCode

from dispatcher.bulkheads import Bulkheads
from dispatcher.claim_gate import DueTimers
from dispatcher.claim_keeping import Claim, ClaimKeeper, KeptClaim
from dispatcher.claiming import Claimed
from dispatcher.endpoint_health import EndpointWatch
from dispatcher.fanout import FanOut
from dispatcher.finishing import Attempted, DispatchStore, Finishing, NextAttempt
from dispatcher.flow_control import FlowGate
from dispatcher.visibility import Visibility
from trigger_service.config.callers import parse_callback_url
from trigger_service.config.live_callers import Callers
from trigger_service.config.settings import DispatchSettings
from trigger_service.core.model import Trigger
from trigger_service.core.ports import Channel, Clock, Metrics
from trigger_service.core.ports.values import DeliveryResult, ReceivedMessage
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


def callback_allowed(callers: Callers, t: Trigger) -> bool:
    """Checked again at delivery: the callers file may have changed since registration
    (a prefix removed, the caller gone); on the normalised URL, IP literals classified
    (the channel's resolver checks the addresses of names)."""
    caller = callers.by_name(t.caller)
    url = parse_callback_url(t.callback_url)
    return caller is not None and url is not None and caller.allows_callback(url)


class Sending:
    def __init__(self, d: DispatchSettings, store: DispatchStore, channel: Channel,
                 keeper: ClaimKeeper, visibility: Visibility, finishing: Finishing,
                 fan_out: FanOut, *, allowed: Callable[[Trigger], bool],
                 bulkheads: Bulkheads, flow: FlowGate | None,
                 endpoints: EndpointWatch | None, lag: LagTally, clock: Clock,
                 metrics: Metrics, tracing: Tracing) -> None:
        """``allowed``: whether a trigger's callback URL is still allowed for its caller
        (``callback_allowed``). ``flow``: flow control per destination (None: none).
        ``endpoints``: counts each webhook answer for its endpoint's health (None: not
        counted). ``lag``: where each first attempt's fire lag is added."""
        self._d = d
        self._store = store
        self._channel = channel
        self._keeper = keeper
        self._visibility = visibility
        self._finishing = finishing
        self._fan_out = fan_out
        self._allowed = allowed
        self._bulkheads = bulkheads
        self._flow = flow
        self._endpoints = endpoints
        self._lag = lag
        self._clock = clock
        self._metrics = metrics
        self._tracing = tracing
        self._timers = DueTimers(clock)
        self._sending = 0  # sends due and not yet answered (_finish_slot)
        self._finish_slots = asyncio.Semaphore(FINISH_CONCURRENCY_WHILE_SENDING)

    async def wait_for_start(self, c: Claimed, stopping: asyncio.Event | None) -> bool:
        """Wait until the send's start (never early). False if ``stopping`` was set first
        while the start was more than ``GIVE_BACK_AHEAD_MS`` away (the claim is to be given
        back); a send closer than that is made during the drain."""
        due_ms = c.starts_ms
        if due_ms - self._clock.now_ms() <= GIVE_BACK_AHEAD_MS:
            stopping = None  # sent during the drain
        return await self._timers.wait_until(due_ms, stopping)

    async def send(self, m: ReceivedMessage, c: Claimed, hidden_until_ms: int | None
                   ) -> Attempted | Trigger | NextAttempt | None:
        """At the start: the send, inside flow control's place and the caller's bulkhead.
        The current row (or None) if the claim was lost before it."""
        claimed = c.trigger
        # Flow control's place (before the bulkhead: a key at its bounds must not hold the
        # caller's other sends), held until the send has answered. A long wait for it keeps
        # the claim fresh (renewed, the message kept hidden): a send that starts long after
        # its claim's time is not taken over by another dispatcher meanwhile.
        kept = KeptClaim(c.claim, hidden_until_ms)
        async with (self._flow.admitted(claimed, claimed.claim_id or "",
                                        lambda: self._keeper.keep(m, kept))
                    if self._flow is not None else contextlib.nullcontext()):
            if kept.lost:
                return await self._store.get(claimed.trigger_id)
            claimed, hidden_until_ms = kept.claim.trigger, kept.hidden_until_ms
            c = dataclasses.replace(c, claim=kept.claim)
            self._sending += 1
            try:
                async with self._bulkheads.held(claimed.caller, claimed.priority.rank):
                    return await self._send_in_bulkhead(m, c, hidden_until_ms)
            finally:
                self._sending -= 1

    async def finish(self, m: ReceivedMessage, outcome: Attempted, *, patient: bool
                     ) -> Trigger | NextAttempt | None:
        """Record ``outcome``: its attempt in the history and the occurrence's outcome
        (``Finishing``), in a finish slot. ``patient``: the outcome's write may wait for
        company (others of its wave are still sending)."""
        async with self._finish_slot():
            # The history and the outcome are independent writes: side by side, of one
            # decision.
            verdict = self._finishing.decide(outcome)
            history = asyncio.ensure_future(
                self._finishing.record_attempt(outcome, verdict.outcome, patient=patient))
            try:
                with self._tracing.child("trigger.outcome", attributes={
                        "trigger.delivered": outcome.result.ok}):
                    return await self._finishing.record_outcome(m, outcome, verdict,
                                                                patient=patient)
            finally:
                await history

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

    async def _send_in_bulkhead(self, m: ReceivedMessage, c: Claimed,
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
            return await self._fan_out.fan_out(m, claimed, claim.ends_mono_ms)
        started_ms = self._clock.now_ms()
        if not self._allowed(claimed):
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
        if self._endpoints is not None:
            await self._endpoints.observe(claimed, result)
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
                hidden_until_ms = await self._visibility.keep_hidden(
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

    def _observe_start(self, t: Trigger) -> None:
        """The POST starts: count the attempt; a first attempt's lag behind the fire time
        is the fire lag (a retry's start is set by its backoff)."""
        self._metrics.inc("delivery_attempts_total", caller=t.caller)
        if t.attempts == 1:
            now_ms = self._clock.now_ms()
            lag_s = max(0, now_ms - t.fire_at_ms) / 1000
            self._metrics.observe("fire_lag_seconds", lag_s)
            self._lag.add(now_ms, lag_s)


def _annotate(span: Span, result: DeliveryResult) -> None:
    """The answer on the send's span (the status code; on a failure its error)."""
    if result.status_code is not None:
        span.set_attribute("http.response.status_code", result.status_code)
    if not result.ok:
        span.set_status(StatusCode.ERROR, (result.error or "failed")[:200])
