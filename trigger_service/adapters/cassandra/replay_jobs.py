"""``ReplayJobStore`` on Cassandra (``replay_jobs``, ``replay_items``, ``replay_open``;
``infra/cql/008_dead_letters.cql``): bulk replays of dead letters, a part of
``CassandraStore`` on its statements. A job's lease is ``.job_leases``'."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence

from trigger_service.adapters import schema as s
from trigger_service.adapters.cassandra import driver
from trigger_service.adapters.cassandra.dead_letters import insert
from trigger_service.adapters.cassandra.job_leases import JOB_TTL_S, claim_lease
from trigger_service.core.dead_letters import (
    DeadLetterQuery,
    DeadLetterReason,
    ItemState,
    JobItem,
    JobStatus,
    ReplayJob,
)


def replay_job_queries(keyspace: str) -> dict[str, str]:
    """name → CQL text for the tables of this module."""
    jobs, items, open_ = (f"{keyspace}.{n}" for n in (
        s.TABLE_REPLAY_JOBS, s.TABLE_REPLAY_ITEMS, s.TABLE_REPLAY_OPEN))
    return {
        "job_put": insert(jobs, (s.COL_JOB_ID, s.COL_QUERY, s.COL_CREATED_AT_MS, s.COL_TOTAL,
                                 s.COL_STATUS)),
        "job_get": f"SELECT {s.COL_QUERY}, {s.COL_CREATED_AT_MS}, {s.COL_TOTAL}, "
        f"{s.COL_STATUS} FROM {jobs} WHERE {s.COL_JOB_ID} = ?",
        "job_claim": f"UPDATE {jobs} USING TTL ? SET {s.COL_OWNER} = ?, "
        f"{s.COL_LEASE_UNTIL_MS} = ? WHERE {s.COL_JOB_ID} = ? IF {s.COL_OWNER} = ?",
        "job_claim_free": f"UPDATE {jobs} USING TTL ? SET {s.COL_OWNER} = ?, "
        f"{s.COL_LEASE_UNTIL_MS} = ? WHERE {s.COL_JOB_ID} = ? IF {s.COL_LEASE_UNTIL_MS} < ?",
        "job_claim_new": f"UPDATE {jobs} USING TTL ? SET {s.COL_OWNER} = ?, "
        f"{s.COL_LEASE_UNTIL_MS} = ? WHERE {s.COL_JOB_ID} = ? IF {s.COL_OWNER} = null",
        "job_done": f"UPDATE {jobs} USING TTL ? SET {s.COL_STATUS} = ? "
        f"WHERE {s.COL_JOB_ID} = ?",
        "item_put": insert(items, (s.COL_JOB_ID, s.COL_ID, s.COL_DEAD_AT_MS, s.COL_STATE)),
        "items": f"SELECT {s.COL_ID}, {s.COL_DEAD_AT_MS}, {s.COL_STATE} FROM {items} "
        f"WHERE {s.COL_JOB_ID} = ?",
        "open_put": insert(open_, (s.COL_K, s.COL_JOB_ID)),
        "open_delete": f"DELETE FROM {open_} WHERE {s.COL_K} = ? AND {s.COL_JOB_ID} = ?",
        "open_list": f"SELECT {s.COL_JOB_ID} FROM {open_} WHERE {s.COL_K} = ?",
    }


def encode_query(q: DeadLetterQuery) -> str:
    return json.dumps({"caller": q.caller, "since": q.since_ms, "until": q.until_ms,
                       "reason": q.reason.value if q.reason else None,
                       "callbackPrefix": q.callback_prefix})


def decode_query(text: str) -> DeadLetterQuery:
    d = json.loads(text)
    return DeadLetterQuery(d["caller"], d["since"], d["until"],
                           DeadLetterReason(d["reason"]) if d["reason"] else None,
                           d["callbackPrefix"])


class CassandraReplayJobs:
    def __init__(self, cql: driver.Statements) -> None:
        """On the store's statements (``CassandraStore.statements``)."""
        self._cql = cql

    async def create_job(self, job: ReplayJob, items: Sequence[JobItem], ttl_s: int) -> None:
        # A job's items share its partition.
        await driver.write_in_batches(self._cql.run_unlogged, [
            ("item_put", [job.job_id, i.id, i.dead_at_ms, i.state.value, ttl_s])
            for i in items])
        await self._cql.run("job_put", [job.job_id, encode_query(job.query), job.created_at_ms,
                                        job.total, job.status.value, ttl_s])
        await self._open(job.job_id, job.query.caller, ttl_s)

    async def _open(self, job_id: str, caller: str | None, ttl_s: int) -> None:
        await asyncio.gather(*(self._cql.run("open_put", [key, job_id, ttl_s]) for key in (
            s.replay_open_key(job_id), s.replay_caller_key(caller))))

    async def get_job(self, job_id: str) -> ReplayJob | None:
        rows = await self._cql.run("job_get", [job_id])
        if not rows or rows[0][s.COL_QUERY] is None:
            return None
        r = rows[0]
        done = failed = 0
        async for items in self.job_items(job_id):  # counted a page at a time
            done += sum(i.state is ItemState.DONE for i in items)
            failed += sum(i.state is ItemState.FAILED for i in items)
        return ReplayJob(job_id, decode_query(r[s.COL_QUERY]), r[s.COL_CREATED_AT_MS],
                         r[s.COL_TOTAL], JobStatus(r[s.COL_STATUS]), done, failed)

    async def job_items(self, job_id: str) -> AsyncIterator[list[JobItem]]:
        async for rows in self._cql.pages("items", [job_id]):
            yield [JobItem(r[s.COL_ID], r[s.COL_DEAD_AT_MS], ItemState(r[s.COL_STATE]))
                   for r in rows]

    async def set_item_state(self, job_id: str, item: JobItem, state: ItemState,
                             ttl_s: int) -> None:
        await self._cql.run("item_put", [job_id, item.id, item.dead_at_ms, state.value, ttl_s])

    async def open_jobs(self, turn: int | None = None) -> list[str]:
        keys = s.REPLAY_OPEN_KEYS if turn is None else (
            s.REPLAY_OPEN_KEYS[turn % len(s.REPLAY_OPEN_KEYS)],)
        found = await asyncio.gather(*(self._open_in(key) for key in keys))
        return sorted(job_id for ids in found for job_id in ids)

    async def _open_in(self, key: str) -> list[str]:
        ids = [r[s.COL_JOB_ID] for r in await self._cql.run("open_list", [key])]
        if key == s.REPLAY_OPEN_KEY:
            await asyncio.gather(*(self._move_legacy(job_id) for job_id in ids))
        return ids

    async def _move_legacy(self, job_id: str) -> None:
        # An earlier release's job: under the two keys first, so that finish_job (which
        # deletes those alone) ends it, then out of the legacy key (kept free of rows, and
        # of tombstones beyond one per job made before the buckets).
        rows = await self._cql.run("job_get", [job_id])
        if rows and rows[0][s.COL_QUERY] is not None:
            caller = decode_query(rows[0][s.COL_QUERY]).caller
            # The legacy entry's own TTL is not known: a job's longest.
            await self._open(job_id, caller, JOB_TTL_S)
        await self._cql.run("open_delete", [s.REPLAY_OPEN_KEY, job_id])

    async def count_open_jobs(self, caller: str | None) -> int:
        return len(await self._cql.run("open_list", [s.replay_caller_key(caller)]))

    async def claim_job(self, job_id: str, owner: str, now_ms: int, lease_ms: int) -> bool:
        return await claim_lease(self._cql.run, "job", job_id, owner, now_ms, lease_ms)

    async def finish_job(self, job_id: str, ttl_s: int) -> None:
        rows = await self._cql.run("job_get", [job_id])  # whose it is: its caller key
        await self._cql.run("job_done", [ttl_s, JobStatus.DONE.value, job_id])
        keys = [s.replay_open_key(job_id)]
        if rows and rows[0][s.COL_QUERY] is not None:
            keys.append(s.replay_caller_key(decode_query(rows[0][s.COL_QUERY]).caller))
        await asyncio.gather(*(self._cql.run("open_delete", [key, job_id]) for key in keys))
