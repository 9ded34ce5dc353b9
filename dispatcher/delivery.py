"""One delivery attempt: claim the trigger with an LWT, deliver it through the channel inside
the caller's bulkhead and circuit breaker, and record the outcome.

Why each failure is safe:

- killed after the claim: the message reappears; a claim older than the callback timeout is
  taken over by LWT (``claim_takeovers_total``; the receiver may see that attempt twice);
- killed after a 2xx but before FIRED is written: the message reappears and the trigger is
  delivered again (at-least-once; the receiver dedupes on ``X-Trigger-Id``);
- two dispatchers with the same message or duplicates of it: only one claim LWT applies;
  the other copy is deleted and counted once (``duplicate_messages_total``).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from dispatcher.breaker import CircuitBreaker
from trigger_service.config.callers import CallerRegistry
from trigger_service.config.settings import Settings
from trigger_service.core.errors import AdapterError
from trigger_service.core.model import Status, Trigger
from trigger_service.core.ports import (
    Channel,
    Clock,
    DeliveryQueue,
    DeliveryResult,
    Metrics,
    ReceivedMessage,
    TriggerStates,
)
from trigger_service.core.timing import ceil_div, retry_backoff_s, sqs_delay_s

log = structlog.get_logger("dispatcher")


@dataclass(frozen=True, slots=True)
class DispatchDeps:
    """What the dispatcher's parts share."""

    settings: Settings
    store: TriggerStates
    queue: DeliveryQueue
    clock: Clock
    metrics: Metrics


def new_claim_id() -> str:
    return uuid.uuid4().hex


