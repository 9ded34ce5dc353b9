"""``AttemptLog``, ``DeadLetterIndex`` and ``ReplayJobStore`` on Cassandra (tables in
``infra/cql/008_dead_letters.cql``), mixed into ``CassandraStore`` (one session)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from typing import Any

from trigger_service.adapters import schema as s
from trigger_service.adapters.cassandra import driver
from trigger_service.adapters.cassandra.dead_letter_listing import list_rows
from trigger_service.adapters.cassandra.job_leases import JOB_TTL_S, claim_lease
from trigger_service.core.dead_letters import (
    Attempt,
    DeadLetter,
    DeadLetterCursor,
    DeadLetterPage,
    DeadLetterQuery,
    DeadLetterReason,
    DeadLetterState,
    ItemState,
    JobItem,
    JobStatus,
    ReplayJob,
    day_of,
)


def dead_letter_queries(keyspace: str) -> dict[str, str]:
    """name → CQL text for the tables of this module."""
    att, dl, by_day, jobs, items, open_ = (f"{keyspace}.{n}" for n in (
        s.TABLE_ATTEMPTS, s.TABLE_DEAD_LETTERS, s.TABLE_DEAD_LETTERS_BY_DAY,
        s.TABLE_REPLAY_JOBS, s.TABLE_REPLAY_ITEMS, s.TABLE_REPLAY_OPEN))
    att_cols = (s.COL_TRIGGER_ID, s.COL_OCCURRENCE_ID, s.COL_STARTED_AT_MS, s.COL_ATTEMPT,
                s.COL_DURATION_MS, s.COL_STATUS_CODE, s.COL_ERROR, s.COL_RESPONSE_EXCERPT,
                s.COL_DISPATCHER)
    dl_cols = (s.COL_ID, *s.DEAD_LETTER_COLUMNS, s.COL_STATE, s.COL_RESOLVED_AT_MS)
    day_cols = (s.COL_SCOPE, s.COL_DAY, s.COL_DEAD_AT_MS, s.COL_ID,
                *(c for c in s.DEAD_LETTER_COLUMNS if c != s.COL_DEAD_AT_MS))

    def insert(table: str, cols: Sequence[str], suffix: str = "USING TTL ?") -> str:
        return (f"INSERT INTO {table} ({', '.join(cols)}) "
                f"VALUES ({', '.join('?' for _ in cols)}) {suffix}")

    return {
        "attempt_put": insert(att, att_cols),
        "attempts": f"SELECT {', '.join(att_cols)} FROM {att} WHERE {s.COL_TRIGGER_ID} = ? "
        f"AND {s.COL_OCCURRENCE_ID} = ?",
        "dl_put": insert(dl, dl_cols),
        "dl_get": f"SELECT {', '.join(dl_cols)} FROM {dl} WHERE {s.COL_ID} = ?",
        "dl_day_put": insert(by_day, day_cols),
        "dl_day_delete": f"DELETE FROM {by_day} WHERE {s.COL_SCOPE} = ? AND {s.COL_DAY} = ? "
        f"AND {s.COL_DEAD_AT_MS} = ? AND {s.COL_ID} = ?",
        "dl_day_list": f"SELECT {', '.join(day_cols)} FROM {by_day} WHERE {s.COL_SCOPE} = ? "
        f"AND {s.COL_DAY} = ? AND ({s.COL_DEAD_AT_MS}, {s.COL_ID}) < (?, ?) LIMIT ?",
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


def _letter(row: dict[str, Any], state: str | None = None,
            resolved_at_ms: int | None = None) -> DeadLetter:
    return DeadLetter(
        id=row[s.COL_ID], trigger_id=row[s.COL_TRIGGER_ID], caller=row[s.COL_CALLER],
        reason=DeadLetterReason(row["reason"]), last_error=row["last_error"],
        attempt_count=row["attempt_count"] or 0, dead_at_ms=row[s.COL_DEAD_AT_MS],
        fire_at_ms=row[s.COL_FIRE_AT_MS], callback_url=row["callback_url"],
        state=DeadLetterState(state or DeadLetterState.OPEN), resolved_at_ms=resolved_at_ms)


def _fields(d: DeadLetter) -> list[Any]:
    """``DEAD_LETTER_COLUMNS`` of ``d``, in order."""
    return [d.trigger_id, d.caller, d.reason.value, d.last_error, d.attempt_count,
            d.dead_at_ms, d.fire_at_ms, d.callback_url]


def encode_query(q: DeadLetterQuery) -> str:
    return json.dumps({"caller": q.caller, "since": q.since_ms, "until": q.until_ms,
                       "reason": q.reason.value if q.reason else None,
                       "callbackPrefix": q.callback_prefix})


def decode_query(text: str) -> DeadLetterQuery:
    d = json.loads(text)
    return DeadLetterQuery(d["caller"], d["since"], d["until"],
                           DeadLetterReason(d["reason"]) if d["reason"] else None,
                           d["callbackPrefix"])


def attempt_values(a: Attempt, ttl_s: int) -> list[Any]:
    """The values of ``attempt_put`` for one attempt."""
    return [a.trigger_id, a.occurrence_id, a.started_at_ms, a.attempt, a.duration_ms,
            a.status_code, a.error, a.response_excerpt, a.dispatcher, ttl_s]


class CassandraDeadLetters(driver.StoreStatements):
    """Runs its statements through ``driver.StoreStatements`` (``CassandraStore``)."""

    # --- AttemptLog --------------------------------------------------------------------
    async def record_attempt(self, attempt: Attempt, ttl_s: int) -> None:
        await self._run("attempt_put", attempt_values(attempt, ttl_s))

    async def attempts(self, trigger_id: str, occurrence_id: str) -> list[Attempt]:
        rows = await self._run("attempts", [trigger_id, occurrence_id])
        return [Attempt(r[s.COL_TRIGGER_ID], r[s.COL_OCCURRENCE_ID], r[s.COL_ATTEMPT],
                        r[s.COL_STARTED_AT_MS], r[s.COL_DURATION_MS] or 0,
                        r[s.COL_STATUS_CODE], r[s.COL_ERROR], r[s.COL_RESPONSE_EXCERPT],
                        r[s.COL_DISPATCHER] or "") for r in rows]

    # --- DeadLetterIndex ---------------------------------------------------------------
    async def put_dead_letter(self, d: DeadLetter, ttl_s: int) -> None:
        # The listing entries first: an entry whose record is missing is skipped by readers
        # (never the other way round, an open record nobody can list).
        day = day_of(d.dead_at_ms)
        rest = [d.trigger_id, d.caller, d.reason.value, d.last_error, d.attempt_count,
                d.fire_at_ms, d.callback_url]  # day_cols after the key
        await asyncio.gather(*(
            self._run("dl_day_put", [scope, day, d.dead_at_ms, d.id, *rest, ttl_s])
            for scope in (d.caller, s.scope_all_bucket(d.id))))
        await self._run("dl_put", [d.id, *_fields(d), DeadLetterState.OPEN.value, None, ttl_s])

    async def put_dead_letter_if_new(self, d: DeadLetter, ttl_s: int) -> bool:
        # A read, not an LWT: the paths that call this re-send at least once anyway, and two
        # of them racing write the same entries (put_dead_letter is idempotent).
        if await self.get_dead_letter(d.id) is not None:
            return False
        await self.put_dead_letter(d, ttl_s)
        return True

    async def get_dead_letter(self, dead_letter_id: str) -> DeadLetter | None:
        rows = await self._run("dl_get", [dead_letter_id])
        if not rows or rows[0][s.COL_TRIGGER_ID] is None:
            return None
        r = rows[0]
        return _letter(r, r[s.COL_STATE], r[s.COL_RESOLVED_AT_MS])

    async def resolve_dead_letter(self, d: DeadLetter, ttl_s: int) -> None:
        # The record first: an entry left listed after a crash shows a resolved record, and
        # the listing skips it. So does an entry under the legacy '*' (not deleted: a delete
        # there per resolution would fill the partition the buckets empty with tombstones).
        await self._run("dl_put", [d.id, *_fields(d), d.state.value, d.resolved_at_ms, ttl_s])
        day = day_of(d.dead_at_ms)
        await asyncio.gather(*(self._run("dl_day_delete", [scope, day, d.dead_at_ms, d.id])
                               for scope in (d.caller, s.scope_all_bucket(d.id))))

    async def list_dead_letters(self, q: DeadLetterQuery, cursor: DeadLetterCursor | None,
                                limit: int) -> DeadLetterPage:
        async def read(scope: str, day: int, before_ms: int, before_id: str,
                       rows: int) -> list[dict[str, Any]]:
            return await self._run("dl_day_list", [scope, day, before_ms, before_id, rows])

        rows, next_cursor = await list_rows(
            read, (q.caller,) if q.caller else s.SCOPES_ALL, q, cursor, limit,
            lambda r: q.matches(_letter(r)))
        return DeadLetterPage(await self._only_open([_letter(r) for r in rows]), next_cursor)

    async def _only_open(self, found: list[DeadLetter]) -> list[DeadLetter]:
        # A listing entry can outlive its letter's resolution by a crash between the two
        # writes: the record decides.
        records = await asyncio.gather(*(self.get_dead_letter(d.id) for d in found))
        return [d for d, r in zip(found, records, strict=True)
                if r is not None and r.state is DeadLetterState.OPEN
                and r.dead_at_ms == d.dead_at_ms]

    # --- ReplayJobStore ----------------------------------------------------------------
    async def create_job(self, job: ReplayJob, items: Sequence[JobItem], ttl_s: int) -> None:
        # A job's items share its partition.
        await driver.write_in_batches(self._run_unlogged, [
            ("item_put", [job.job_id, i.id, i.dead_at_ms, i.state.value, ttl_s])
            for i in items])
        await self._run("job_put", [job.job_id, encode_query(job.query), job.created_at_ms,
                                    job.total, job.status.value, ttl_s])
        await self._open(job.job_id, job.query.caller, ttl_s)

    async def _open(self, job_id: str, caller: str | None, ttl_s: int) -> None:
        await asyncio.gather(*(self._run("open_put", [key, job_id, ttl_s]) for key in (
            s.replay_open_key(job_id), s.replay_caller_key(caller))))

    async def get_job(self, job_id: str) -> ReplayJob | None:
        rows = await self._run("job_get", [job_id])
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
        async for rows in self._pages("items", [job_id]):
            yield [JobItem(r[s.COL_ID], r[s.COL_DEAD_AT_MS], ItemState(r[s.COL_STATE]))
                   for r in rows]

    async def set_item_state(self, job_id: str, item: JobItem, state: ItemState,
                             ttl_s: int) -> None:
        await self._run("item_put", [job_id, item.id, item.dead_at_ms, state.value, ttl_s])

    async def open_jobs(self, turn: int | None = None) -> list[str]:
        keys = s.REPLAY_OPEN_KEYS if turn is None else (
            s.REPLAY_OPEN_KEYS[turn % len(s.REPLAY_OPEN_KEYS)],)
        found = await asyncio.gather(*(self._open_in(key) for key in keys))
        return sorted(job_id for ids in found for job_id in ids)

    async def _open_in(self, key: str) -> list[str]:
        ids = [r[s.COL_JOB_ID] for r in await self._run("open_list", [key])]
        if key == s.REPLAY_OPEN_KEY:
            await asyncio.gather(*(self._move_legacy(job_id) for job_id in ids))
        return ids

    async def _move_legacy(self, job_id: str) -> None:
        # An earlier release's job: under the two keys first, so that finish_job (which
        # deletes those alone) ends it, then out of the legacy key (kept free of rows, and
        # of tombstones beyond one per job made before the buckets).
        rows = await self._run("job_get", [job_id])
        if rows and rows[0][s.COL_QUERY] is not None:
            caller = decode_query(rows[0][s.COL_QUERY]).caller
            # The legacy entry's own TTL is not known: a job's longest.
            await self._open(job_id, caller, JOB_TTL_S)
        await self._run("open_delete", [s.REPLAY_OPEN_KEY, job_id])

    async def count_open_jobs(self, caller: str | None) -> int:
        return len(await self._run("open_list", [s.replay_caller_key(caller)]))

    async def claim_job(self, job_id: str, owner: str, now_ms: int, lease_ms: int) -> bool:
        return await claim_lease(self._run, "job", job_id, owner, now_ms, lease_ms)

    async def finish_job(self, job_id: str, ttl_s: int) -> None:
        rows = await self._run("job_get", [job_id])  # whose it is: its caller key
        await self._run("job_done", [ttl_s, JobStatus.DONE.value, job_id])
        keys = [s.replay_open_key(job_id)]
        if rows and rows[0][s.COL_QUERY] is not None:
            keys.append(s.replay_caller_key(decode_query(rows[0][s.COL_QUERY]).caller))
        await asyncio.gather(*(self._run("open_delete", [key, job_id]) for key in keys))
