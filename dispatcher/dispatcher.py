"""The dispatcher: receive trigger ids from SQS, hold each until its fire time, claim it
with an LWT, deliver it, and record the outcome.

Why each failure is safe:

- killed before the claim: the message reappears after its visibility timeout;
- killed after the claim: the message reappears; a claim older than the callback timeout is
  taken over by LWT (``claim_takeovers_total``; the receiver may see that attempt twice);
- killed after a 2xx but before FIRED is written: the message reappears and the trigger is
  delivered again (at-least-once; the receiver dedupes on ``X-Trigger-Id``);
- two dispatchers with the same message or duplicates of it: only one claim LWT applies;
  every other copy is deleted and counted once (``duplicate_messages_total``), either on
  losing the claim or, arriving later, on finding the trigger FIRED.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Callable

import structlog

from dispatcher.breaker import CircuitBreaker
from trigger_service.batcher import Batcher
from trigger_service.callers import CallerRegistry
from trigger_service.clock import Clock
from trigger_service.errors import AdapterError
from trigger_service.metrics import Metrics
from trigger_service.model import Status, Trigger
from trigger_service.ports import Channel, DelayQueue, ReceivedMessage, TriggerStore
from trigger_service.settings import Settings

log = structlog.get_logger("dispatcher")

# A message due later than this is hidden again on SQS rather than held in memory.
_HOLD_MAX_MS = 20_000
_HOLD_MARGIN_MS = 5_000
_CAS_ROUNDS = 4


class Dispatcher:
    def __init__(
        self,
        settings: Settings,
        store: TriggerStore,
        queue: DelayQueue,
        channel: Channel,
        callers: CallerRegistry,
        clock: Clock,
        metrics: Metrics,
        *,
        new_claim_id: Callable[[], str] = lambda: uuid.uuid4().hex,
    ) -> None:
        self._s = settings
        self._d = settings.dispatch
        self._store = store
        self._queue = queue
        self._channel = channel
        self._callers = callers
        self._clock = clock
        self._metrics = metrics
        self._new_claim_id = new_claim_id
        self._bulkheads: dict[str, asyncio.Semaphore] = {}
        self._breakers: dict[str, CircuitBreaker] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._stopping = asyncio.Event()
        self._deleter: Batcher[str] = Batcher(queue.delete_many, max_batch=10)

    # --- loops ----------------------------------------------------------------------
    async def run(self, stop: asyncio.Event) -> None:
        """Receive with ``receivers`` concurrent long-polls until ``stop``; then drain."""
        receivers = [asyncio.create_task(self._receive_loop(stop))
                     for _ in range(self._d.receivers)]
        try:
            await stop.wait()
        finally:
            self._stopping.set()
            for r in receivers:
                r.cancel()
            await asyncio.gather(*receivers, return_exceptions=True)
            await self.drain()
            await self._deleter.drain()

    async def _receive_loop(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self.run_once()
            except AdapterError as e:
                log.warning("receive_failed", error=str(e))
                await asyncio.sleep(1)

    async def run_once(self) -> int:
        """One receive: start handling every message received; return how many."""
        free = self._d.max_inflight - len(self._tasks)
        if free <= 0:
            await asyncio.sleep(0.05)
            return 0
        messages = await self._queue.receive(
            max_messages=min(10, free), wait_s=self._d.wait_time_s,
            visibility_s=self._d.visibility_timeout_s)
        for m in messages:
            task = asyncio.create_task(self._handle_safely(m))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return len(messages)

    async def drain(self, timeout_s: float | None = None) -> None:
        """Wait until every message being handled is done (held ones are let go)."""
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=timeout_s)

    @property
    def inflight(self) -> int:
        return len(self._tasks)

    # --- one message ------------------------------------------------------------------
    async def _handle_safely(self, m: ReceivedMessage) -> None:
        try:
            await self.handle(m)
        except asyncio.CancelledError:
            raise
        except AdapterError as e:
            # Nothing to undo: the message reappears after its visibility timeout.
            log.warning("handle_failed", trigger_id=m.trigger_id, error=str(e))
        except Exception:
            log.exception("handle_crashed", trigger_id=m.trigger_id)

    async def handle(self, m: ReceivedMessage) -> None:
        """Process one received message to the end (delivered, rescheduled or dropped)."""
        if not m.trigger_id:
            await self._queue.send_dead_letter("", 0, "malformed message body")
            await self._queue.delete_many([m.receipt_handle])
            return
        received_ms = self._clock.now_ms()
        t = await self._store.get(m.trigger_id)
        for _ in range(_CAS_ROUNDS):
            if t is None or t.status.terminal:
                await self._drop(m, t)
                return
            due_ms = t.due_at_ms()
            if self._stopping.is_set() or due_ms - self._clock.now_ms() > _HOLD_MAX_MS:
                await self._put_back(m, due_ms)
                return
            await self._keep_hidden_while_held(m, received_ms, due_ms)
            await self._clock.sleep_until_ms(due_ms - self._d.claim_lead_ms)
            if self._stopping.is_set():
                await self._put_back(m, due_ms)
                return
            outcome = await self._claim_and_deliver(m, t)
            if outcome is None:
                return
            t = outcome  # the claim lost a race: look again at the trigger's current state
        log.warning("claim_gave_up", trigger_id=m.trigger_id)

    async def _drop(self, m: ReceivedMessage, t: Trigger | None) -> None:
        if t is None:
            log.warning("message_for_unknown_trigger", trigger_id=m.trigger_id)
        elif t.status is Status.FIRED:
            self._metrics.inc("duplicate_messages_total")
        log.info("message_dropped", trigger_id=m.trigger_id,
                 status=t.status.value if t else None)
        await self._deleter.submit(m.receipt_handle)

    async def _keep_hidden_while_held(
        self, m: ReceivedMessage, received_ms: int, due_ms: int
    ) -> None:
        """Extend the message's visibility if holding it and then delivering it could outlast
        the visibility it was received with (it would reappear while we still work on it)."""
        d = self._d
        # Done by: the due time, plus a whole callback timeout, plus a margin to write the
        # outcome. Usually far inside the visibility (held ~3 s of 30): no SQS call at all.
        margin_ms = min(_HOLD_MARGIN_MS, d.visibility_slack_s * 1000)
        busy_until_ms = due_ms + int(d.callback_timeout_s * 1000) + margin_ms
        if busy_until_ms > received_ms + d.visibility_timeout_s * 1000:
            now_ms = self._clock.now_ms()
            await self._queue.change_visibility(
                m.receipt_handle, -(-(busy_until_ms - now_ms) // 1000))

    async def _put_back(self, m: ReceivedMessage, due_ms: int) -> None:
        """Hide the message until just before it is due (or hand it back now if stopping)."""
        if self._stopping.is_set():
            await self._queue.change_visibility(m.receipt_handle, 0)
            return
        lead_s = self._s.sqs.enqueue_lead_s
        wait_s = max(0, (due_ms - self._clock.now_ms()) // 1000 - lead_s)
        await self._queue.change_visibility(m.receipt_handle, wait_s)

    def _bulkhead(self, caller: str) -> asyncio.Semaphore:
        sem = self._bulkheads.get(caller)
        if sem is None:
            c = self._callers.by_name(caller)
            size = (c.max_concurrency if c and c.max_concurrency
                    else self._d.default_max_concurrency)
            sem = self._bulkheads[caller] = asyncio.Semaphore(size)
        return sem

    def _breaker(self, caller: str) -> CircuitBreaker:
        b = self._breakers.get(caller)
        if b is None:
            b = self._breakers[caller] = CircuitBreaker(
                self._clock, fail_max=self._d.breaker_fail_max, reset_s=self._d.breaker_reset_s)
        return b

    async def _claim_and_deliver(self, m: ReceivedMessage, t: Trigger) -> Trigger | None:
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
        breaker = self._breaker(t.caller)
        async with self._bulkhead(t.caller):
            wait_ms = breaker.try_acquire()
            if wait_ms:
                # Open circuit: no attempt is spent; the message comes back when it may close.
                self._metrics.inc("circuit_open_deferrals_total")
                await self._queue.change_visibility(m.receipt_handle, max(1, wait_ms // 1000))
                return None
            attempt = t.attempts + 1
            claimed = t.with_status(
                Status.IN_FLIGHT, claim_id=self._new_claim_id(), claimed_at_ms=now_ms,
                attempts=attempt)
            try:
                applied = await self._store.compare_and_set(t, claimed)
            except BaseException:
                breaker.release()  # nothing was sent
                raise
            if not applied:
                breaker.release()
                current = await self._store.get(t.trigger_id)
                if (current is not None and current.status is Status.IN_FLIGHT
                        and current.claim_id != t.claim_id):
                    # Another dispatcher claimed it just now with its own copy of the
                    # message in hand (which reappears if it dies): this copy is redundant.
                    self._metrics.inc("duplicate_messages_total")
                    log.info("duplicate_message_dropped", trigger_id=t.trigger_id,
                             caller=t.caller, attempt=attempt)
                    await self._deleter.submit(m.receipt_handle)
                    return None
                return current
            if t.status is Status.IN_FLIGHT:
                self._metrics.inc("claim_takeovers_total")
                log.warning("claim_taken_over", trigger_id=t.trigger_id, caller=t.caller,
                            attempt=attempt, stale_claim=t.claim_id)
            # Never early, to the millisecond: the fire time, or the retry time after a failure.
            await self._clock.sleep_until_ms(t.due_at_ms())
            result = await self._channel.deliver(claimed, attempt)
            (breaker.record_success if result.ok else breaker.record_failure)()
        await self._record_outcome(m, claimed, result.ok, result.error, result.status_code)
        return None

    async def _record_outcome(
        self, m: ReceivedMessage, t: Trigger, ok: bool, error: str | None, code: int | None
    ) -> None:
        now_ms = self._clock.now_ms()
        ctx = {"trigger_id": t.trigger_id, "caller": t.caller, "attempt": t.attempts}
        if ok:
            new = t.with_status(Status.FIRED, fired_at_ms=now_ms, claim_id=None,
                                next_attempt_at_ms=None, last_error=None)
            applied = await self._store.compare_and_set(t, new, ttl_s=self._s.retention_s)
            self._metrics.inc("deliveries_total", outcome="fired")
            if not applied:
                # Our claim was taken over while we delivered: the other one delivers too.
                self._metrics.inc("duplicate_deliveries_total")
            log.info("delivered", **ctx, status_code=code,
                     lag_ms=now_ms - t.fire_at_ms, recorded=applied)
            await self._delete_quietly(m)
            return
        self._metrics.inc("deliveries_total", outcome="failed_attempt")
        if t.attempts >= self._d.max_attempts:
            new = t.with_status(Status.FAILED, claim_id=None, last_error=error,
                                next_attempt_at_ms=None)
            if await self._store.compare_and_set(t, new, ttl_s=self._s.retention_s):
                await self._queue.send_dead_letter(t.trigger_id, t.fire_at_ms, error or "failed")
                self._metrics.inc("dead_lettered_total")
                log.error("delivery_failed_permanently", **ctx, error=error)
            await self._delete_quietly(m)
            return
        backoff = self._d.retry_backoff_s
        delay_s = backoff[min(t.attempts - 1, len(backoff) - 1)]
        new = t.with_status(Status.PENDING, claim_id=None, last_error=error,
                            next_attempt_at_ms=now_ms + delay_s * 1000)
        if await self._store.compare_and_set(t, new):
            log.warning("delivery_failed_will_retry", **ctx, error=error, retry_in_s=delay_s)
            await self._queue.change_visibility(
                m.receipt_handle, max(0, delay_s - self._s.sqs.enqueue_lead_s))
        else:
            log.warning("retry_not_recorded_claim_lost", **ctx, error=error)

    async def _delete_quietly(self, m: ReceivedMessage) -> None:
        with contextlib.suppress(AdapterError):
            await self._deleter.submit(m.receipt_handle)
