"""Operators pause a whole caller during an incident, and resume it. No HTTP here.

The pause is a durable flag (``CallerPauses``); every dispatcher reads the flags through a
cache refreshed every ``PAUSED_CALLERS_REFRESH_MS`` (2 s) and turns a due trigger of a paused
caller PAUSED instead of delivering it (``dispatcher.holding``). Registrations, edits and
cancels still work.

Resuming clears the flag, waits until no dispatcher can still hold the old answer (the
refresh period and a margin: a trigger paused by a stale copy is then already PAUSED), and
makes a job (``app.replay_jobs``, kind ``resume_``) whose items are the caller's PAUSED
triggers read from its open index; each is resumed through ``TriggerService.resume`` with
the policy given (none: each series' own). Its progress is read like a bulk replay's.
Triggers paused one by one (``POST /v1/triggers/{id}/pause``) are resumed too: a PAUSED
trigger does not say who paused it.
"""

from __future__ import annotations

from typing import Protocol

import structlog
from ulid import ULID

from trigger_service.app.triggers import TriggerService
from trigger_service.config.settings import Settings
from trigger_service.core.catchup import CatchUpPolicy
from trigger_service.core.dead_letters import DeadLetterQuery, ItemState, JobItem, ReplayJob
from trigger_service.core.errors import ApiError, NotFound
from trigger_service.core.history_ports import ReplayJobStore
from trigger_service.core.model import Status
from trigger_service.core.pause_ports import CallerPauses
from trigger_service.core.ports import Clock, ListCursor

log = structlog.get_logger(__name__)

JOB_KIND = "resume"
# The dispatchers' cache period (dispatcher.holding.PAUSED_CALLERS_REFRESH_MS) and a margin.
RESUME_SETTLE_MS = 2_000 + 1_000
_PAGE = 500
_SERIES = "series"  # a job id's policy part when each series' own is used


class PauseStore(CallerPauses, ReplayJobStore, Protocol):
    """The flags and the job store."""


class CallerPauseService:
    def __init__(self, settings: Settings, store: PauseStore, triggers: TriggerService,
                 clock: Clock) -> None:
        self._s = settings
        self._store = store
        self._triggers = triggers
        self._clock = clock

    async def pause(self, caller: str) -> int:
        """Pause ``caller`` (idempotent); when it was paused. Raises ``StoreError``."""
        now_ms = self._clock.now_ms()
        await self._store.pause_caller(caller, now_ms)
        log.warning("caller_paused", caller=caller)
        return (await self._store.paused_callers()).get(caller, now_ms)

    async def resume(self, caller: str, policy: CatchUpPolicy | None) -> ReplayJob:
        """Clear ``caller``'s flag and make the job that resumes its PAUSED triggers (run by
        ``ReplayJobRunner``: kick it). Answers after ``RESUME_SETTLE_MS``. Raises
        ``StoreError``."""
        await self._store.resume_caller(caller)
        log.warning("caller_resumed", caller=caller)
        await self._clock.sleep_ms(RESUME_SETTLE_MS)
        items: list[JobItem] = []
        cursor: ListCursor | None = None
        while True:
            page = await self._triggers.list_triggers(caller, status=Status.PAUSED,
                                                      limit=_PAGE, cursor=cursor)
            items += [JobItem(t.trigger_id, 0) for t in page.triggers]
            cursor = page.next_cursor
            if cursor is None:
                break
        now_ms = self._clock.now_ms()
        kind = policy.value if policy else _SERIES
        job = ReplayJob(f"{JOB_KIND}_{kind}_{ULID.from_timestamp(now_ms / 1000)}",
                        DeadLetterQuery(caller, 0, 0), now_ms, len(items))
        await self._store.create_job(job, items, ttl_s=self._s.retention_s)
        log.info("resume_job_created", job_id=job.job_id, caller=caller, total=job.total)
        return job

    async def resume_item(self, job: ReplayJob, item: JobItem) -> ItemState:
        """One item of a ``resume_`` job: resume the trigger (idempotent: one no longer
        paused is left as it is). FAILED when it cannot be (finished, gone)."""
        kind = job.job_id.split("_")[1]
        policy = None if kind == _SERIES else CatchUpPolicy(kind)
        caller = job.query.caller
        assert caller is not None
        try:
            await self._triggers.resume(caller, item.id, policy)
        except ApiError as e:
            log.info("resume_item_failed", job_id=job.job_id, id=item.id, error=e.message)
            return ItemState.FAILED
        return ItemState.DONE

    async def job(self, job_id: str) -> ReplayJob:
        """A resume job (its progress). Raises ``NotFound``."""
        job = (await self._store.get_job(job_id)
               if job_id.startswith(JOB_KIND + "_") and job_id.isascii() and len(job_id) < 80
               else None)
        if job is None:
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
