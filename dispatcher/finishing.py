"""How an occurrence ends: FIRED (or the series' next occurrence), a retry, or dead-lettered,
and the message dealt with (through ``Visibility``). ``Finishing`` is one of the parts
``Delivery`` holds; the notification fan-out finishes its occurrences through it too.

A retry (like a channel due later, ``fanout``) is written PENDING and answered as a
``NextAttempt``: the message stays in hand, hidden as it was, and the dispatcher decides
whether to hold it for that attempt or hide it on SQS until then (``Dispatcher``). A dead
letter is listed by the attempt that ends the occurrence, right after its FAILED is written."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Protocol

import structlog

from dispatcher.caller_events import emit_all
from dispatcher.visibility import Visibility
from trigger_service.config.live_callers import Callers
from trigger_service.config.settings import DispatchSettings, Settings
from trigger_service.core import caller_events as announce
from trigger_service.core.dead_letters import (
    Attempt,
    AttemptOutcome,
    DeadLetter,
    DeadLetterReason,
    truncate,
    with_reason,
)
from trigger_service.core.deadlines import expired, expiry_error
from trigger_service.core.errors import AdapterError
from trigger_service.core.model import Route, Status, Trigger
from trigger_service.core.ports import Clock, DeliveryQueue, Metrics, TriggerStates
from trigger_service.core.ports.history import AttemptLog, DeadLetterIndex
from trigger_service.core.ports.values import DeliveryResult, OutgoingMessage, ReceivedMessage
from trigger_service.core.recent_attempts import attempt_number
from trigger_service.core.time import series
from trigger_service.core.time.timing import ceil_div, retry_backoff_s, sqs_delay_s
from trigger_service.platform.caller_events import CallerEvents

log = structlog.get_logger("dispatcher")


class DispatchStore(TriggerStates, AttemptLog, DeadLetterIndex, Protocol):
    """The trigger rows, the attempt history and the dead-letter index."""


@dataclass(frozen=True, slots=True)
class NextAttempt:
    """An occurrence written back PENDING until its next attempt (a retry, a channel due
    later): ``trigger`` is the row as written. Its message is still in hand and hidden as
    it was; whoever got this answer holds it for that attempt or hides it until then."""

    trigger: Trigger


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """A caller's retry rules (the callers file, falling back to the settings)."""

    max_attempts: int
    backoff_s: tuple[int, ...]
    max_age_s: int | None
    retry_after_max_s: int

    def too_old(self, fire_at_ms: int, now_ms: int) -> bool:
        return self.max_age_s is not None and now_ms - fire_at_ms >= self.max_age_s * 1000

    def delay_s(self, attempts: int, retry_after_s: float | None) -> int:
        """Seconds before the next attempt: the backoff, or longer if the receiver said so
        (never sooner than its Retry-After, at most ``retry_after_max_s``)."""
        delay_s = retry_backoff_s(attempts, self.backoff_s)
        if retry_after_s is not None:
            delay_s = max(delay_s, ceil_div(
                int(min(retry_after_s, self.retry_after_max_s) * 1000), 1000))
        return delay_s


class RetryPolicies:
    """Each caller's ``RetryPolicy``: the callers file, falling back to the settings."""

    def __init__(self, callers: Callers, d: DispatchSettings) -> None:
        self._callers = callers
        self._d = d

    def of(self, caller_name: str) -> RetryPolicy:
        c = self._callers.by_name(caller_name)
        return RetryPolicy((c.max_attempts if c else None) or self._d.max_attempts,
                           (c.retry_backoff_s if c else None) or self._d.retry_backoff_s,
                           c.max_age_s if c else None, self._d.retry_after_max_s)


@dataclass(frozen=True, slots=True)
class Verdict:
    """An attempt's outcome, decided once at ``now_ms`` (``Finishing.decide``): its history
    line and the write that records it say the same. ``reason``: why it is given up on
    (``EXPIRED``: its retry would start past the deadline); ``delay_s``: until the retry."""

    outcome: AttemptOutcome
    now_ms: int
    reason: DeadLetterReason | None = None
    delay_s: int = 0


