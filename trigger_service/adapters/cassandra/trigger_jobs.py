"""``TriggerJobStore`` on Cassandra (``trigger_jobs``, ``trigger_job_items``,
``trigger_jobs_open``): the replay jobs' shape over triggers. A backfill job keeps its
series, range and pace in the filter's column and its occurrences as its items' ids. A part
of ``CassandraStore``, on its statements."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import replace
from typing import Any

from trigger_service.adapters import schema as s
from trigger_service.adapters.cassandra import driver
from trigger_service.adapters.cassandra.job_leases import claim_lease
from trigger_service.core import backfill
from trigger_service.core.dead_letters import ItemState, JobStatus
from trigger_service.core.tags import TriggerFilter, parse_filter
from trigger_service.core.trigger_jobs import JobAction, TriggerJob, TriggerJobItem

_OPEN_KEYS = s.REPLAY_OPEN_KEYS[:-1]  # the buckets (these jobs have no legacy key)


def trigger_job_queries(keyspace: str) -> dict[str, str]:
    """name → CQL of the trigger jobs' tables."""
    jobs, items, open_ = (f"{keyspace}.{n}" for n in (
        s.TABLE_TRIGGER_JOBS, s.TABLE_TRIGGER_JOB_ITEMS, s.TABLE_TRIGGER_JOBS_OPEN))
    job_cols = (s.COL_JOB_ID, s.COL_CALLER, s.COL_ACTION, s.COL_FILTER, s.COL_POLICY,
                s.COL_CREATED_AT_MS, s.COL_TOTAL, s.COL_STATUS)
    lease = f"UPDATE {jobs} USING TTL ? SET {s.COL_OWNER} = ?, {s.COL_LEASE_UNTIL_MS} = ? " \
        f"WHERE {s.COL_JOB_ID} = ?"
    return {
        "tjob_put": f"INSERT INTO {jobs} ({', '.join(job_cols)}) "
        f"VALUES ({', '.join('?' for _ in job_cols)}) USING TTL ?",
        "tjob_get": f"SELECT {', '.join(job_cols[1:])} FROM {jobs} WHERE {s.COL_JOB_ID} = ?",
        "tjob_claim": f"{lease} IF {s.COL_OWNER} = ?",
        "tjob_claim_free": f"{lease} IF {s.COL_LEASE_UNTIL_MS} < ?",
        "tjob_claim_new": f"{lease} IF {s.COL_OWNER} = null",
        "tjob_done": f"UPDATE {jobs} USING TTL ? SET {s.COL_STATUS} = ? "
        f"WHERE {s.COL_JOB_ID} = ?",
        "tjob_item_put": f"INSERT INTO {items} ({s.COL_JOB_ID}, {s.COL_TRIGGER_ID}, "
        f"{s.COL_STATE}) VALUES (?, ?, ?) USING TTL ?",
        "tjob_items": f"SELECT {s.COL_TRIGGER_ID}, {s.COL_STATE} FROM {items} "
        f"WHERE {s.COL_JOB_ID} = ?",
        "tjob_open_put": f"INSERT INTO {open_} ({s.COL_K}, {s.COL_JOB_ID}) VALUES (?, ?) "
        "USING TTL ?",
        "tjob_open_delete": f"DELETE FROM {open_} WHERE {s.COL_K} = ? AND {s.COL_JOB_ID} = ?",
        "tjob_open_list": f"SELECT {s.COL_JOB_ID} FROM {open_} WHERE {s.COL_K} = ?",
    }


def _job(job_id: str, r: dict[str, Any]) -> TriggerJob:
    action = JobAction(r[s.COL_ACTION])
    # A backfill's subject shares the filter's column (``core.backfill.Backfill.dumps``).
    bf = backfill.loads(r[s.COL_FILTER]) if action is JobAction.BACKFILL else None
    flt: TriggerFilter = TriggerFilter() if bf else parse_filter(json.loads(r[s.COL_FILTER]))
    return TriggerJob(job_id, r[s.COL_CALLER], action, flt, r[s.COL_CREATED_AT_MS],
                      r[s.COL_TOTAL], JobStatus(r[s.COL_STATUS]), policy=r[s.COL_POLICY],
                      backfill=bf)


