"""In-memory ``AttemptLog``, ``DeadLetterIndex`` and ``ReplayJobStore`` for unit tests: the
same contract as ``adapters.cassandra.dead_letters`` (tests/contract runs both). Mixed into
``MemoryStore``, which provides ``_enter`` (call counting and injected failures)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import replace

from trigger_service.adapters import schema as s
from trigger_service.core.dead_letters import (
    WEBHOOK,
    Attempt,
    DeadLetter,
    DeadLetterCursor,
    DeadLetterPage,
    DeadLetterQuery,
    DeadLetterState,
    ItemState,
    JobItem,
    JobStatus,
    ReplayJob,
    day_of,
)
from trigger_service.core.recent_attempts import ring_slot


class MemoryDeadLetters:
    attempt_log: dict[tuple[str, str], list[Attempt]]
    recent_rings: dict[str, dict[int, Attempt]]  # trigger id → slot → attempt
    dead_letters: dict[str, DeadLetter]
    jobs: dict[str, ReplayJob]
    items: dict[str, dict[str, JobItem]]
    job_leases: dict[str, tuple[str, int]]
    page_size: int  # provided by MemoryStore

    def _init_dead_letters(self) -> None:
        self.attempt_log = {}
        self.recent_rings = {}
        self.dead_letters = {}
        self.jobs = {}
        self.items = {}
        self.job_leases = {}

    def _enter(self, name: str) -> None:  # provided by MemoryStore
        raise NotImplementedError

    # --- AttemptLog --------------------------------------------------------------------
    async def record_attempt(self, attempt: Attempt, ttl_s: int, *, kept: int,
                             patient: bool = False) -> None:
        self._enter("record_attempt")
        if attempt.outcome is not None:
            # As the table keeps it: what the ring's columns hold.
            self.recent_rings.setdefault(attempt.trigger_id, {})[
                ring_slot(attempt.number, kept)] = replace(
                    attempt, response_excerpt=None, dispatcher="", number=0)
        # As the table keeps it: no outcome, channel nor number (those are the ring's).
        line = replace(attempt, outcome=None, channel=WEBHOOK, number=0)
        log = self.attempt_log.setdefault((attempt.trigger_id, attempt.occurrence_id), [])
        log[:] = [a for a in log if (a.started_at_ms, a.attempt)
                  != (attempt.started_at_ms, attempt.attempt)] + [line]
        log.sort(key=lambda a: (a.started_at_ms, a.attempt))

    async def attempts(self, trigger_id: str, occurrence_id: str) -> list[Attempt]:
        self._enter("attempts")
        return list(self.attempt_log.get((trigger_id, occurrence_id), []))

    async def recent_attempts(self, trigger_id: str) -> list[Attempt]:
        self._enter("recent_attempts")
        return list(self.recent_rings.get(trigger_id, {}).values())

    # --- DeadLetterIndex ---------------------------------------------------------------
    async def put_dead_letter(self, d: DeadLetter, ttl_s: int) -> None:
        self._enter("put_dead_letter")
        self.dead_letters[d.id] = replace(d, state=DeadLetterState.OPEN, resolved_at_ms=None)

    async def put_dead_letter_if_new(self, d: DeadLetter, ttl_s: int) -> bool:
        if await self.get_dead_letter(d.id) is not None:
            return False
        await self.put_dead_letter(d, ttl_s)
        return True

    async def get_dead_letter(self, dead_letter_id: str) -> DeadLetter | None:
        self._enter("get_dead_letter")
        return self.dead_letters.get(dead_letter_id)

    async def resolve_dead_letter(self, d: DeadLetter, ttl_s: int) -> None:
        self._enter("resolve_dead_letter")
        self.dead_letters[d.id] = d

    async def list_dead_letters(self, q: DeadLetterQuery, cursor: DeadLetterCursor | None,
                                limit: int) -> DeadLetterPage:
        self._enter("list_dead_letters")
        found = sorted((d for d in self.dead_letters.values()
                        if d.state is DeadLetterState.OPEN and q.matches(d)),
                       key=lambda d: (d.dead_at_ms, d.id), reverse=True)
        if cursor is not None:
            found = [d for d in found if (d.dead_at_ms, d.id) < (cursor[1], cursor[2])]
        page = found[:limit]
        more = len(found) > limit
        last = page[-1] if page else None
        return DeadLetterPage(page, (day_of(last.dead_at_ms), last.dead_at_ms, last.id)
                              if more and last else None)

    # --- ReplayJobStore ----------------------------------------------------------------
    async def create_job(self, job: ReplayJob, items: Sequence[JobItem], ttl_s: int) -> None:
        self._enter("create_job")
        self.items[job.job_id] = {i.id: i for i in items}
        self.jobs[job.job_id] = job

    async def get_job(self, job_id: str) -> ReplayJob | None:
        self._enter("get_job")
        job = self.jobs.get(job_id)
        if job is None:
            return None
        states = [i.state for i in self.items.get(job_id, {}).values()]
        return replace(job, done=states.count(ItemState.DONE),
                       failed=states.count(ItemState.FAILED))

    async def job_items(self, job_id: str) -> AsyncIterator[list[JobItem]]:
        self._enter("job_items")
        # As Cassandra pages: each page read when asked for, after the last id yielded.
        after = ""
        while page := sorted((i for i in self.items.get(job_id, {}).values() if i.id > after),
                             key=lambda i: i.id)[:self.page_size]:
            yield page
            after = page[-1].id

    async def set_item_state(self, job_id: str, item: JobItem, state: ItemState,
                             ttl_s: int) -> None:
        self._enter("set_item_state")
        self.items[job_id][item.id] = replace(item, state=state)

    async def open_jobs(self, turn: int | None = None) -> list[str]:
        self._enter("open_jobs")
        # The same buckets as Cassandra's (the last, the legacy key, is empty here).
        keys = s.REPLAY_OPEN_KEYS
        return sorted(j.job_id for j in self.jobs.values() if j.status is JobStatus.RUNNING
                      and (turn is None
                           or s.replay_open_key(j.job_id) == keys[turn % len(keys)]))

    async def count_open_jobs(self, caller: str | None) -> int:
        self._enter("count_open_jobs")
        return sum(1 for j in self.jobs.values()
                   if j.status is JobStatus.RUNNING and j.query.caller == caller)

    async def claim_job(self, job_id: str, owner: str, now_ms: int, lease_ms: int) -> bool:
        self._enter("claim_job")
        holder, until_ms = self.job_leases.get(job_id, ("", 0))
        if holder not in ("", owner) and until_ms > now_ms:
            return False
        self.job_leases[job_id] = (owner, now_ms + lease_ms)
        return True

    async def finish_job(self, job_id: str, ttl_s: int) -> None:
        self._enter("finish_job")
        self.jobs[job_id] = replace(self.jobs[job_id], status=JobStatus.DONE)
