"""One delivery attempt: claim the trigger with an LWT, deliver it through the channel inside
the caller's bulkhead and its callback origin's circuit breaker, and record the outcome.

Why each failure is safe:

- killed after the claim: the message reappears; a claim older than the callback timeout is
  taken over by LWT (``claim_takeovers_total``; the receiver may see that attempt twice);
- killed after a 2xx but before FIRED is written: the message reappears and the trigger is
  delivered again (at-least-once; the receiver dedupes on ``X-Trigger-Id``);
- two dispatchers with the same message or duplicates of it: only one claim LWT applies;
  the loser hides its copy until the winner's claim would be stale (it may be the winner's
  only copy: deleting it would leave a dead winner's trigger to the reconciler); it is
  dropped, and counted once (``duplicate_messages_total``), when it comes back to a
  finished trigger.

Deferrals (an open circuit, a caller at its limit, someone else's live claim) spend no
attempt, and no redrive budget either: a message received ``REFRESH_AFTER_RECEIVES`` times is
replaced by a fresh copy, so only a message whose handling keeps crashing reaches SQS's DLQ.
"""

from __future__ import annotations

import asyncio
import os
import socket
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from dispatcher.breaker import CircuitBreaker, callback_origin
from dispatcher.fanout import UNCONFIGURED, FanOut, Notifiers
from dispatcher.finishing import DispatchStore
from trigger_service.config.callers import CallerRegistry, parse_callback_url
from trigger_service.config.settings import Settings
from trigger_service.core.dead_letters import (
    Attempt,
    DeadLetterReason,
    truncate,
    with_reason,
)
from trigger_service.core.errors import AdapterError
from trigger_service.core.lag import LagTally
from trigger_service.core.model import Status, Trigger
from trigger_service.core.ports import (
    Channel,
    Clock,
    DeliveryQueue,
    DeliveryResult,
    Metrics,
    OutgoingMessage,
    ReceivedMessage,
)
from trigger_service.core.timing import SQS_MAX_DELAY_S, ceil_div, sqs_delay_s

log = structlog.get_logger("dispatcher")

REFRESH_AFTER_RECEIVES = 10
_OUTCOME_MARGIN_MS = 5_000


@dataclass(frozen=True, slots=True)
class DispatchDeps:
    """What the dispatcher's parts share."""

    settings: Settings
    store: DispatchStore
    queue: DeliveryQueue
    clock: Clock
    metrics: Metrics


def new_claim_id() -> str:
    return uuid.uuid4().hex


@dataclass(frozen=True, slots=True)
class _Attempted:
    trigger: Trigger  # as claimed
    result: DeliveryResult
    started_at_ms: int
    duration_ms: int
    refused: bool = False  # not sent: the URL or its address is not allowed (any more)


