"""The claim: the LWT that moves an occurrence PENDING → IN_FLIGHT ahead of its send, and
what guards it. ``Claiming`` is one of the parts ``Delivery`` holds; the claim gate decides
when it runs (``claim_gate``), the claim's lease and takeovers are ``claim_keeping``'s.

Before the LWT, in this order, the message is deferred (no attempt spent) or dealt with
instead: someone else's claim not yet watched for its lease (``claim_keeping.Sightings``),
an occurrence past its deadline (dead-lettered, never sent), an endpoint disabled since the
message was received (looked at again), the caller's bulkhead full, the origin's circuit
open. The circuit's slot is taken last, just before the LWT, and held by the delivery from
there to the send's answer.

The claim decides a race with a cancel: both are LWTs on the row, so Paxos lets exactly one
apply. A claim that lost to another dispatcher's hides its copy until the winner's claim
would be stale (it may be the winner's only copy). A claim taken ahead is given back
(``give_back``) when the dispatcher stops well before the send.
"""

from __future__ import annotations

import contextlib
import enum
import random
from dataclasses import dataclass, replace

import structlog

from dispatcher.breaker import TrialSlot
from dispatcher.breakers import Breakers
from dispatcher.bulkheads import Bulkheads
from dispatcher.claim_keeping import (
    LEASE_SLACK_MS,
    TAKEOVER_MARGIN_MS,
    Claim,
    ClaimKeeper,
    Sightings,
)
from dispatcher.endpoint_health import EndpointWatch
from dispatcher.finishing import DispatchStore, Finishing
from dispatcher.succession import Succession
from dispatcher.visibility import Visibility
from trigger_service.config.settings import DispatchSettings
from trigger_service.core.deadlines import expired
from trigger_service.core.model import Status, Trigger, row_partition
from trigger_service.core.ports import Clock, Metrics
from trigger_service.core.ports.values import ReceivedMessage
from trigger_service.core.trace_context import Tracing
from trigger_service.core.urls import callback_origin

log = structlog.get_logger("dispatcher")


class NotNow(enum.Enum):
    """``claim_and_deliver``'s answer when no delivery is attempted now: the dispatcher
    started stopping before the send (while at the claim gate, or with a claim taken ahead,
    which is given back first). The message is put back; no attempt is spent."""

    NOT_NOW = "not_now"


NOT_NOW = NotNow.NOT_NOW


def new_claim_id() -> str:
    # From the random module, not the OS's entropy (a system call per claim): unique is all
    # a claim id must be (the module reseeds in a forked child).
    return f"{random.getrandbits(128):032x}"


def partition(t: Trigger) -> tuple[int, int] | None:
    """The store partition of ``t``'s row, if known: claims of one share a Paxos round
    (``ClaimGate``)."""
    return None if t.home_at_ms is None else row_partition(t.home_at_ms, t.shard)


@dataclass(frozen=True, slots=True)
class Claimed:
    """A claim that applied, as the send takes it on."""

    before: Trigger  # the row the claim replaced (given back if the dispatcher stops)
    claim: Claim  # as claimed, with its lease's end
    slot: TrialSlot  # the origin's breaker let this claim through
    starts_ms: int  # when the send starts: the due time, or its flow-control slot after it

    @property
    def trigger(self) -> Trigger:
        return self.claim.trigger


