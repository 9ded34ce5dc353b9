"""Jobs over a caller's triggers matching a filter, and backfills of one series: what a job
is, its items and the store port. A job's items (the matching trigger ids; a backfill's
occurrences, ``core.backfill.item_id``) are fixed when it is made, each worked on at most
once to a final state, so a job resumed by another process after its runner died does
nothing twice. Pure: no I/O."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from trigger_service.core.backfill import Backfill
from trigger_service.core.dead_letters import ItemState, JobStatus
from trigger_service.core.tags import TriggerFilter

MAX_JOB_ITEMS = 10_000  # triggers one job works on (more: narrow the filter)
MAX_OPEN_TRIGGER_JOBS = 10  # unfinished jobs per caller


class JobAction(StrEnum):
    """What a job does to each matching trigger: ``TriggerService.cancel``, ``pause`` or
    ``resume`` (with the job's policy); ``backfill``: fires each past occurrence of one
    series (``app.backfills``; no filter, its items are the occurrences)."""

    CANCEL = "cancel"
    PAUSE = "pause"
    RESUME = "resume"
    BACKFILL = "backfill"


@dataclass(frozen=True, slots=True)
class TriggerJob:
    job_id: str
    caller: str
    action: JobAction
    filter: TriggerFilter
    created_at_ms: int
    total: int  # triggers matched (the items)
    status: JobStatus = JobStatus.RUNNING
    done: int = 0
    failed: int = 0
    policy: str | None = None  # ``resume``'s policy: what came due while paused
    backfill: Backfill | None = None  # ``backfill``'s series, range and pace (filter empty)


@dataclass(frozen=True, slots=True)
class TriggerJobItem:
    id: str  # the trigger's (a backfill's: ``core.backfill.item_id``)
    state: ItemState = ItemState.PENDING


class TriggerJobStore(Protocol):
    """Jobs over triggers: the job, its items (fixed at creation), who runs it. Shaped as
    ``ReplayJobStore``; every method may raise ``StoreError``."""

    async def create_trigger_job(self, job: TriggerJob, items: Sequence[TriggerJobItem],
                                 ttl_s: int) -> None:
        """Items first, the job last (a job row always has all its items)."""
        ...

    async def get_trigger_job(self, job_id: str) -> TriggerJob | None:
        """The job with ``done``/``failed`` counted from its items."""
        ...

    def trigger_job_items(self, job_id: str) -> AsyncIterator[list[TriggerJobItem]]:
        """The job's items in id order, a page at a time (read when asked for)."""
        ...

    async def set_trigger_item_state(self, job_id: str, item: TriggerJobItem,
                                     state: ItemState, ttl_s: int) -> None: ...

    async def open_trigger_jobs(self, turn: int | None = None) -> list[str]:
        """Ids of the unfinished jobs: all (``turn`` None) or one bucket's (the ``turn``-th,
        modulo their number)."""
        ...

    async def count_open_trigger_jobs(self, caller: str) -> int: ...

    async def claim_trigger_job(self, job_id: str, owner: str, now_ms: int,
                                lease_ms: int) -> bool:
        """Take (or renew) the job's lease: true if ``owner`` now runs it."""
        ...

    async def finish_trigger_job(self, job_id: str, ttl_s: int) -> None:
        """Mark the job done and drop it from the open jobs (idempotent)."""
        ...
