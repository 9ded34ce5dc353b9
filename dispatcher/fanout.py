"""One occurrence of a trigger with notification channels, delivered under the
dispatcher's claim: every channel due now is sent, each with its own state, retries and
outcome. One of the parts ``Delivery`` holds; it calls ``fan_out`` once its claim applied.

Why each failure is safe:

- each channel's outcome is recorded as soon as it is known, by an LWT that keeps the claim
  (IN_FLIGHT → IN_FLIGHT, new channel states; outcomes that arrive while one such LWT is in
  flight share the next, and the last one goes with the finishing LWT): a dispatcher killed
  between two channels leaves the ones already sent recorded, and whoever takes the stale
  claim over sends only the others (a channel sent but not yet recorded is sent again: a
  counted duplicate);
- a channel due later (an escalation step, a retry, the end of quiet hours) puts the trigger
  back to PENDING with ``next_attempt_at_ms`` at the earliest such time and answers a
  ``NextAttempt``: the dispatcher holds the message for it or hides it until then, and it is
  claimed again like any fire time; an acknowledgement (an LWT on the PENDING row, which
  bumps its revision) can land in between, and then the claim loses and reads the row
  again; a claim of an acknowledged occurrence skips what is left;
- the occurrence ends when every channel is done: FIRED (or the series' next occurrence)
  when none failed, else dead-lettered with each channel's outcome;
- every send ends within the claim's lease (``claim_keeping``): the recipient's profile is
  read after the fence's check, so each channel's send is bounded by what is left of the
  lease, and one with too little left is not made (a failed attempt of that channel,
  retried later under a new claim).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace
from typing import Protocol

import structlog

from dispatcher.finishing import DispatchStore, Finishing, NextAttempt
from dispatcher.recipients import SendTimeProfiles, plan_for, resolved
from trigger_service.config.settings import Settings
from trigger_service.core.dead_letters import (
    WEBHOOK,
    Attempt,
    AttemptOutcome,
    DeadLetterReason,
    truncate,
)
from trigger_service.core.errors import AdapterError
from trigger_service.core.model import Status, Trigger
from trigger_service.core.notify.ack_links import make_token
from trigger_service.core.notify.channels import ChannelOutcome, ChannelSpec, OccurrenceNotice
from trigger_service.core.notify.plan import (
    HTTP,
    ChannelState,
    ChannelStatus,
    initial_states,
    with_state,
)
from trigger_service.core.ports import Channel, Clock, Metrics
from trigger_service.core.ports.values import DeliveryResult, ReceivedMessage
from trigger_service.core.recent_attempts import attempt_number
from trigger_service.core.recipient_profiles import RecipientProfile, deleted_error

log = structlog.get_logger("dispatcher")


class Notifiers(Protocol):
    """Sends one channel's message (email, SMS, push, inbox); never raises for a provider's
    failure (that is the outcome)."""

    async def send(self, spec: ChannelSpec, occ: OccurrenceNotice) -> ChannelOutcome: ...


class _Unconfigured:
    async def send(self, spec: ChannelSpec, occ: OccurrenceNotice) -> ChannelOutcome:
        return ChannelOutcome(False, permanent=True, error=f"{spec.type.value}: not configured")


UNCONFIGURED: Notifiers = _Unconfigured()


# The provider code of a callback channel whose URL or address is not allowed: if that is
# the only failure the occurrence is dead-lettered ``callback_not_allowed``.
NOT_ALLOWED = DeadLetterReason.CALLBACK_NOT_ALLOWED.value
# The provider code of a channel not sent because its caller's daily budget is spent
# (``dispatcher/channels/caller_policy.py``).
BUDGET_EXHAUSTED = DeadLetterReason.BUDGET_EXHAUSTED.value
# A channel's send is not started with less of its claim's lease left than this.
MIN_CHANNEL_SEND_MS = 2_000


def failure_reason(failed: list[ChannelState]) -> DeadLetterReason:
    """The dead-letter reason of an occurrence whose ``failed`` channels failed:
    ``budget_exhausted`` if any was not sent for its budget (what an operator must raise
    before a replay can help), ``callback_not_allowed`` if every one was refused so, else
    ``max_attempts``. Each channel's own outcome is in the letter's detail."""
    if any(s.provider_code == BUDGET_EXHAUSTED for s in failed):
        return DeadLetterReason.BUDGET_EXHAUSTED
    if all(s.provider_code == NOT_ALLOWED for s in failed):
        return DeadLetterReason.CALLBACK_NOT_ALLOWED
    return DeadLetterReason.MAX_ATTEMPTS


def _from_http(r: DeliveryResult) -> ChannelOutcome:
    """The callback's answer as a channel outcome (410 or a refused address: no retry)."""
    code = NOT_ALLOWED if r.refused else str(r.status_code) if r.status_code else None
    return ChannelOutcome(r.ok, permanent=r.gone or r.refused, provider_code=code,
                          error=r.error, retry_after_s=r.retry_after_s)


