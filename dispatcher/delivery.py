"""One delivery attempt: claim the trigger with an LWT ahead of its due time (``claim_gate``:
the lead grows with the backlog), send it at the due time through the channel inside the
caller's bulkhead and the circuit breaker of its (caller, callback origin), and record the
outcome.

The pipeline for a herd due at one instant: the claims are spread over the seconds before it
(at most ``claim_concurrency`` LWTs in flight), so at the instant only the sends are left; the
bulkhead bounds concurrent sends per caller, not claims; outcomes (FIRED, the retry, the
history line) are written after their send answered, few at a time while other sends are due
(``Sending.finish``). The claim decides a race with a cancel: both are LWTs on the row, so
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

``Delivery`` is composed of plain parts, each its own idea: the ``ClaimGate`` (when to claim),
``Claiming`` (the claim and what guards it, ``claiming``), ``Sending`` (when to send, flow
control, the bulkhead, the fence, the send and its outcome, ``sending``), ``Visibility`` (the
only part that hides, shows, passes on or deletes the message in hand), ``FanOut``
(notification channels) and ``Finishing`` (the outcome). ``Delivery._deliver`` runs them in
order, top to bottom. The origin's breaker slot is held by a ``with`` block from the claim to
the send's answer, so every way out gives it back once.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass, field

from dispatcher.breakers import Breakers
from dispatcher.bulkheads import Bulkheads
from dispatcher.claim_gate import ClaimGate, Waves
from dispatcher.claim_keeping import ClaimKeeper
from dispatcher.claiming import NOT_NOW, Claimed, Claiming, NotNow, new_claim_id, partition
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
from dispatcher.sending import MIN_SEND_TIMEOUT_MS, Sending, callback_allowed
from dispatcher.succession import Succession
from dispatcher.visibility import Visibility
from trigger_service.config.live_callers import Callers
from trigger_service.config.settings import Settings
from trigger_service.core.model import Trigger
from trigger_service.core.ports import Channel, Clock, DeliveryQueue, Metrics
from trigger_service.core.ports.recipient import RecipientStore
from trigger_service.core.ports.values import ReceivedMessage
from trigger_service.core.time.lag import LagTally
from trigger_service.core.trace_context import Tracing
from trigger_service.platform.caller_events import CallerEvents

__all__ = ["Delivery", "DispatchDeps"]


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
    # The callers' events, emitted with the outcomes (``platform.caller_events``; None: none).
    events: CallerEvents | None = None


class Delivery:
    def __init__(self, deps: DispatchDeps, channel: Channel, callers: Callers, *,
                 claim_ids: Callable[[], str] = new_claim_id,
                 notifiers: Notifiers = UNCONFIGURED,
                 recipients: RecipientStore | None = None,
                 endpoints: EndpointWatch | None = None,
                 flow: FlowGate | None = None,
                 succession: Succession | None = None) -> None:
        """``flow``: flow control per destination (None: none, every send at its due
        time). ``succession``: names this process in every claim id (instead of
        ``claim_ids``) and proves claimers dead (None: others' claims are watched for their
        leases)."""
        d = deps.settings.dispatch
        self.endpoints = endpoints  # counts each webhook answer for its endpoint's health
        self.flow = flow
        self._tracing = deps.tracing
        self.name = f"{socket.gethostname()}:{os.getpid()}"  # in the attempt history
        self.visibility = Visibility(deps.settings, deps.queue, deps.clock, deps.metrics)
        # With a succession every claim id names this process: the one its deaths speak of.
        claim_ids = succession.claim_id if succession is not None else claim_ids
        keeper = ClaimKeeper(deps.store, self.visibility, deps.clock, deps.metrics, claim_ids,
                             int(d.callback_timeout_s * 1000), MIN_SEND_TIMEOUT_MS)
        self.finishing = Finishing(deps.settings, deps.store, deps.queue, self.visibility,
                                   RetryPolicies(callers, d), deps.clock, deps.metrics,
                                   self.name, deps.events)
        allowed = functools.partial(callback_allowed, callers)
        self.fan_out = FanOut(deps.settings, deps.store, channel, notifiers, self.finishing,
                              allowed, deps.clock,
                              deps.metrics, SendTimeProfiles(recipients, deps.clock)
                              if recipients is not None else None)
        self._wave = Waves()  # who may wait for company when recording an outcome
        self.weight = caller_weights(callers)  # in fair shares (``fair_share``)
        self.gate = ClaimGate(deps.clock, min_lead_ms=d.claim_lead_ms,
                              max_lead_ms=d.claim_lead_max_ms,
                              concurrency=d.claim_concurrency, weight=self.weight)
        self.bulkheads = Bulkheads(callers, deps.clock, default_size=d.default_max_concurrency,
                                   max_waiting=d.max_inflight)
        self.breakers = Breakers(deps.clock, deps.metrics, fail_max=d.breaker_fail_max,
                                 reset_s=d.breaker_reset_s, max_per_caller=d.breaker_max_origins)
        self.lag = LagTally()  # fire lag not yet published to the ops board
        self.claiming = Claiming(d, deps.store, keeper, self.visibility, self.finishing,
                                 bulkheads=self.bulkheads, breakers=self.breakers,
                                 endpoints=endpoints, clock=deps.clock, metrics=deps.metrics,
                                 tracing=deps.tracing, succession=succession)
        self.sending = Sending(d, deps.store, channel, keeper, self.visibility, self.finishing,
                               self.fan_out, allowed=allowed, bulkheads=self.bulkheads,
                               flow=flow, endpoints=endpoints, lag=self.lag, clock=deps.clock,
                               metrics=deps.metrics, tracing=deps.tracing)

    async def starts_at(self, t: Trigger) -> int:
        """When ``t``'s next send may start: its due time, or the rate slot flow control
        reserved for it (``flow_control``; the same one if asked again)."""
        return await self.flow.reserve(t) if self.flow is not None else t.due_at_ms()

    @property
    def waiting(self) -> int:
        """Messages waiting for a caller's bulkhead, over all callers."""
        return self.bulkheads.waiting

    @property
    def longest_watch_ms(self) -> int:
        """The longest a claim is watched before a takeover (a claim taken as far ahead as
        the claim gate goes)."""
        return self.claiming.longest_watch_ms

    async def watch_ms(self, t: Trigger) -> int:
        """How much longer this dispatcher must watch ``t``'s claim (``t`` as just read,
        IN_FLIGHT) before it may take it over: 0 now (``Claiming.watch_ms``)."""
        return await self.claiming.watch_ms(t)

    async def claim_and_deliver(self, m: ReceivedMessage, t: Trigger,
                                hidden_until_ms: int | None = None,
                                stopping: asyncio.Event | None = None,
                                starts_ms: int | None = None
                                ) -> Trigger | NextAttempt | NotNow | None:
        """Wait for ``t``'s claim time (``claim_gate``), claim it and deliver it. Returns the
        current trigger if the claim lost a race or a cancel won before the send (the caller
        looks again), ``NOT_NOW`` if ``stopping`` was set before the send (a claim taken is
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
            return await self._deliver(m, t, hidden_until_ms, stopping, starts_ms)

    async def _deliver(self, m: ReceivedMessage, t: Trigger, hidden_until_ms: int | None,
                       stopping: asyncio.Event | None, starts_ms: int | None
                       ) -> Trigger | NextAttempt | NotNow | None:
        """The delivery, top to bottom. What is held over which steps:

        - the origin's breaker slot (``held``): from just before the claim's LWT to the
          send's answer, so every way out gives it back once;
        - the claim gate's turn: the claim only;
        - the partition's wave: from the claim to the send's answer (an outcome written
          while mates are still sending may wait for them, ``Finishing``);
        - within ``Sending.send``: flow control's place, then the caller's bulkhead;
        - the outcome's finish slot (``Sending.finish``): after all of the above."""
        starts_ms = t.due_at_ms() if starts_ms is None else starts_ms
        with contextlib.ExitStack() as held:
            # 1. The claim, in its turn at the claim gate (ahead of the send's start).
            async with self.gate.turn(starts_ms, stopping, partition(t), t.caller,
                                      t.priority.rank) as go:
                if not go:
                    return NOT_NOW
                claimed = await self.claiming.claim(m, t, held, starts_ms)
            if not isinstance(claimed, Claimed):
                return claimed
            with self._wave.open(partition(t)) as mates:
                # 2. The wait for the send's start; stopping well before it gives the
                # claim back.
                if not await self.sending.wait_for_start(claimed, stopping):
                    return await self.claiming.give_back(claimed)
                # 3. The send.
                outcome = await self.sending.send(m, claimed, hidden_until_ms)
        if not isinstance(outcome, Attempted):
            return outcome
        # 4. The outcome, once the send answered.
        return await self.sending.finish(m, outcome, patient=mates.waiting)
