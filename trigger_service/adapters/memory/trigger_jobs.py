"""In-memory ``TriggerJobStore`` for unit tests: the contract of
``adapters.cassandra.trigger_jobs`` (tests/contract runs both). Mixed into ``MemoryStore``,
which provides ``_enter`` (call counting and injected failures) and ``page_size``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import replace

from trigger_service.adapters import schema as s
from trigger_service.core.dead_letters import ItemState, JobStatus
from trigger_service.core.trigger_jobs import TriggerJob, TriggerJobItem


class MemoryTriggerJobs:
    trigger_jobs: dict[str, TriggerJob]
    trigger_job_leases: dict[str, tuple[str, int]]
    page_size: int  # provided by MemoryStore

    def _init_trigger_jobs(self) -> None:
        self.trigger_jobs = {}
        self._job_items: dict[str, dict[str, TriggerJobItem]] = {}
        self.trigger_job_leases = {}

    def _enter(self, name: str) -> None:  # provided by MemoryStore
        raise NotImplementedError

    async def create_trigger_job(self, job: TriggerJob, items: Sequence[TriggerJobItem],
                                 ttl_s: int) -> None:
        self._enter("create_trigger_job")
        self._job_items[job.job_id] = {i.id: i for i in items}
        self.trigger_jobs[job.job_id] = job

    async def get_trigger_job(self, job_id: str) -> TriggerJob | None:
        self._enter("get_trigger_job")
        job = self.trigger_jobs.get(job_id)
        if job is None:
            return None
        states = [i.state for i in self._job_items.get(job_id, {}).values()]
        return replace(job, done=states.count(ItemState.DONE),
                       failed=states.count(ItemState.FAILED))

    async def trigger_job_items(self, job_id: str) -> AsyncIterator[list[TriggerJobItem]]:
        self._enter("trigger_job_items")
        after = ""  # as Cassandra pages: each page read when asked for
        while page := sorted((i for i in self._job_items.get(job_id, {}).values()
                              if i.id > after), key=lambda i: i.id)[:self.page_size]:
            yield page
            after = page[-1].id

    async def set_trigger_item_state(self, job_id: str, item: TriggerJobItem,
                                     state: ItemState, ttl_s: int) -> None:
        self._enter("set_trigger_item_state")
        self._job_items[job_id][item.id] = replace(item, state=state)

    async def open_trigger_jobs(self, turn: int | None = None) -> list[str]:
        self._enter("open_trigger_jobs")
        keys = s.REPLAY_OPEN_KEYS[:-1]  # the buckets (no legacy key here)
        return sorted(j.job_id for j in self.trigger_jobs.values()
                      if j.status is JobStatus.RUNNING
                      and (turn is None
                           or s.replay_open_key(j.job_id) == keys[turn % len(keys)]))

    async def count_open_trigger_jobs(self, caller: str) -> int:
        self._enter("count_open_trigger_jobs")
        return sum(1 for j in self.trigger_jobs.values()
                   if j.status is JobStatus.RUNNING and j.caller == caller)

    async def claim_trigger_job(self, job_id: str, owner: str, now_ms: int,
                                lease_ms: int) -> bool:
        self._enter("claim_trigger_job")
        holder, until_ms = self.trigger_job_leases.get(job_id, ("", 0))
        if holder not in ("", owner) and until_ms > now_ms:
            return False
        self.trigger_job_leases[job_id] = (owner, now_ms + lease_ms)
        return True

    async def finish_trigger_job(self, job_id: str, ttl_s: int) -> None:
        self._enter("finish_trigger_job")
        self.trigger_jobs[job_id] = replace(self.trigger_jobs[job_id], status=JobStatus.DONE)