class Delivery(FanOut):
    def __init__(self, deps: DispatchDeps, channel: Channel, callers: CallerRegistry, *,
                 claim_ids: Callable[[], str] = new_claim_id,
                 notifiers: Notifiers = UNCONFIGURED) -> None:
        self._s = deps.settings
        self._d = deps.settings.dispatch
        self._store = deps.store
        self._queue = deps.queue
        self._clock = deps.clock
        self._metrics = deps.metrics
        self._channel = channel
        self._notifiers = notifiers  # email, SMS, push, inbox (fanout.py)
        self._callers = callers
        self._new_claim_id = claim_ids
        self._bulkheads: dict[str, asyncio.Semaphore] = {}
        self._breakers: dict[str, CircuitBreaker] = {}  # by callback origin
        self.lag = LagTally()  # fire lag not yet published to the ops board
        # Messages per caller waiting for its bulkhead. They do not count against the
        # dispatcher's in-flight limit (a slow caller must not stop every receive); past
        # max_inflight waiting for one caller they are deferred instead.
        self._waiting: dict[str, int] = {}
        self._max_waiting = max(1, self._d.max_inflight)
        self.name = f"{socket.gethostname()}:{os.getpid()}"  # in the attempt history

    def bulkhead(self, caller: str) -> asyncio.Semaphore:
        """The caller's concurrency limit (``max_concurrency`` in the callers file)."""
        sem = self._bulkheads.get(caller)
        if sem is None:
            c = self._callers.by_name(caller)
            size = (c.max_concurrency if c and c.max_concurrency
                    else self._d.default_max_concurrency)
            sem = self._bulkheads[caller] = asyncio.Semaphore(size)
        return sem

    def breaker(self, origin: str) -> CircuitBreaker:
        """The circuit of a callback origin (``breaker.callback_origin``)."""
        b = self._breakers.get(origin)
        if b is None:
            b = self._breakers[origin] = CircuitBreaker(
                self._clock, fail_max=self._d.breaker_fail_max, reset_s=self._d.breaker_reset_s)
        return b

    @property
    def breakers(self) -> dict[str, CircuitBreaker]:
        """origin → its circuit (``dispatcher.ops_report`` publishes and prunes them)."""
        return self._breakers

    async def defer(self, m: ReceivedMessage, delay_s: int) -> None:
        """Show ``m`` again in ``delay_s`` without spending the redrive budget."""
        if m.receive_count < REFRESH_AFTER_RECEIVES or delay_s > SQS_MAX_DELAY_S:
            await self._queue.change_visibility(m.receipt_handle, delay_s)
            return
        self._metrics.inc("message_refreshes_total")
        await self._queue.replace(
            m.receipt_handle, OutgoingMessage(m.trigger_id, m.fire_at_ms, delay_s))

    async def _defer_until(self, m: ReceivedMessage, at_ms: int) -> None:
        # Rounded up: the message comes back no earlier than asked.
        await self.defer(m, max(1, ceil_div(at_ms - self._clock.now_ms(), 1000)))

    async def claim_and_deliver(self, m: ReceivedMessage, t: Trigger,
                                hidden_until_ms: int | None = None) -> Trigger | None:
        """Claim ``t`` and deliver it. Returns the current trigger if the claim lost a race
        (the caller looks again), otherwise None (the message is dealt with).
        ``hidden_until_ms``: until when ``m`` is known to stay hidden; extended if the
        delivery could outlast it."""
        if t.status is Status.IN_FLIGHT and self._clock.now_ms() < self._stale_at(t):
            # Someone is delivering it right now; look again once their claim would be stale.
            await self._defer_until(m, self._stale_at(t) + 1)
            return None
        if self._waiting.get(t.caller, 0) >= self._max_waiting:
            self._metrics.inc("bulkhead_deferrals_total")
            await self.defer(m, 1)
            return None
        self._waiting[t.caller] = self._waiting.get(t.caller, 0) + 1
        try:
            await self.bulkhead(t.caller).acquire()
        finally:
            self._waiting[t.caller] -= 1
        try:
            outcome = await self._claim_in_bulkhead(m, t, hidden_until_ms)
        finally:
            self.bulkhead(t.caller).release()
        if isinstance(outcome, _Attempted):
            # The history and the outcome are independent writes: side by side.
            history = asyncio.ensure_future(self._record_attempt(outcome))
            try:
                await self._record_outcome(m, outcome)
            finally:
                await history
            return None
        return outcome

    async def _record_attempt(self, a: _Attempted) -> None:
        t, r = a.trigger, a.result
        try:
            await self._store.record_attempt(Attempt(
                t.trigger_id, t.occurrence_id, t.attempts, a.started_at_ms, a.duration_ms,
                r.status_code, truncate(r.error), r.response_excerpt, self.name),
                ttl_s=self._s.retention_s)
        except AdapterError as e:
            # The delivery itself is recorded by the outcome; only its history line is lost.
            self._metrics.inc("attempt_record_failures_total")
            log.warning("attempt_not_recorded", trigger_id=t.trigger_id, error=str(e))

    @property
    def waiting(self) -> int:
        """Messages waiting for a caller's bulkhead, over all callers."""
        return sum(self._waiting.values())

    def _stale_at(self, t: Trigger) -> int:
        return t.claim_stale_at_ms(int(self._d.callback_timeout_s * 1000))

    async def _claim_in_bulkhead(self, m: ReceivedMessage, t: Trigger,
                                 hidden_until_ms: int | None) -> _Attempted | Trigger | None:
        """Inside the caller's bulkhead: the breaker, the claim, the delivery."""
        breaker = self.breaker(callback_origin(t.callback_url))
        wait_ms = breaker.try_acquire()
        if wait_ms:
            # Open circuit: no attempt is spent; the message comes back when it may close.
            self._metrics.inc("circuit_open_deferrals_total")
            await self._defer_until(m, self._clock.now_ms() + wait_ms)
            return None
        # The claim's time is when the POST starts: now, or the due time if that is later
        # (a claim is taken up to the claim lead early). Never the time before a wait.
        starts_ms = max(self._clock.now_ms(), t.due_at_ms())
        claimed = t.with_status(Status.IN_FLIGHT, claim_id=self._new_claim_id(),
                                claimed_at_ms=starts_ms, attempts=t.attempts + 1)
        try:
            applied = await self._store.compare_and_set(t, claimed)
        except BaseException:
            breaker.release()  # nothing was sent
            raise
        if not applied:
            breaker.release()
            return await self._lost_claim(m, t)
        if t.status is Status.IN_FLIGHT:
            self._metrics.inc("claim_takeovers_total")
            log.warning("claim_taken_over", trigger_id=t.trigger_id, caller=t.caller,
                        attempt=claimed.attempts, stale_claim=t.claim_id)
        if hidden_until_ms is not None:  # after a long bulkhead wait
            await self.keep_hidden(m, hidden_until_ms, starts_ms)
        # Never early, to the millisecond: the fire time, or the retry time after a failure.
        with breaker.attempt():  # cancelled or crashed: the half-open trial is given back
            await self._clock.sleep_until_ms(t.due_at_ms())
            self._observe_start(claimed)
            if claimed.plan is not None:  # notification channels: each with its own state
                breaker.release()
                await self.fan_out(m, claimed)
                return None
            started_ms = self._clock.now_ms()
            if not self._callback_allowed(claimed):
                breaker.release()  # nothing is sent
                return _Attempted(claimed, DeliveryResult(
                    False, None, "callback URL not allowed for this caller any more"),
                    started_ms, 0, refused=True)
            result = await self._channel.deliver(claimed, claimed.attempts)
        # Only answers that show the origin in trouble open its breaker: a 4xx (410 too)
        # means it is up and answering. A refused address says nothing about it.
        if result.refused:
            breaker.release()
        else:
            (breaker.record_failure if result.origin_failed else breaker.record_success)()
        return _Attempted(claimed, result, started_ms, self._clock.now_ms() - started_ms,
                          refused=result.refused)

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

    async def keep_hidden(self, m: ReceivedMessage, hidden_until_ms: int,
                          starts_ms: int) -> int:
        """Extend ``m``'s visibility if a delivery starting at ``starts_ms`` could outlast it
        (it would reappear while we still work on it); returns the new hidden-until.

        Done by: the start, plus a whole callback timeout, plus a margin to write the
        outcome. Usually far inside the visibility (held ~3 s of 30): no SQS call at all."""
        busy_until_ms = (starts_ms + int(self._d.callback_timeout_s * 1000)
                         + min(_OUTCOME_MARGIN_MS, self._d.visibility_slack_s * 1000))
        if busy_until_ms <= hidden_until_ms:
            return hidden_until_ms
        now_ms = self._clock.now_ms()
        visibility_s = ceil_div(busy_until_ms - now_ms, 1000)
        await self._queue.change_visibility(m.receipt_handle, visibility_s)
        return now_ms + visibility_s * 1000

    async def _lost_claim(self, m: ReceivedMessage, t: Trigger) -> Trigger | None:
        current = await self._store.get(t.trigger_id)
        if (current is not None and current.status is Status.IN_FLIGHT
                and current.claim_id != t.claim_id):
            # Another dispatcher claimed it just now. This copy may be the winner's only one
            # (the same SQS message received twice): keep it hidden until the winner's claim
            # would be stale; if the winner finished by then it is dropped as a duplicate.
            log.info("claim_lost_copy_hidden", trigger_id=t.trigger_id, caller=t.caller,
                     attempt=t.attempts + 1)
            await self._defer_until(m, self._stale_at(current) + 1)
            return None
        return current

    async def _record_outcome(self, m: ReceivedMessage, a: _Attempted) -> None:
        t, result = a.trigger, a.result
        ctx = {"trigger_id": t.trigger_id, "caller": t.caller, "attempt": t.attempts}
        if result.ok:
            await self._record_fired(m, t, result, ctx)
            return
        self._metrics.inc("deliveries_total", outcome="failed_attempt", caller=t.caller)
        error = result.error
        policy = self._policy(t.caller)
        now_ms = self._clock.now_ms()
        reason = (DeadLetterReason.CALLBACK_NOT_ALLOWED if a.refused
                  else DeadLetterReason.GONE if result.gone
                  else DeadLetterReason.MAX_AGE if policy.too_old(t.fire_at_ms, now_ms)
                  else DeadLetterReason.MAX_ATTEMPTS if t.attempts >= policy.max_attempts
                  else None)
        if reason is not None:
            await self._give_up(m, t, with_reason(reason, error), ctx, reason)
            return
        delay_s = policy.delay_s(t.attempts, result.retry_after_s)
        new = t.with_status(Status.PENDING, claim_id=None, last_error=error,
                            next_attempt_at_ms=now_ms + delay_s * 1000)
        if await self._store.compare_and_set(t, new):
            log.warning("delivery_failed_will_retry", **ctx, error=error, retry_in_s=delay_s)
            await self._queue.change_visibility(m.receipt_handle, sqs_delay_s(
                new.due_at_ms(), now_ms, self._s.sqs.enqueue_lead_s))
        else:
            log.warning("retry_not_recorded_claim_lost", **ctx, error=error)