@dataclass(frozen=True, slots=True)
class Attempted:
    trigger: Trigger  # as claimed
    result: DeliveryResult
    started_at_ms: int
    duration_ms: int
    refused: bool = False  # not sent: the URL or its address is not allowed (any more)


class Finishing:
    def __init__(self, settings: Settings, store: DispatchStore, queue: DeliveryQueue,
                 visibility: Visibility, policies: RetryPolicies, clock: Clock,
                 metrics: Metrics, name: str, events: CallerEvents | None = None) -> None:
        """``name``: this dispatcher, in the attempt history. ``events``: the callers'
        events (``dispatcher.caller_events``; None: none emitted), each emitted once its
        outcome is written."""
        self._s = settings
        self._store = store
        self._queue = queue  # the dead-letter queue; the message in hand goes through:
        self._visibility = visibility
        self.policies = policies
        self._clock = clock
        self._metrics = metrics
        self.name = name
        self.events = events

    async def give_up(self, m: ReceivedMessage, t: Trigger, error: str | None,
                       ctx: dict[str, object], reason: DeadLetterReason) -> None:
        """No attempts left: dead-letter this occurrence; a series goes on to its next one,
        anything else ends FAILED."""
        log.error("delivery_failed_permanently", **ctx, error=error, reason=reason.value)
        if t.schedule is not None:
            # Before moving on: once the row points at the next occurrence, a copy of this
            # message would be dropped as stale and the dead letter never sent again.
            await self._dead_letter(t, error, reason)
            if await self._move_on(m, t, fired=False):
                return
            now_ms = self._clock.now_ms()
            if await self._store.compare_and_set(t, series.finished(
                    t, fired=False, now_ms=now_ms, error=error),
                    ttl_s=self._s.terminal_ttl_s(t.registered_fire_at_ms, now_ms)):
                emit_all(self.events, [announce.failed(t, reason.value, error, now_ms),
                                       announce.series_finished(t, fired_last=False,
                                                                at_ms=now_ms)])
        else:
            await self._failed(t, error, reason)
        await self._visibility.delete_quietly(m)

    async def expire(self, m: ReceivedMessage, t: Trigger, at_ms: int,
                     last_error: str | None = None) -> None:
        """``t``'s current occurrence is past its deadline at ``at_ms`` (``core.deadlines``:
        a send, or a retry, would start then): dead-lettered ``expired`` instead of sent;
        a series goes on to its next occurrence, a one-time trigger ends FAILED."""
        self._metrics.inc("occurrences_expired_total", caller=t.caller)
        reason = DeadLetterReason.EXPIRED
        await self.give_up(m, t, with_reason(reason, expiry_error(t, at_ms, last_error)),
                           {"trigger_id": t.trigger_id, "caller": t.caller,
                            "attempt": t.attempts}, reason)

    async def end(self, m: ReceivedMessage, t: Trigger, error: str,
                  reason: DeadLetterReason) -> None:
        """End ``t`` FAILED now, a series too (its next occurrences could only fail the same
        way: a deleted recipient), and dead-letter this occurrence."""
        log.error("delivery_failed_permanently", trigger_id=t.trigger_id, caller=t.caller,
                  error=error, reason=reason.value)
        await self._failed(t, error, reason)
        await self._visibility.delete_quietly(m)

    async def _failed(self, t: Trigger, error: str | None, reason: DeadLetterReason) -> None:
        """``t`` FAILED first, then its dead letter: a message that comes back to a FAILED
        row re-sends the letter."""
        now_ms = self._clock.now_ms()
        new = series.finished(t, fired=False, now_ms=now_ms, error=error)
        if await self._store.compare_and_set(
                t, new, ttl_s=self._s.terminal_ttl_s(t.registered_fire_at_ms, now_ms)):
            await self._dead_letter(t, error, reason)
            emit_all(self.events, [announce.failed(t, reason.value, error, now_ms)] + (
                [announce.series_finished(t, fired_last=False, at_ms=now_ms)]
                if t.schedule is not None else []))

    async def _dead_letter(self, t: Trigger, error: str | None,
                           reason: DeadLetterReason) -> None:
        """List ``t``'s current occurrence as a dead letter (the index the API and /ops
        read), then send it to the SQS DLQ (the design's redrive target)."""
        await self._store.put_dead_letter(DeadLetter(
            t.occurrence_id, t.trigger_id, t.caller, reason, truncate(error), t.attempts,
            self._clock.now_ms(), t.fire_at_ms, t.callback_url), ttl_s=self._s.retention_s)
        await self._queue.send_dead_letter(t.trigger_id, t.fire_at_ms, error or "failed")
        self._metrics.inc("dead_lettered_total", reason=reason.value)
        emit_all(self.events, [announce.dead_lettered(t, reason.value, error,
                                                      self._clock.now_ms())])

    async def record_fired(self, m: ReceivedMessage, t: Trigger, result: DeliveryResult,
                            ctx: dict[str, object], *, patient: bool = False) -> None:
        now_ms = self._clock.now_ms()
        self._metrics.inc("deliveries_total", outcome="fired", caller=t.caller)
        # Delivered, whatever is written next (a lost claim's taker would deliver it again,
        # and announce it with the same id).
        emit_all(self.events, [announce.fired(t, result.status_code, now_ms)])
        # Debug, not info: a line per delivery is most of a busy dispatcher's log cost (the
        # counters and the attempt history say the same).
        log.debug("delivered", **ctx, status_code=result.status_code,
                 lag_ms=now_ms - t.fire_at_ms, occurrence_id=t.occurrence_id,
                 priority=t.priority.value)
        if t.schedule is not None and await self._move_on(m, t, fired=True, patient=patient):
            return
        new = series.finished(t, fired=True, now_ms=now_ms, error=None)
        # Patient: nobody waits for it (the message goes in the background), so it may share
        # a Paxos round with the other outcomes of its wave.
        applied = await self._store.compare_and_set(
            t, new, ttl_s=self._s.terminal_ttl_s(t.registered_fire_at_ms, now_ms),
            patient=patient)
        if applied and t.schedule is not None:
            emit_all(self.events, [announce.series_finished(t, fired_last=True, at_ms=now_ms)])
        if not applied:
            # Our claim was taken over while we delivered: the other one delivers too.
            self._metrics.inc("duplicate_deliveries_total")
            log.warning("fired_not_recorded_claim_lost", **ctx)
        await self._visibility.delete_quietly(m)

    async def _move_on(self, m: ReceivedMessage, t: Trigger, *, fired: bool,
                       patient: bool = False) -> bool:
        """Point a scheduled trigger at its next occurrence in one LWT (finishing this one);
        its message becomes the next one's, or goes if the sweeper will promote it. False
        when the schedule has no next occurrence (the caller then finishes the trigger)."""
        now_ms = self._clock.now_ms()
        nxt = series.next_after(t, fired=fired, now_ms=now_ms,
                                horizon_days=self._s.api.max_fire_ahead_days,
                                direct_max_delay_s=self._s.direct_max_delay_s,
                                tolerance_ms=self._s.api.catch_up_tolerance_s * 1000)
        if nxt is None:
            return False
        applied = await self._store.advance(
            t, nxt, self._s.index_ttl_s(nxt.fire_at_ms, now_ms), now_ms, patient=patient)
        if not applied:
            # Taken over or cancelled meanwhile: whoever holds the row now moves it on.
            self._metrics.inc("duplicate_deliveries_total" if fired else "claim_lost_total")
            await self._visibility.delete_quietly(m)
            return True
        log.debug("next_occurrence", trigger_id=t.trigger_id, caller=t.caller,
                 next_fire_at_ms=nxt.fire_at_ms, occurrence_id=nxt.occurrence_id)
        if nxt.route is Route.DIRECT:
            await self._visibility.pass_on(m, OutgoingMessage.of(
                nxt, sqs_delay_s(nxt.fire_at_ms, now_ms, self._s.sqs.enqueue_lead_s)))
        else:
            await self._visibility.delete_quietly(m)
        return True

    def decide(self, a: Attempted) -> Verdict:
        """What ``a``'s outcome is to be (``record_outcome`` writes it; the history line
        beside it says it), decided once, at one instant."""
        t, result = a.trigger, a.result
        now_ms = self._clock.now_ms()
        if result.ok:
            return Verdict(AttemptOutcome.DELIVERED, now_ms)
        policy = self.policies.of(t.caller)
        reason = (DeadLetterReason.CALLBACK_NOT_ALLOWED if a.refused
                  else DeadLetterReason.GONE if result.gone
                  else DeadLetterReason.MAX_AGE if policy.too_old(t.fire_at_ms, now_ms)
                  else DeadLetterReason.MAX_ATTEMPTS if t.attempts >= policy.max_attempts
                  else None)
        if reason is not None:
            return Verdict(AttemptOutcome.DEAD_LETTERED, now_ms, reason)
        delay_s = policy.delay_s(t.attempts, result.retry_after_s)
        if expired(t, now_ms + delay_s * 1000):  # the retry would start past the deadline
            return Verdict(AttemptOutcome.DEAD_LETTERED, now_ms, DeadLetterReason.EXPIRED,
                           delay_s)
        return Verdict(AttemptOutcome.RETRY, now_ms, None, delay_s)

    async def record_attempt(self, a: Attempted, outcome: AttemptOutcome, *,
                             patient: bool = False) -> None:
        """``a``'s line in the history, with its ``outcome`` (best effort: a failure is
        logged). ``patient``: it may wait for company (the outcome beside it does)."""
        t, r = a.trigger, a.result
        kept = self._s.attempts_kept
        try:
            await self._store.record_attempt(Attempt(
                t.trigger_id, t.occurrence_id, t.attempts, a.started_at_ms, a.duration_ms,
                r.status_code, truncate(r.error), r.response_excerpt, self.name,
                outcome=outcome, number=attempt_number(t.occurrence_seq, t.attempts, kept)),
                ttl_s=self._s.retention_s, kept=kept, patient=patient)
        except AdapterError as e:
            # The delivery itself is recorded by the outcome; only its history line is lost.
            self._metrics.inc("attempt_record_failures_total")
            log.warning("attempt_not_recorded", trigger_id=t.trigger_id, error=str(e))

    async def record_outcome(self, m: ReceivedMessage, a: Attempted,
                             verdict: Verdict | None = None, *,
                             patient: bool = False) -> NextAttempt | None:
        """Record an attempt's outcome, as ``verdict`` decided it (``decide``; None: decided
        here). A retry is written PENDING and answered as a ``NextAttempt`` (``m`` left as
        it is, hidden); otherwise ``m`` is dealt with here (deleted or passed on; after a
        lost claim, left to come back) and the answer is None. ``patient``: others of its
        wave are still being delivered, so a FIRED may wait for theirs to share a Paxos
        round (alone, it goes at once: the wait is also how long a SIGKILL would deliver it
        twice). Raises ``AdapterError``."""
        t, result = a.trigger, a.result
        v = verdict or self.decide(a)
        ctx = {"trigger_id": t.trigger_id, "caller": t.caller, "attempt": t.attempts}
        if result.ok:
            await self.record_fired(m, t, result, ctx, patient=patient)
            return None
        self._metrics.inc("deliveries_total", outcome="failed_attempt", caller=t.caller)
        error = result.error
        if v.reason is DeadLetterReason.EXPIRED:
            await self.expire(m, t, v.now_ms + v.delay_s * 1000, error)
            return None
        if v.reason is not None:
            await self.give_up(m, t, with_reason(v.reason, error), ctx, v.reason)
            return None
        new = replace(t, status=Status.PENDING, claim_id=None, last_error=error,
                            next_attempt_at_ms=v.now_ms + v.delay_s * 1000)
        if await self._store.compare_and_set(t, new):
            log.warning("delivery_failed_will_retry", **ctx, error=error, retry_in_s=v.delay_s)
            return NextAttempt(new)
        # Taken over meanwhile (the claim went stale): the taker finishes the occurrence;
        # this copy comes back when its visibility ends and finds the row as it was left.
        # (Its history line still says retry: what this dispatcher decided.)
        log.warning("retry_not_recorded_claim_lost", **ctx, error=error)
        return None
