"""Runs bulk replay jobs: the API process that made a job starts it at once, and every API
process looks for unfinished jobs every ``POLL_S`` (a job whose runner died is taken over
when its lease expires; an LWT decides who runs it). The process runs ``poll`` every
``POLL_S`` (``trigger_service.__main__``), which reads one of the store's buckets of
unfinished jobs a round (a bounded read; a dead runner's job is found within one cycle of
them); ``run_once`` reads them all.

Each item is replayed through ``DeadLetterService.replay`` with the death it was made for,
then marked. A crash between the two replays nothing twice: the next runner's replay finds
the letter replayed (``AlreadyReplayed``) and marks the item done.

Other kinds of job share the store, the leases and this runner: a job's kind is its id's
prefix (up to the first ``_``), and ``kinds`` maps a prefix to what is done with each item
(``ItemWork``: it answers the item's new state and must be idempotent, since a crash repeats
it). ``resume_`` jobs resume a paused caller's triggers (``app.caller_pause``); ``job_``
(or any prefix not in ``kinds``) is a bulk replay.
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Awaitable, Callable, Mapping

import structlog

from trigger_service.app.dead_letters import DeadLetterService
from trigger_service.config.settings import Settings
from trigger_service.core.dead_letters import ItemState, JobItem, ReplayJob
from trigger_service.core.errors import AdapterError, AlreadyReplayed, ApiError
from trigger_service.core.history_ports import ReplayJobStore
from trigger_service.core.ports import Clock

log = structlog.get_logger(__name__)

POLL_S = 2.0
LEASE_MS = 30_000
_RENEW_EVERY = 20  # items between lease renewals (far inside the lease)
_PARALLEL = 8
# What a kind of job does with one item (see the module's docstring).
ItemWork = Callable[[ReplayJob, JobItem], Awaitable[ItemState]]


class ReplayJobRunner:
    def __init__(self, settings: Settings, letters: DeadLetterService, jobs: ReplayJobStore,
                 clock: Clock, owner: str | None = None,
                 kinds: Mapping[str, ItemWork] | None = None) -> None:
        self._s = settings
        self._kinds = dict(kinds or {})
        self._letters = letters
        self._jobs = jobs
        self._clock = clock
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}:{id(self):x}"
        self._kicked: set[asyncio.Task[int]] = set()
        self._lock = asyncio.Lock()
        self._turn = -1

    def kick(self, job_id: str) -> None:
        """Start running the job now, in the background (after it was made)."""
        task = asyncio.ensure_future(self._quiet_round(job_id))
        self._kicked.add(task)
        task.add_done_callback(self._kicked.discard)

    async def _quiet_round(self, job_id: str) -> int:
        try:
            return await self._run([job_id])
        except AdapterError as e:
            log.warning("replay_round_failed", error=str(e))  # the poll retries
            return 0

    def cancel(self) -> None:
        """Stop the rounds kicked in the background (the process is stopping; a job left
        unfinished is resumed by the next runner once its lease expires)."""
        for task in list(self._kicked):
            task.cancel()

    async def run_once(self) -> int:
        """Work on every unfinished job this runner can lease; items replayed."""
        return await self._run(await self._jobs.open_jobs())

    async def poll(self) -> int:
        """``run_once`` over the next bucket of unfinished jobs only; items replayed."""
        self._turn += 1
        return await self._run(await self._jobs.open_jobs(self._turn))

    async def _run(self, job_ids: list[str]) -> int:
        async with self._lock:  # one round at a time per process
            replayed = 0
            for job_id in job_ids:
                if await self._jobs.claim_job(job_id, self.owner, self._clock.now_ms(),
                                              LEASE_MS):
                    replayed += await self._work(job_id)
            return replayed

    async def _work(self, job_id: str) -> int:
        """Replay the job's pending items, a page of items at a time (a job's items are never
        all held at once), renewing the lease every ``_RENEW_EVERY`` items; finish the job
        unless the lease was lost. Items worked on."""
        done = since_renewal = 0
        job = await self._jobs.get_job(job_id)
        if job is None:
            return 0  # expired meanwhile
        async for items in self._jobs.job_items(job_id):
            pending = [i for i in items if i.state is ItemState.PENDING]
            for start in range(0, len(pending), _PARALLEL):
                if since_renewal >= _RENEW_EVERY:
                    if not await self._jobs.claim_job(job_id, self.owner,
                                                      self._clock.now_ms(), LEASE_MS):
                        log.warning("replay_job_lease_lost", job_id=job_id)
                        return done
                    since_renewal = 0
                chunk = pending[start:start + _PARALLEL]
                await asyncio.gather(*(self._one(job, item) for item in chunk))
                done += len(chunk)
                since_renewal += len(chunk)
        await self._jobs.finish_job(job_id, ttl_s=self._s.retention_s)
        log.info("replay_job_finished", job_id=job_id, items=done)
        return done

    def add_kind(self, prefix: str, work: ItemWork) -> None:
        """Run the items of jobs whose id starts with ``prefix`` + ``_`` with ``work``."""
        self._kinds[prefix] = work

    async def _one(self, job: ReplayJob, item: JobItem) -> None:
        job_id = job.job_id
        work = self._kinds.get(job_id.partition("_")[0])
        if work is not None:
            state = await work(job, item)
            await self._jobs.set_item_state(job_id, item, state, ttl_s=self._s.retention_s)
            return
        try:
            await self._letters.replay(None, item.id, dead_at_ms=item.dead_at_ms)
            state = ItemState.DONE
        except AlreadyReplayed:
            state = ItemState.DONE  # by an earlier round of this job, or by hand
        except ApiError as e:  # purged meanwhile, its trigger expired
            log.info("replay_item_failed", job_id=job_id, id=item.id, error=e.message)
            state = ItemState.FAILED
        await self._jobs.set_item_state(job_id, item, state, ttl_s=self._s.retention_s)
