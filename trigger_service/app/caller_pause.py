"""Operators pause a whole caller during an incident, and resume it. No HTTP here.

The pause is a durable flag (``CallerPauses``); every dispatcher reads the flags through a
cache refreshed every ``PAUSED_CALLERS_REFRESH_MS`` (2 s) and turns a due trigger of a paused
caller PAUSED instead of delivering it (``dispatcher.screening``). Registrations, edits and
cancels still work.

Resuming clears the flag, waits until no dispatcher can still hold the old answer (the
refresh period and a margin: a trigger paused by a stale copy is then already PAUSED), and
makes a job over triggers (``app.trigger_jobs``, action ``resume``) whose items are the
caller's PAUSED triggers read from its open index; each is resumed through
``TriggerService.resume`` with the policy given (none: each series' own). Triggers paused one
by one (``POST /v1/triggers/{id}/pause``) are resumed too: a PAUSED trigger does not say who
paused it.
"""

from __future__ import annotations

import structlog

from trigger_service.app.trigger_jobs import TriggerJobRunner
from trigger_service.app.triggers import TriggerService
from trigger_service.core.errors import NotFound
from trigger_service.core.model import Status
from trigger_service.core.ports import Clock
from trigger_service.core.ports.pause import CallerPauses
from trigger_service.core.tags import TriggerFilter
from trigger_service.core.time.catchup import CatchUpPolicy
from trigger_service.core.trigger_jobs import JobAction, TriggerJob

log = structlog.get_logger(__name__)

# The dispatchers' cache period (dispatcher.screening.PAUSED_CALLERS_REFRESH_MS) and a margin.
RESUME_SETTLE_MS = 2_000 + 1_000
_PAGE = 500


class CallerPauseService:
    def __init__(self, store: CallerPauses, triggers: TriggerService, jobs: TriggerJobRunner,
                 clock: Clock) -> None:
        self._store = store
        self._triggers = triggers
        self._jobs = jobs
        self._clock = clock

    async def pause(self, caller: str) -> int:
        """Pause ``caller`` (idempotent); when it was paused. Raises ``StoreError``."""
        now_ms = self._clock.now_ms()
        await self._store.pause_caller(caller, now_ms)
        log.warning("caller_paused", caller=caller)
        return (await self._store.paused_callers()).get(caller, now_ms)

    async def resume(self, caller: str, policy: CatchUpPolicy | None) -> TriggerJob:
        """Clear ``caller``'s flag and start the job that resumes its PAUSED triggers.
        Answers after ``RESUME_SETTLE_MS``. Raises ``StoreError``."""
        await self._store.resume_caller(caller)
        log.warning("caller_resumed", caller=caller)
        await self._clock.sleep_ms(RESUME_SETTLE_MS)
        ids = await self._jobs.paused_ids(caller)
        return await self._jobs.start_over(caller, JobAction.RESUME,
                                           TriggerFilter(status=Status.PAUSED), ids,
                                           policy.value if policy else None)

    async def job(self, job_id: str) -> TriggerJob:
        """A job over triggers, any caller's (its progress). Raises ``NotFound``."""
        job = await self._jobs.get(None, job_id)
        if job.action is not JobAction.RESUME:
            raise NotFound(f"no resume job {job_id}")
        return job

    async def paused(self) -> list[tuple[str, int, int]]:
        """Every paused caller: (name, paused at, its PAUSED triggers up to ``_PAGE``)."""
        out = []
        for caller, at_ms in sorted((await self._store.paused_callers()).items()):
            page = await self._triggers.list_triggers(caller, status=Status.PAUSED,
                                                      limit=_PAGE, cursor=None)
            out.append((caller, at_ms, len(page.triggers)))
        return out
