"""Pause and resume of one trigger (``TriggerService.pause`` / ``resume``). No HTTP here.

Both are LWTs on the row, like a cancel: a pause applies only to a PENDING row as read, so
exactly one of the pause and a dispatcher's claim wins; a resume applies only to the PAUSED
row as read. The values they write are ``core.pause``'s.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import structlog

from trigger_service.app.background_sends import BackgroundSends
from trigger_service.app.settling import ROUNDS, settle
from trigger_service.config.settings import Settings
from trigger_service.core.errors import NotEditable
from trigger_service.core.model import Route, Status, Trigger
from trigger_service.core.pause import paused, resumed
from trigger_service.core.ports import Clock, Metrics, TriggerCatalog
from trigger_service.core.time.catchup import CatchUpPolicy

log = structlog.get_logger(__name__)


Get = Callable[[str, str], Awaitable[Trigger]]
Release = Callable[[str, str], Awaitable[None]]


class Pausing:
    def __init__(self, settings: Settings, catalog: TriggerCatalog, clock: Clock,
                 metrics: Metrics, get: Get, sends: BackgroundSends,
                 release: Release) -> None:
        """``get``: the caller's trigger or ``NotFound``; ``sends``: the SQS sends of direct
        triggers, started in the background; ``release``: give back the caller's
        ``max_pending`` place of a trigger that finished."""
        self._s = settings
        self._catalog = catalog
        self._clock = clock
        self._metrics = metrics
        self._get = get
        self._sends = sends
        self._release = release

    async def pause(self, caller: str, trigger_id: str) -> Trigger:
        """PENDING → PAUSED (idempotent on PAUSED); a 200 is never followed by a delivery
        until a resume. A series' occurrence being delivered is waited for (briefly): the
        series is paused after it. Raises ``NotFound``, ``NotEditable`` (finished; a one-time
        trigger being delivered; a series still in flight after the wait)."""
        async def apply(t: Trigger) -> Trigger | None:
            new = paused(t)
            if not await self._catalog.compare_and_set(t, new):
                return None
            log.info("trigger_paused", trigger_id=trigger_id, caller=caller)
            self._metrics.inc("triggers_paused_total")
            return new

        return await settle(lambda: self._get(caller, trigger_id), self._clock,
                            done=Status.PAUSED, movable=frozenset({Status.PENDING}),
                            apply=apply,
                            refuse=lambda msg, status: NotEditable(msg, status=status))

    async def resume(self, caller: str, trigger_id: str,
                     policy: CatchUpPolicy | None) -> Trigger:
        """PAUSED → PENDING at the occurrence ``policy`` picks (None: the series' catch-up
        policy; ``core.pause``), re-enqueued if direct; CANCELLED when nothing is left to
        fire. Idempotent: a trigger not paused (PENDING, IN_FLIGHT) is answered as it is.
        Raises ``NotFound``, ``NotEditable`` (finished, or changing state)."""
        for _ in range(ROUNDS):  # each lost LWT: look again
            t = await self._get(caller, trigger_id)
            if t.status in (Status.PENDING, Status.IN_FLIGHT):
                return t
            if t.status is not Status.PAUSED:
                raise NotEditable(f"trigger {trigger_id} is {t.status.value}",
                                  status=t.status.value)
            now_ms = self._clock.now_ms()
            new, chosen = resumed(t, now_ms=now_ms, policy=policy,
                                  horizon_days=self._s.api.max_fire_ahead_days,
                                  direct_max_delay_s=self._s.direct_max_delay_s)
            if await self._write(t, new, now_ms):
                for reason, n in chosen.skipped().items():
                    self._metrics.inc("occurrences_skipped_total", n, reason=reason.value)
                log.info("trigger_resumed", trigger_id=trigger_id, caller=caller,
                         status=new.status.value, fire_at_ms=new.fire_at_ms,
                         policy=policy.value if policy else None)
                if new.status is Status.PENDING and new.route is Route.DIRECT:
                    self._sends.start(new)
                elif new.status.terminal:
                    await self._release(caller, trigger_id)
                return new
        raise NotEditable(f"trigger {trigger_id} is changing state; try again",
                          status=Status.PAUSED.value)

    async def _write(self, old: Trigger, new: Trigger, now_ms: int) -> bool:
        if new.status.terminal:
            return await self._catalog.compare_and_set(
                old, new, ttl_s=self._s.terminal_ttl_s(old.registered_fire_at_ms, now_ms))
        if new.fire_at_ms == old.fire_at_ms:
            return await self._catalog.compare_and_set(old, new)
        return await self._catalog.advance(
            old, new, self._s.index_ttl_s(new.fire_at_ms, now_ms), now_ms)