class Delivery:
    def __init__(self, deps: DispatchDeps, channel: Channel, callers: CallerRegistry, *,
                 claim_ids: Callable[[], str] = new_claim_id) -> None:
        self._s = deps.settings
        self._d = deps.settings.dispatch
        self._store = deps.store
        self._queue = deps.queue
        self._clock = deps.clock
        self._metrics = deps.metrics
        self._channel = channel
        self._callers = callers
        self._new_claim_id = claim_ids
        self._bulkheads: dict[str, asyncio.Semaphore] = {}
        self._breakers: dict[str, CircuitBreaker] = {}

    def bulkhead(self, caller: str) -> asyncio.Semaphore:
        """The caller's concurrency limit (``max_concurrency`` in the callers file)."""
        sem = self._bulkheads.get(caller)
        if sem is None:
            c = self._callers.by_name(caller)
            size = (c.max_concurrency if c and c.max_concurrency
                    else self._d.default_max_concurrency)
            sem = self._bulkheads[caller] = asyncio.Semaphore(size)
        return sem

    def breaker(self, caller: str) -> CircuitBreaker:
        b = self._breakers.get(caller)
        if b is None:
            b = self._breakers[caller] = CircuitBreaker(
                self._clock, fail_max=self._d.breaker_fail_max, reset_s=self._d.breaker_reset_s)
        return b

    async def claim_and_deliver(self, m: ReceivedMessage, t: Trigger) -> Trigger | None:
        """Claim ``t`` and deliver it. Returns the current trigger if the claim lost a race
        (the caller looks again), otherwise None (the message is dealt with)."""
        now_ms = self._clock.now_ms()
        if t.status is Status.IN_FLIGHT:
            stale_at = t.claim_stale_at_ms(int(self._d.callback_timeout_s * 1000))
            if now_ms < stale_at:
                # Someone is delivering it right now; look again once their claim would be stale.
                await self._queue.change_visibility(
                    m.receipt_handle, max(1, (stale_at - now_ms) // 1000 + 1))
                return None
        breaker = self.breaker(t.caller)
        async with self.bulkhead(t.caller):
            wait_ms = breaker.try_acquire()
            if wait_ms:
                # Open circuit: no attempt is spent; the message comes back when it may close.
                self._metrics.inc("circuit_open_deferrals_total")
                # Rounded up: back no earlier than the circuit may let a trial through.
                await self._queue.change_visibility(
                    m.receipt_handle, max(1, ceil_div(wait_ms, 1000)))
                return None
            claimed = t.with_status(Status.IN_FLIGHT, claim_id=self._new_claim_id(),
                                    claimed_at_ms=now_ms, attempts=t.attempts + 1)
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
            # Never early, to the millisecond: the fire time, or the retry time after a failure.
            await self._clock.sleep_until_ms(t.due_at_ms())
            result = await self._channel.deliver(claimed, claimed.attempts)
            (breaker.record_success if result.ok else breaker.record_failure)()
        await self._record_outcome(m, claimed, result)
        return None

    async def _lost_claim(self, m: ReceivedMessage, t: Trigger) -> Trigger | None:
        current = await self._store.get(t.trigger_id)
        if (current is not None and current.status is Status.IN_FLIGHT
                and current.claim_id != t.claim_id):
            # Another dispatcher claimed it just now with its own copy of the message in
            # hand (which reappears if it dies): this copy is redundant.
            self._metrics.inc("duplicate_messages_total")
            log.info("duplicate_message_dropped", trigger_id=t.trigger_id, caller=t.caller,
                     attempt=t.attempts + 1)
            await self._queue.delete(m.receipt_handle)
            return None
        return current

    async def _record_outcome(self, m: ReceivedMessage, t: Trigger, result: DeliveryResult) -> None:
        ctx = {"trigger_id": t.trigger_id, "caller": t.caller, "attempt": t.attempts}
        if result.ok:
            await self._record_fired(m, t, result, ctx)
            return
        self._metrics.inc("deliveries_total", outcome="failed_attempt")
        error = result.error
        if t.attempts >= self._d.max_attempts:
            new = t.with_status(Status.FAILED, claim_id=None, last_error=error,
                                next_attempt_at_ms=None)
            if await self._store.compare_and_set(t, new, ttl_s=self._s.retention_s):
                await self._queue.send_dead_letter(t.trigger_id, t.fire_at_ms, error or "failed")
                self._metrics.inc("dead_lettered_total")
                log.error("delivery_failed_permanently", **ctx, error=error)
            await self._delete_quietly(m)
            return
        delay_s = retry_backoff_s(t.attempts, self._d.retry_backoff_s)
        now_ms = self._clock.now_ms()
        new = t.with_status(Status.PENDING, claim_id=None, last_error=error,
                            next_attempt_at_ms=now_ms + delay_s * 1000)
        if await self._store.compare_and_set(t, new):
            log.warning("delivery_failed_will_retry", **ctx, error=error, retry_in_s=delay_s)
            await self._queue.change_visibility(m.receipt_handle, sqs_delay_s(
                new.due_at_ms(), now_ms, self._s.sqs.enqueue_lead_s))
        else:
            log.warning("retry_not_recorded_claim_lost", **ctx, error=error)

    async def _record_fired(self, m: ReceivedMessage, t: Trigger, result: DeliveryResult,
                            ctx: dict[str, object]) -> None:
        now_ms = self._clock.now_ms()
        new = t.with_status(Status.FIRED, fired_at_ms=now_ms, claim_id=None,
                            next_attempt_at_ms=None, last_error=None)
        applied = await self._store.compare_and_set(t, new, ttl_s=self._s.retention_s)
        self._metrics.inc("deliveries_total", outcome="fired")
        if not applied:
            # Our claim was taken over while we delivered: the other one delivers too.
            self._metrics.inc("duplicate_deliveries_total")
        log.info("delivered", **ctx, status_code=result.status_code,
                 lag_ms=now_ms - t.fire_at_ms, recorded=applied)
        await self._delete_quietly(m)

    async def _delete_quietly(self, m: ReceivedMessage) -> None:
        # A failed delete only means the message comes back: the trigger is finished and
        # the next copy is dropped as a duplicate.
        with contextlib.suppress(AdapterError):
            await self._queue.delete(m.receipt_handle)
