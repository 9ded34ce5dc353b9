"""Jobs over a caller's triggers matching a filter: ``start`` fixes the items
(every unfinished trigger the filter matches, read through the filtered listing, at most
``MAX_JOB_ITEMS``), and ``TriggerJobRunner`` works on them as bulk replays are worked on
(``app.job_rounds``: kicked by the POST, resumed by every API process's poll).

Each item goes through the same use case as a single request (``TriggerService.cancel``,
``pause``, ``resume``), then is marked. A crash between the two does nothing twice: each of
them is idempotent (a cancelled trigger is answered cancelled, a paused one paused, one no
longer paused is left as it is), and the item is marked done. An operator's resume of a
paused caller (``app.caller_pause``) is such a job too, over the caller's PAUSED triggers
(``start_over``).

A backfill (``start_backfill``, ``app.backfills``) is a job over one series' past
occurrences: its items are the occurrences (index, scheduled instant), each fired by a copy
whose id its occurrence derives, so an item worked on twice makes one copy. Copy ``k`` is
due ``k`` paces after the first: the job's creation, or for a job taken over later, the
moment its runner reaches its first pending item (never a herd in the past).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import structlog
from ulid import ULID

from trigger_service.app.job_rounds import JobRounds
from trigger_service.app.triggers import TriggerService
from trigger_service.config.callers import Caller
from trigger_service.config.settings import Settings
from trigger_service.core.backfill import Backfill, item_id, parse_item_id
from trigger_service.core.dead_letters import ItemState
from trigger_service.core.errors import ApiError, InvalidRequest, NotFound, QuotaExceeded
from trigger_service.core.model import Status, Trigger
from trigger_service.core.ports import Clock
from trigger_service.core.ports.values import ListCursor
from trigger_service.core.tags import TriggerFilter
from trigger_service.core.time.catchup import CatchUpPolicy
from trigger_service.core.trigger_jobs import (
    MAX_JOB_ITEMS,
    MAX_OPEN_TRIGGER_JOBS,
    JobAction,
    TriggerJob,
    TriggerJobItem,
    TriggerJobStore,
)

log = structlog.get_logger(__name__)

_PAGE = 500  # triggers per listing page while the items are collected


class TriggerJobRunner(JobRounds[TriggerJobItem]):
    kind = "trigger"

    def __init__(self, settings: Settings, triggers: TriggerService, jobs: TriggerJobStore,
                 clock: Clock, owner: str | None = None) -> None:
        super().__init__(clock, owner)
        self._s = settings
        self._triggers = triggers
        self._jobs = jobs
        self._running: dict[str, TriggerJob] = {}  # the jobs this runner holds, as made
        self._paced_from: dict[str, int] = {}  # a backfill's first copy's due time, here

    # --- start, read ------------------------------------------------------------------
    async def start(self, caller: str, action: JobAction, flt: TriggerFilter,
                    policy: str | None = None) -> TriggerJob:
        """Make a job applying ``action`` to every unfinished trigger of ``caller``'s that
        ``flt`` matches now, and start it in the background. Raises ``InvalidRequest`` (a
        filter without a tag, label or recipient, more than ``MAX_JOB_ITEMS`` matches:
        narrow it), ``QuotaExceeded`` (``MAX_OPEN_TRIGGER_JOBS``
        of the caller's jobs unfinished) or ``StoreError``. Matching nothing makes a job
        with no items, finished at once."""
        if flt.driving_term is None:
            raise InvalidRequest("filter: give a tag, label or recipient", field="filter")
        open_jobs = await self._jobs.count_open_trigger_jobs(caller)
        if open_jobs >= MAX_OPEN_TRIGGER_JOBS:
            raise QuotaExceeded(f"{open_jobs} of your trigger jobs are unfinished, the most "
                                f"at once is {MAX_OPEN_TRIGGER_JOBS}; wait for one to finish")
        return await self.start_over(caller, action, flt, await self._matching(caller, flt),
                                     policy)

    async def start_over(self, caller: str, action: JobAction, flt: TriggerFilter,
                         ids: list[str], policy: str | None = None) -> TriggerJob:
        """Make and start a job applying ``action`` to the triggers ``ids`` of ``caller``
        (``flt``: what they were found by, shown with the job). No quota: ``start`` counts a
        caller's own jobs; an operator's (a paused caller's resume) are not the caller's.
        Raises ``StoreError``."""
        now_ms = self._clock.now_ms()
        job = TriggerJob(_new_job_id(now_ms), caller, action, flt, now_ms, len(ids),
                         policy=policy)
        await self._jobs.create_trigger_job(job, [TriggerJobItem(i) for i in ids],
                                            ttl_s=self._s.retention_s)
        log.info("trigger_job_created", job_id=job.job_id, caller=caller,
                 action=action.value, total=job.total)
        self.kick(job.job_id)
        return job

    async def start_backfill(self, caller: Caller, trigger_id: str, from_ms: int,
                             to_ms: int) -> TriggerJob:
        """Make a job firing the occurrences of ``caller``'s series ``trigger_id`` scheduled
        in ``[from_ms, to_ms)`` and before now, oldest first (``app.backfills``), and start
        it in the background. Raises what ``Backfills.plan`` raises (``InvalidRequest``,
        ``NotFound``, ``NotBackfillable``), ``QuotaExceeded`` (``MAX_OPEN_TRIGGER_JOBS``) or
        ``StoreError``. No occurrence in the range makes a job with no items, finished at
        once."""
        plan = await self._triggers.backfills.plan(caller, trigger_id, from_ms, to_ms)
        open_jobs = await self._jobs.count_open_trigger_jobs(caller.name)
        if open_jobs >= MAX_OPEN_TRIGGER_JOBS:
            raise QuotaExceeded(f"{open_jobs} of your trigger jobs are unfinished, the most "
                                f"at once is {MAX_OPEN_TRIGGER_JOBS}; wait for one to finish")
        now_ms = self._clock.now_ms()
        job = TriggerJob(_new_job_id(now_ms), caller.name, JobAction.BACKFILL, TriggerFilter(),
                         now_ms, len(plan.instants), backfill=plan.backfill)
        items = [TriggerJobItem(item_id(k, at_ms)) for k, at_ms in enumerate(plan.instants)]
        await self._jobs.create_trigger_job(job, items, ttl_s=self._s.retention_s)
        log.info("trigger_job_created", job_id=job.job_id, caller=caller.name,
                 action=job.action.value, total=job.total, trigger_id=trigger_id)
        self.kick(job.job_id)
        return job

    async def paused_ids(self, caller: str,
                         keep: Callable[[Trigger], bool] = lambda t: True) -> list[str]:
        """The ids of ``caller``'s PAUSED triggers that ``keep`` accepts, paged to the end
        (what a resume job is made of: an operator's caller resume, an endpoint's enable)."""
        ids: list[str] = []
        cursor: ListCursor | None = None
        while True:
            page = await self._triggers.list_triggers(caller, status=Status.PAUSED,
                                                      limit=_PAGE, cursor=cursor)
            ids += [t.trigger_id for t in page.triggers if keep(t)]
            cursor = page.next_cursor
            if cursor is None:
                return ids

    async def _matching(self, caller: str, flt: TriggerFilter) -> list[str]:
        ids: list[str] = []
        cursor: ListCursor | None = None
        while True:
            page = await self._triggers.list_triggers(caller, status=flt.status, limit=_PAGE,
                                                      cursor=cursor, flt=flt)
            ids += [t.trigger_id for t in page.triggers if _unfinished(t)]
            if len(ids) > MAX_JOB_ITEMS:
                raise InvalidRequest(f"filter: matches more than {MAX_JOB_ITEMS} unfinished "
                                     "triggers; narrow it", field="filter")
            if page.next_cursor is None:
                return sorted(set(ids))
            cursor = page.next_cursor

    async def get(self, caller: str | None, job_id: str) -> TriggerJob:
        """The caller's job with its progress (None: an operator's read, any caller's);
        another caller's is ``NotFound``."""
        job = (await self._jobs.get_trigger_job(job_id)
               if job_id.isascii() and len(job_id) < 64 else None)
        if job is None or (caller is not None and job.caller != caller):
            raise NotFound(f"no trigger job {job_id}")
        return job

    # --- the rounds (``JobRounds``) --------------------------------------------------------
    async def _open_ids(self, turn: int | None) -> list[str]:
        return await self._jobs.open_trigger_jobs(turn)

    async def _claim(self, job_id: str, now_ms: int, lease_ms: int) -> bool:
        if not await self._jobs.claim_trigger_job(job_id, self.owner, now_ms, lease_ms):
            return False
        if job_id not in self._running:
            job = await self._jobs.get_trigger_job(job_id)
            if job is None:
                return False  # expired meanwhile
            self._running[job_id] = job
        return True

    def _items(self, job_id: str) -> AsyncIterator[list[TriggerJobItem]]:
        return self._jobs.trigger_job_items(job_id)

    async def _finish(self, job_id: str) -> None:
        await self._jobs.finish_trigger_job(job_id, ttl_s=self._s.retention_s)
        self._running.pop(job_id, None)
        self._paced_from.pop(job_id, None)

    async def _one(self, job_id: str, item: TriggerJobItem) -> None:
        job = self._running[job_id]
        try:
            await self._apply(job, item.id)
            state = ItemState.DONE
        except ApiError as e:  # finished or in flight meanwhile, expired
            log.info("trigger_job_item_failed", job_id=job_id, id=item.id, error=e.message)
            state = ItemState.FAILED
        await self._jobs.set_trigger_item_state(job_id, item, state,
                                                ttl_s=self._s.retention_s)

    async def _apply(self, job: TriggerJob, trigger_id: str) -> None:
        """The job's action on one trigger (``resume``: by the job's policy, or each
        series' own; ``backfill``: on one occurrence, its item)."""
        if job.backfill is not None:
            await self._backfill(job, job.backfill, trigger_id)
        elif job.action is JobAction.CANCEL:
            await self._triggers.cancel(job.caller, trigger_id)
        elif job.action is JobAction.PAUSE:
            await self._triggers.pause(job.caller, trigger_id)
        else:
            await self._triggers.resume(job.caller, trigger_id,
                                        CatchUpPolicy(job.policy) if job.policy else None)


    async def _backfill(self, job: TriggerJob, bf: Backfill, item: str) -> None:
        """Fire the occurrence ``item`` at its place in the job's pace. The first item this
        runner reaches fixes where the pace starts (items are worked on in order, a chunk's
        first one first): a job taken over after its runner died goes on from now, not
        from its creation."""
        index, at_ms = parse_item_id(item)
        start_ms = self._paced_from.setdefault(
            job.job_id, max(job.created_at_ms, self._clock.now_ms() - index * bf.pace_ms))
        await self._triggers.backfills.fire(job.caller, bf, at_ms,
                                            start_ms + index * bf.pace_ms)


def _new_job_id(now_ms: int) -> str:
    return "tjob_" + str(ULID.from_timestamp(now_ms / 1000))


def _unfinished(t: Trigger) -> bool:
    return not t.status.terminal
