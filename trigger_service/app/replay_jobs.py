"""Runs bulk replay jobs (``app.job_rounds``: kicked by the POST that made one, resumed by
every API process's poll). The process runs ``poll`` every ``POLL_S``
(``trigger_service.__main__``).

Each item is replayed through ``DeadLetterService.replay`` with the death it was made for,
then marked. A crash between the two replays nothing twice: the next runner's replay finds
the letter replayed (``AlreadyReplayed``) and marks the item done.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import structlog

from trigger_service.app.dead_letters import DeadLetterService
from trigger_service.app.job_rounds import LEASE_MS, POLL_S, JobRounds
from trigger_service.config.settings import Settings
from trigger_service.core.dead_letters import ItemState, JobItem
from trigger_service.core.errors import AlreadyReplayed, ApiError
from trigger_service.core.ports import Clock
from trigger_service.core.ports.history import ReplayJobStore

__all__ = ["LEASE_MS", "POLL_S", "ReplayJobRunner"]

log = structlog.get_logger(__name__)


class ReplayJobRunner(JobRounds[JobItem]):
    kind = "replay"

    def __init__(self, settings: Settings, letters: DeadLetterService, jobs: ReplayJobStore,
                 clock: Clock, owner: str | None = None) -> None:
        super().__init__(clock, owner)
        self._s = settings
        self._letters = letters
        self._jobs = jobs

    async def _open_ids(self, turn: int | None) -> list[str]:
        return await self._jobs.open_jobs(turn)

    async def _claim(self, job_id: str, now_ms: int, lease_ms: int) -> bool:
        return await self._jobs.claim_job(job_id, self.owner, now_ms, lease_ms)

    def _items(self, job_id: str) -> AsyncIterator[list[JobItem]]:
        return self._jobs.job_items(job_id)

    async def _finish(self, job_id: str) -> None:
        await self._jobs.finish_job(job_id, ttl_s=self._s.retention_s)

    async def _one(self, job_id: str, item: JobItem) -> None:
        try:
            await self._letters.replay(None, item.id, dead_at_ms=item.dead_at_ms)
            state = ItemState.DONE
        except AlreadyReplayed:
            state = ItemState.DONE  # by an earlier round of this job, or by hand
        except ApiError as e:  # purged meanwhile, its trigger expired
            log.info("replay_item_failed", job_id=job_id, id=item.id, error=e.message)
            state = ItemState.FAILED
        await self._jobs.set_item_state(job_id, item, state, ttl_s=self._s.retention_s)