def _subject(job: TriggerJob) -> str:
    """The filter column: the filter's JSON, or a backfill's series, range and pace."""
    return job.backfill.dumps() if job.backfill else json.dumps(job.filter.to_json())


class CassandraTriggerJobs:
    def __init__(self, cql: driver.Statements) -> None:
        """On the store's statements (``CassandraStore.statements``)."""
        self._cql = cql

    async def create_trigger_job(self, job: TriggerJob, items: Sequence[TriggerJobItem],
                                 ttl_s: int) -> None:
        # A job's items share its partition.
        await driver.write_in_batches(self._cql.run_unlogged, [
            ("tjob_item_put", [job.job_id, i.id, i.state.value, ttl_s]) for i in items])
        await self._cql.run("tjob_put", [
            job.job_id, job.caller, job.action.value, _subject(job),
            job.policy, job.created_at_ms, job.total, job.status.value, ttl_s])
        await asyncio.gather(*(self._cql.run("tjob_open_put", [key, job.job_id, ttl_s])
                               for key in _keys(job.job_id, job.caller)))

    async def get_trigger_job(self, job_id: str) -> TriggerJob | None:
        rows = await self._cql.run("tjob_get", [job_id])
        if not rows or rows[0][s.COL_FILTER] is None:
            return None
        done = failed = 0
        async for items in self.trigger_job_items(job_id):  # counted a page at a time
            done += sum(i.state is ItemState.DONE for i in items)
            failed += sum(i.state is ItemState.FAILED for i in items)
        job = _job(job_id, rows[0])
        return replace(job, done=done, failed=failed)

    async def trigger_job_items(self, job_id: str) -> AsyncIterator[list[TriggerJobItem]]:
        async for rows in self._cql.pages("tjob_items", [job_id]):
            yield [TriggerJobItem(r[s.COL_TRIGGER_ID], ItemState(r[s.COL_STATE]))
                   for r in rows]

    async def set_trigger_item_state(self, job_id: str, item: TriggerJobItem,
                                     state: ItemState, ttl_s: int) -> None:
        await self._cql.run("tjob_item_put", [job_id, item.id, state.value, ttl_s])

    async def open_trigger_jobs(self, turn: int | None = None) -> list[str]:
        keys = _OPEN_KEYS if turn is None else (_OPEN_KEYS[turn % len(_OPEN_KEYS)],)
        found = await asyncio.gather(*(self._cql.run("tjob_open_list", [k]) for k in keys))
        return sorted(r[s.COL_JOB_ID] for rows in found for r in rows)

    async def count_open_trigger_jobs(self, caller: str) -> int:
        return len(await self._cql.run("tjob_open_list", [s.replay_caller_key(caller)]))

    async def claim_trigger_job(self, job_id: str, owner: str, now_ms: int,
                                lease_ms: int) -> bool:
        return await claim_lease(self._cql.run, "tjob", job_id, owner, now_ms, lease_ms)

    async def finish_trigger_job(self, job_id: str, ttl_s: int) -> None:
        rows = await self._cql.run("tjob_get", [job_id])  # whose it is: its caller key
        await self._cql.run("tjob_done", [ttl_s, JobStatus.DONE.value, job_id])
        caller = rows[0][s.COL_CALLER] if rows else None
        await asyncio.gather(*(self._cql.run("tjob_open_delete", [key, job_id])
                               for key in _keys(job_id, caller)))


def _keys(job_id: str, caller: str | None) -> list[str]:
    """The open-job rows of a job: its bucket (polled) and its caller's (counted)."""
    return [s.replay_open_key(job_id)] + ([s.replay_caller_key(caller)] if caller else [])