class Claiming:
    def __init__(self, d: DispatchSettings, store: DispatchStore, keeper: ClaimKeeper,
                 visibility: Visibility, finishing: Finishing, *, bulkheads: Bulkheads,
                 breakers: Breakers, endpoints: EndpointWatch | None, clock: Clock,
                 metrics: Metrics, tracing: Tracing,
                 succession: Succession | None = None) -> None:
        """``endpoints``: endpoint health (None: no endpoint is ever disabled here).
        ``succession``: proves claimers dead (``dispatcher.succession``; None: every claim
        of another is watched for its lease)."""
        self._d = d
        self._store = store
        self._keeper = keeper
        self._visibility = visibility
        self._finishing = finishing
        self._bulkheads = bulkheads
        self._breakers = breakers
        self._endpoints = endpoints
        self._clock = clock
        self._metrics = metrics
        self._tracing = tracing
        self._sightings = Sightings(clock)  # others' claims, watched before a takeover
        self._succession = succession
        # The lease of a claim written before leases were: the longest such a claim was
        # (taken the maximum lead ahead, then a whole callback timeout and the slack).
        self._legacy_lease_ms = (d.claim_lead_max_ms + int(d.callback_timeout_s * 1000)
                                 + LEASE_SLACK_MS)

    async def claim(self, m: ReceivedMessage, t: Trigger, held: contextlib.ExitStack,
                    starts_ms: int) -> Claimed | Trigger | None:
        """The claim LWT (inside a claim slot), unless someone else's claim not yet watched
        for its lease (``claim_keeping.Sightings``) nor proved dead (``succession``), the
        caller's backlog or an open circuit defers the message, or the occurrence is past
        its deadline and dead-lettered (``Finishing.expire``) (None). The breaker's slot
        goes into ``held``."""
        if t.status is Status.IN_FLIGHT:
            wait_ms = await self.watch_ms(t)
            if wait_ms:
                # Someone may be delivering it right now: look again once this dispatcher
                # has watched their claim for its lease (a dead claimer's trigger is late by
                # about a lease from when its message came back, whatever the clocks say).
                await self._visibility.defer_until(m, self._clock.now_ms() + wait_ms)
                return None
        else:
            self._sightings.forget(t.trigger_id)
        # The send's earliest start: its due time, or its flow-control slot (a slot past
        # the deadline expires it now rather than at the slot).
        start_ms = max(self._clock.now_ms(), starts_ms)
        if expired(t, start_ms):  # past its deadline: dead-lettered, never sent
            await self._finishing.expire(m, t, start_ms, t.last_error)  # (a retry's: why)
            return None
        if self._endpoints is not None and await self._endpoints.disabled_for(t):
            return t  # disabled since the message was received: look again (it is held)
        if self._bulkheads.full(t.caller, t.priority):
            self._metrics.inc("bulkhead_deferrals_total")
            await self._visibility.defer_until(
                m, self._bulkheads.come_back_ms(t.caller, m.receive_count))
            return None
        breaker = self._breakers.get(t.caller, callback_origin(t.callback_url))
        # No circuit to be had (every one of the caller's is in trouble): as if open.
        wait_ms = (breaker.try_acquire() if breaker is not None
                   else max(1, int(self._d.breaker_reset_s * 1000)))
        if wait_ms or breaker is None:
            # Open circuit: no attempt is spent; the message comes back when it may close.
            self._metrics.inc("circuit_open_deferrals_total")
            await self._visibility.defer_until(m, self._clock.now_ms() + wait_ms)
            return None
        slot = held.enter_context(breaker.slot())
        return await self._take(m, t, slot, starts_ms)

    async def _take(self, m: ReceivedMessage, t: Trigger, slot: TrialSlot,
                    starts_ms: int) -> Claimed | Trigger | None:
        """The claim's LWT itself, its guards passed and the breaker's ``slot`` held."""
        # The claim's time is when the POST starts: now, or the start (the due time, or the
        # flow-control slot) if that is later (a claim is taken ahead, by the gate's lead).
        # Never the time before a wait.
        claimed = replace(t, status=Status.IN_FLIGHT, claim_id=self._keeper.new_claim_id(),
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
            proved = self._succession is not None and self._succession.known_dead(t.claim_id)
            if proved:
                self._metrics.inc("claim_takeovers_proved_dead_total")
            log.warning("claim_taken_over", trigger_id=t.trigger_id, caller=t.caller,
                        attempt=claimed.attempts, stale_claim=t.claim_id, claimer_dead=proved)
        if self._clock.now_ms() > starts_ms:
            # Claimed too late to send on time: the backlog outgrew the claim lead.
            self._metrics.inc("claims_late_total")
        return Claimed(t, claim, slot, starts_ms)

    async def give_back(self, c: Claimed) -> NotNow | Trigger | None:
        """Stopping with a claim taken ahead: the row goes back as it was, so whoever gets
        the message sends on time (the claim would outlive the drain). ``NOT_NOW`` if it
        went back, else the row as it is now (the claim was lost meanwhile)."""
        if await self._store.compare_and_set(c.trigger, c.before):
            self._metrics.inc("claims_given_back_total")
            return NOT_NOW
        return await self._store.get(c.trigger.trigger_id)

    @property
    def longest_watch_ms(self) -> int:
        """The longest a claim is watched before a takeover (a claim taken as far ahead as
        the claim gate goes)."""
        return self._legacy_lease_ms + TAKEOVER_MARGIN_MS

    async def watch_ms(self, t: Trigger) -> int:
        """How much longer this dispatcher must watch ``t``'s claim (``t`` as just read,
        IN_FLIGHT) before it may take it over: 0 now (``claim_keeping.Sightings``), or at
        once when its claimer was proved dead (``succession``)."""
        wait_ms = self._sightings.wait_ms(t, self._lease_of(t))
        return 0 if wait_ms and await self._proven_dead(t) else wait_ms

    async def _proven_dead(self, t: Trigger) -> bool:
        return self._succession is not None and await self._succession.proven_dead(t.claim_id)

    def _lease_of(self, t: Trigger) -> int:
        return t.claim_lease_ms if t.claim_lease_ms is not None else self._legacy_lease_ms

    def _stale_at(self, t: Trigger) -> int:
        return t.claim_stale_at_ms(int(self._d.callback_timeout_s * 1000))

    async def _lost_claim(self, m: ReceivedMessage, t: Trigger) -> Trigger | None:
        current = await self._store.get(t.trigger_id)
        if (current is not None and current.status is Status.IN_FLIGHT
                and current.claim_id != t.claim_id):
            # Another dispatcher claimed it just now. This copy may be the winner's only one
            # (the same SQS message received twice): keep it hidden until the winner's claim
            # would be stale; if the winner finished by then it is dropped as a duplicate.
            log.info("claim_lost_copy_hidden", trigger_id=t.trigger_id, caller=t.caller,
                     attempt=t.attempts + 1)
            await self._visibility.defer_until(m, self._stale_at(current) + 1)
            return None
        return current
