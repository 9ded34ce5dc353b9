"""The screen (``Screening``): what stops a due occurrence before its claim: its caller
paused by an operator (the trigger is turned PAUSED instead of delivered), its endpoint
disabled (``dispatcher.endpoint_health``), or the series' catch-up policy passing over a
late occurrence (``core.time.catchup``: the series moves on without delivering it).

Both are LWTs on the row as read, like the claim they replace: if one loses (a cancel, an
edit, another dispatcher), nothing is done here and the claim that follows loses too, so the
dispatcher looks at the row again.
"""

from __future__ import annotations

from dataclasses import replace

import structlog

from dispatcher.endpoint_health import EndpointParking
from dispatcher.finishing import DispatchStore
from dispatcher.visibility import Visibility
from trigger_service.config.settings import Settings
from trigger_service.core.errors import AdapterError
from trigger_service.core.model import Route, Status, Trigger
from trigger_service.core.pause import paused
from trigger_service.core.ports import Clock, Metrics
from trigger_service.core.ports.pause import CallerPauses
from trigger_service.core.ports.values import OutgoingMessage, ReceivedMessage
from trigger_service.core.time import series
from trigger_service.core.time.catchup import is_missed
from trigger_service.core.time.timing import sqs_delay_s

log = structlog.get_logger("dispatcher")

# How old the dispatcher's copy of the paused callers may be: an operator's pause stops every
# occurrence due this long after the answer.
PAUSED_CALLERS_REFRESH_MS = 2_000
SERIES_ENDED = ("the series' remaining occurrences were missed and passed over by its "
                "catch-up policy")


class PausedCallers:
    """The paused callers as last read, read again when older than the refresh period. A
    read that fails keeps the last answer (logged): an outage of the store must not turn
    a pause off, nor stop every delivery."""

    def __init__(self, pauses: CallerPauses, clock: Clock,
                 refresh_ms: int = PAUSED_CALLERS_REFRESH_MS) -> None:
        self._pauses = pauses
        self._clock = clock
        self._refresh_ms = refresh_ms
        self._paused: frozenset[str] = frozenset()
        self._read_at_ms: int | None = None

    async def is_paused(self, caller: str) -> bool:
        now_ms = self._clock.now_ms()
        if self._read_at_ms is None or now_ms - self._read_at_ms >= self._refresh_ms:
            self._read_at_ms = now_ms  # one read a period, however many ask meanwhile
            try:
                self._paused = frozenset(await self._pauses.paused_callers())
            except AdapterError as e:
                log.warning("paused_callers_unread", error=str(e))
        return caller in self._paused


class Screening:
    """The screen a due occurrence passes just before its claim: screened out (not
    delivered now, the message dealt with) if its caller is paused, its endpoint disabled
    (``EndpointParking``), or it is a series' late occurrence passed over."""

    def __init__(self, settings: Settings, store: DispatchStore, visibility: Visibility,
                 clock: Clock, metrics: Metrics, paused_callers: PausedCallers | None,
                 endpoints: EndpointParking | None = None) -> None:
        """``endpoints``: deals with the occurrences of disabled endpoints (None: none is)."""
        self._s = settings
        self._store = store
        self._visibility = visibility
        self._clock = clock
        self._metrics = metrics
        self._callers = paused_callers
        self._endpoints = endpoints

    async def screened_out(self, m: ReceivedMessage, t: Trigger) -> bool:
        """Whether ``t`` (PENDING or IN_FLIGHT, about to be claimed) was screened out here:
        the message is then dealt with. False: claim and deliver it."""
        if t.status is not Status.PENDING:
            return False
        if self._callers is not None and await self._callers.is_paused(t.caller):
            if await self._store.compare_and_set(t, paused(t)):
                self._metrics.inc("triggers_paused_total")
                log.info("trigger_paused_with_caller", trigger_id=t.trigger_id, caller=t.caller)
                await self._visibility.delete_quietly(m)
                return True
            return False
        if self._endpoints is not None and await self._endpoints.park(m, t):
            return True
        return await self._passed_over(m, t)

    async def _passed_over(self, m: ReceivedMessage, t: Trigger) -> bool:
        """A series' first attempt at an occurrence that is missed: moved on by its
        catch-up policy unless the policy fires it."""
        now_ms = self._clock.now_ms()
        tolerance_ms = self._s.api.catch_up_tolerance_s * 1000
        if (t.schedule is None or not t.schedule.recurring or t.attempts
                or t.next_attempt_at_ms is not None
                or not is_missed(t.fire_at_ms, now_ms, tolerance_ms)):
            return False
        nxt, chosen = series.catch_up(t, now_ms=now_ms,
                                      horizon_days=self._s.api.max_fire_ahead_days,
                                      direct_max_delay_s=self._s.direct_max_delay_s,
                                      tolerance_ms=tolerance_ms)
        if nxt is t:
            return False
        if nxt is None:
            applied = await self._store.compare_and_set(
                t, replace(t, status=Status.CANCELLED, last_error=SERIES_ENDED),
                ttl_s=self._s.terminal_ttl_s(t.registered_fire_at_ms, now_ms))
        else:
            applied = await self._store.advance(
                t, nxt, self._s.index_ttl_s(nxt.fire_at_ms, now_ms), now_ms)
        if not applied:
            return False
        for reason, n in chosen.skipped().items():
            self._metrics.inc("occurrences_skipped_total", n, reason=reason.value)
        log.info("occurrences_skipped", trigger_id=t.trigger_id, caller=t.caller,
                 late_ms=now_ms - t.fire_at_ms, policy=t.schedule.catch_up.policy.value,
                 next_fire_at_ms=nxt.fire_at_ms if nxt else None)
        if nxt is not None and nxt.route is Route.DIRECT:
            await self._visibility.pass_on(m, OutgoingMessage.of(
                nxt, sqs_delay_s(nxt.fire_at_ms, now_ms, self._s.sqs.enqueue_lead_s)))
        else:
            await self._visibility.delete_quietly(m)
        return True