# A channel's state after a send, as its attempt's outcome: a channel given up on is
# ``failed`` (the occurrence is dead-lettered, and says so, once every channel is done).
_OUTCOMES = {ChannelStatus.DELIVERED: AttemptOutcome.DELIVERED,
             ChannelStatus.PENDING: AttemptOutcome.RETRY,
             ChannelStatus.DEFERRED: AttemptOutcome.RETRY,
             ChannelStatus.FAILED: AttemptOutcome.FAILED,
             ChannelStatus.SKIPPED: AttemptOutcome.SKIPPED}


class FanOut:
    def __init__(self, settings: Settings, store: DispatchStore, channel: Channel,
                 notifiers: Notifiers, finishing: Finishing,
                 callback_allowed: Callable[[Trigger], bool], clock: Clock,
                 metrics: Metrics, profiles: SendTimeProfiles | None = None) -> None:
        """``callback_allowed``: whether a trigger's callback URL is still allowed for its
        caller (checked again at delivery); ``profiles``: the recipients' profiles, read at
        send time (``dispatcher/recipients.py``; None: a recipient's channels cannot be
        resolved and fail)."""
        self._profiles = profiles
        self._s = settings
        self._d = settings.dispatch
        self._store = store
        self._channel = channel
        self._notifiers = notifiers
        self._finishing = finishing
        self._callback_allowed = callback_allowed
        self._clock = clock
        self._metrics = metrics

    async def fan_out(self, m: ReceivedMessage, claimed: Trigger, ends_mono_ms: int
                      ) -> NextAttempt | None:
        """Send every channel of ``claimed`` (claimed by us) that is due now and record the
        outcomes. A ``NextAttempt`` when channels are left for later (``m`` left as it is,
        hidden); otherwise None (``m`` dealt with). ``ends_mono_ms``: the claim's lease's
        end on this process's monotonic clock (``claim_keeping.Claim``); no send outlasts
        it. Raises ``AdapterError``."""
        assert claimed.plan is not None
        profile = None
        if claimed.recipient is not None and self._profiles is not None:
            profile = await self._profiles.of(claimed)
            if profile is None:
                await self._finishing.end(m, claimed, deleted_error(claimed.recipient),
                                          DeadLetterReason.RECIPIENT_DELETED)
                return None
        now_ms = self._clock.now_ms()
        states = _states_of(claimed, profile)
        row = replace(claimed, channel_states=states)
        await self._history_of_skipped(claimed, row, now_ms)
        due = [i for i, s in enumerate(states)
               if not s.status.done and s.due_at_ms <= now_ms]
        lock = asyncio.Lock()
        recorded, lost = claimed, False  # the row as we last wrote it (the LWT's condition)
        sending = len(due)

        async def record() -> None:
            # One LWT at a time; outcomes that arrive while one is in flight are written
            # together by the next (a write finding nothing new is skipped).
            nonlocal recorded, lost
            async with lock:
                latest = row
                if lost or latest.channel_states == recorded.channel_states:
                    return
                if await self._store.compare_and_set(recorded, latest):
                    recorded = latest
                else:  # taken over (or cancelled): the taker sends what is not recorded
                    lost = True
                    self._metrics.inc("duplicate_deliveries_total")
                    log.warning("channel_outcome_not_recorded_claim_lost",
                                trigger_id=latest.trigger_id)

        async def one(i: int) -> None:
            nonlocal row, sending
            outcome, started_ms = await self._send_channel(row, i, profile, ends_mono_ms)
            row = replace(row, channel_states=self._after(row.channel_states, i, outcome, row))
            sending -= 1
            await self._history(row, i, outcome, started_ms)
            if sending:  # the last outcome goes with the finishing LWT
                await record()

        await asyncio.gather(*(one(i) for i in due))
        if lost:
            return None
        # ``row`` has the claim's condition values (status, claim, attempts, revision)
        # and every channel's state; ``recorded`` is the row as stored, what a write
        # that changes only some cells is computed against.
        return await self._finish_occurrence(m, row, recorded)

    async def _send_channel(self, t: Trigger, i: int, profile: RecipientProfile | None,
                            ends_mono_ms: int) -> tuple[ChannelOutcome, int]:
        started_ms = self._clock.now_ms()
        assert t.plan is not None
        # Bounded like a callback (the claim stays valid, and the message hidden, for the
        # callback timeout), whatever the provider's own timeout, and by the claim's lease:
        # nothing awaited from here to the send.
        left_ms = ends_mono_ms - self._clock.monotonic_ms()
        if left_ms < MIN_CHANNEL_SEND_MS:
            return ChannelOutcome(False, error="not sent: the claim's lease ran out before "
                                  "the send"), started_ms
        limit_s = min(self._d.callback_timeout_s, left_ms / 1000)
        if i >= len(t.plan.channels):  # the callback, as the last channel
            if not self._callback_allowed(t):
                return ChannelOutcome(False, permanent=True, provider_code=NOT_ALLOWED,
                                      error="callback URL not allowed for this caller any "
                                            "more"), started_ms
            return _from_http(await self._channel.deliver(
                t, t.attempts, None if limit_s >= self._d.callback_timeout_s else limit_s)
            ), started_ms
        api = self._s.api
        token = make_token(api.ack_secret, t.trigger_id, t.occurrence_seq,
                           t.fire_at_ms + api.ack_link_ttl_s * 1000)
        occ = OccurrenceNotice(t.trigger_id, t.occurrence_id, t.caller, i, t.fire_at_ms,
                         f"{api.public_url.rstrip('/')}/ack/{token}")
        spec = t.plan.channels[i]
        if t.recipient is not None:
            found = resolved(spec, t.plan, profile)
            if isinstance(found, ChannelOutcome):
                return found, started_ms
            spec = found
        try:
            outcome = await asyncio.wait_for(self._notifiers.send(spec, occ), limit_s)
        except TimeoutError:
            outcome = ChannelOutcome(False, error=f"timeout after {limit_s:g}s")
        return outcome, started_ms

    def _after(self, states: tuple[ChannelState, ...], i: int, o: ChannelOutcome,
               t: Trigger) -> tuple[ChannelState, ...]:
        """Channel ``i``'s state after ``o``."""
        s = states[i]
        attempts = s.attempts + 1
        now_ms = self._clock.now_ms()
        common = {"attempts": attempts, "provider_code": o.provider_code,
                  "last_error": truncate(o.error)}
        if o.ok:
            return with_state(states, i, status=ChannelStatus.DELIVERED, delivered_at_ms=now_ms,
                              provider_message_id=o.provider_message_id, **common)
        policy = self._finishing.policies.of(t.caller)
        if (o.permanent or attempts >= policy.max_attempts
                or policy.too_old(t.fire_at_ms, now_ms)):
            return with_state(states, i, status=ChannelStatus.FAILED, **common)
        delay_s = policy.delay_s(attempts, o.retry_after_s)
        return with_state(states, i, status=ChannelStatus.PENDING,
                          due_at_ms=now_ms + delay_s * 1000, **common)

    async def _history(self, row: Trigger, i: int, o: ChannelOutcome,
                       started_ms: int) -> None:
        """Channel ``i``'s attempt in the history (best effort, like the callback's)."""
        s = row.channel_states[i]
        code = int(o.provider_code) if o.provider_code and o.provider_code.isdigit() else None
        kept = self._s.attempts_kept
        # The occurrence's sends so far, this one last: each send of the occurrence has its
        # own (``row`` is this send's, nothing awaited since its state was counted).
        sends = sum(c.attempts for c in row.channel_states)
        history = Attempt(row.trigger_id, row.occurrence_id, s.attempts, started_ms,
                          self._clock.now_ms() - started_ms, code,
                          truncate(f"{s.type}: {o.provider_code or ''} {o.error}")
                          if o.error else None,
                          truncate(f"{s.type}: {o.provider_message_id}")
                          if o.provider_message_id else s.type, self._finishing.name,
                          outcome=_OUTCOMES[s.status],
                          channel=_channel_name(s),
                          number=attempt_number(row.occurrence_seq, sends, kept))
        self._metrics.inc("channel_sends_total", type=s.type, outcome=s.status.value.lower())
        await self._record(history)

    async def _history_of_skipped(self, claimed: Trigger, row: Trigger, now_ms: int) -> None:
        """A line in the history for each channel of ``row`` skipped by this claim (the
        occurrence was acknowledged before it was sent; ``claimed``'s states are as
        stored), numbered after the occurrence's sends: none follows an acknowledgement."""
        before = claimed.channel_states
        skipped = [i for i, s in enumerate(row.channel_states)
                   if s.status is ChannelStatus.SKIPPED
                   and (i >= len(before) or before[i].status is not ChannelStatus.SKIPPED)]
        sends = sum(c.attempts for c in row.channel_states)
        for k, i in enumerate(skipped, start=1):
            s = row.channel_states[i]
            await self._record(Attempt(
                row.trigger_id, row.occurrence_id, s.attempts + 1, now_ms, 0, None,
                f"{s.type}: not sent, the occurrence was acknowledged", s.type,
                self._finishing.name, outcome=AttemptOutcome.SKIPPED,
                channel=_channel_name(s),
                number=attempt_number(row.occurrence_seq, sends + k, self._s.attempts_kept)))

    async def _record(self, history: Attempt) -> None:
        try:
            await self._store.record_attempt(history, ttl_s=self._s.retention_s,
                                             kept=self._s.attempts_kept)
        except AdapterError as e:
            self._metrics.inc("attempt_record_failures_total")
            log.warning("attempt_not_recorded", trigger_id=history.trigger_id, error=str(e))

    async def _finish_occurrence(self, m: ReceivedMessage, current: Trigger,
                                 stored: Trigger) -> NextAttempt | None:
        """Every channel done: FIRED or dead-lettered; otherwise PENDING until the next one
        is due (a ``NextAttempt``). ``current``: the occurrence with every channel's state;
        ``stored``: the row as last written (the same condition values). The PENDING write
        is computed against ``stored``: a state change writes only the cells it changes,
        and against ``current`` the channels' states would look unchanged and stay
        unwritten. (The terminal writes rewrite every cell with their TTL.)"""
        states = current.channel_states
        ctx = {"trigger_id": current.trigger_id, "caller": current.caller,
               "attempt": current.attempts}
        if all(s.status.done for s in states):
            failed = [s for s in states if s.status is ChannelStatus.FAILED]
            if failed:
                detail = "; ".join(f"{s.type}: {s.provider_code or ''} {s.last_error or ''}"
                                   .strip() for s in failed)
                await self._finishing.give_up(m, current, detail, ctx, failure_reason(failed))
            else:
                await self._finishing.record_fired(
                    m, current, DeliveryResult(True, None, None), ctx)
            return None
        next_ms = min(s.due_at_ms for s in states if not s.status.done)
        new = replace(current, status=Status.PENDING, claim_id=None, next_attempt_at_ms=next_ms,
                                  channel_states=states)
        if await self._store.compare_and_set(stored, new):
            log.info("channels_waiting", **ctx, next_at_ms=next_ms,
                     pending=[s.type for s in states if not s.status.done])
            return NextAttempt(new)
        log.warning("channels_not_recorded_claim_lost", **ctx)
        return None


__all__ = ["BUDGET_EXHAUSTED", "HTTP", "UNCONFIGURED", "FanOut", "Notifiers"]


def _channel_name(s: ChannelState) -> str:
    """A channel's name in the attempt history (``webhook`` for the callback URL)."""
    return WEBHOOK if s.type == HTTP else s.type


def _states_of(claimed: Trigger, profile: RecipientProfile | None) -> tuple[ChannelState, ...]:
    """The channels' states of ``claimed``'s occurrence: as stored, or new from its plan (an
    acknowledged occurrence's unsent ones skipped)."""
    assert claimed.plan is not None
    states = claimed.channel_states or initial_states(
        plan_for(claimed.plan, profile), claimed.fire_at_ms,
        has_callback=bool(claimed.callback_url))
    if claimed.acked:
        states = tuple(s if s.status.done else replace(s, status=ChannelStatus.SKIPPED)
                       for s in states)
    return states
