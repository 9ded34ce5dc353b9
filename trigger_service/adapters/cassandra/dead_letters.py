"""``AttemptLog`` and ``DeadLetterIndex`` on Cassandra (tables in
``infra/cql/008_dead_letters.cql`` and ``029_recent_attempts.cql``): a part of
``CassandraStore``, on its statements. The replays of dead letters are ``.replay_jobs``."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from trigger_service.adapters import schema as s
from trigger_service.adapters.cassandra import driver
from trigger_service.adapters.cassandra.coalescing import write_batcher
from trigger_service.adapters.cassandra.dead_letter_listing import list_rows
from trigger_service.core.dead_letters import (
    Attempt,
    AttemptOutcome,
    DeadLetter,
    DeadLetterCursor,
    DeadLetterPage,
    DeadLetterQuery,
    DeadLetterReason,
    DeadLetterState,
    day_of,
)
from trigger_service.core.ports import Clock
from trigger_service.core.recent_attempts import ring_slot

# attempts_recent's columns after the key, in binding order.
RECENT_COLUMNS = (s.COL_OCCURRENCE_ID, s.COL_ATTEMPT, s.COL_CHANNEL, s.COL_STARTED_AT_MS,
                  s.COL_DURATION_MS, s.COL_OUTCOME, s.COL_STATUS_CODE, s.COL_ERROR)


def insert(table: str, cols: Sequence[str], suffix: str = "USING TTL ?") -> str:
    """An ``INSERT`` of ``cols`` into ``table``, each a marker, then ``suffix``."""
    return (f"INSERT INTO {table} ({', '.join(cols)}) "
            f"VALUES ({', '.join('?' for _ in cols)}) {suffix}")


def dead_letter_queries(keyspace: str) -> dict[str, str]:
    """name → CQL text for the tables of this module."""
    att, recent, dl, by_day = (f"{keyspace}.{n}" for n in (
        s.TABLE_ATTEMPTS, s.TABLE_ATTEMPTS_RECENT, s.TABLE_DEAD_LETTERS,
        s.TABLE_DEAD_LETTERS_BY_DAY))
    att_cols = (s.COL_TRIGGER_ID, s.COL_OCCURRENCE_ID, s.COL_STARTED_AT_MS, s.COL_ATTEMPT,
                s.COL_DURATION_MS, s.COL_STATUS_CODE, s.COL_ERROR, s.COL_RESPONSE_EXCERPT,
                s.COL_DISPATCHER)
    recent_cols = (s.COL_TRIGGER_ID, s.COL_SLOT, *RECENT_COLUMNS)
    dl_cols = (s.COL_ID, *s.DEAD_LETTER_COLUMNS, s.COL_STATE, s.COL_RESOLVED_AT_MS)
    day_cols = (s.COL_SCOPE, s.COL_DAY, s.COL_DEAD_AT_MS, s.COL_ID,
                *(c for c in s.DEAD_LETTER_COLUMNS if c != s.COL_DEAD_AT_MS))

    return {
        "attempt_put": insert(att, att_cols),
        "attempts": f"SELECT {', '.join(att_cols)} FROM {att} WHERE {s.COL_TRIGGER_ID} = ? "
        f"AND {s.COL_OCCURRENCE_ID} = ?",
        "recent_put": insert(recent, recent_cols),
        "recent": f"SELECT {', '.join(RECENT_COLUMNS)} FROM {recent} "
        f"WHERE {s.COL_TRIGGER_ID} = ?",
        "dl_put": insert(dl, dl_cols),
        "dl_get": f"SELECT {', '.join(dl_cols)} FROM {dl} WHERE {s.COL_ID} = ?",
        "dl_day_put": insert(by_day, day_cols),
        "dl_day_delete": f"DELETE FROM {by_day} WHERE {s.COL_SCOPE} = ? AND {s.COL_DAY} = ? "
        f"AND {s.COL_DEAD_AT_MS} = ? AND {s.COL_ID} = ?",
        "dl_day_list": f"SELECT {', '.join(day_cols)} FROM {by_day} WHERE {s.COL_SCOPE} = ? "
        f"AND {s.COL_DAY} = ? AND ({s.COL_DEAD_AT_MS}, {s.COL_ID}) < (?, ?) LIMIT ?",
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


def attempt_values(a: Attempt, ttl_s: int) -> list[Any]:
    """The values of ``attempt_put`` for one attempt."""
    return [a.trigger_id, a.occurrence_id, a.started_at_ms, a.attempt, a.duration_ms,
            a.status_code, a.error, a.response_excerpt, a.dispatcher, ttl_s]


def recent_values(a: Attempt, outcome: AttemptOutcome, kept: int, ttl_s: int) -> list[Any]:
    """The values of ``recent_put`` for one attempt: its slot in the trigger's ring."""
    return [a.trigger_id, ring_slot(a.number, kept), a.occurrence_id, a.attempt, a.channel,
            a.started_at_ms, a.duration_ms, outcome.value, a.status_code, a.error, ttl_s]


def _recent(trigger_id: str, r: dict[str, Any]) -> Attempt:
    return Attempt(trigger_id, r[s.COL_OCCURRENCE_ID], r[s.COL_ATTEMPT],
                   r[s.COL_STARTED_AT_MS], r[s.COL_DURATION_MS] or 0, r[s.COL_STATUS_CODE],
                   r[s.COL_ERROR], None, "", outcome=AttemptOutcome(r[s.COL_OUTCOME]),
                   channel=r[s.COL_CHANNEL])


class CassandraDeadLetters:
    def __init__(self, cql: driver.Statements, clock: Clock) -> None:
        """On the store's statements (``CassandraStore.statements``); ``clock`` times the
        coalescing of history lines."""
        self._cql = cql
        self._history_writes = write_batcher(cql, clock)
        self._patient_history_writes = write_batcher(cql, clock, patient=True)

    # --- AttemptLog --------------------------------------------------------------------
    async def record_attempt(self, attempt: Attempt, ttl_s: int, *, kept: int,
                             patient: bool = False) -> None:
        # The history lines of concurrent deliveries share unlogged batches (``.coalescing``);
        # a patient one waits for company, as its outcome's write beside it does. Its ring
        # entry is one submission with it: the same request, never a round trip of its own.
        writes = self._patient_history_writes if patient else self._history_writes
        lines: list[tuple[str, list[Any]]] = [
            ("attempt_put", attempt_values(attempt, ttl_s))]
        if attempt.outcome is not None:
            lines.append(("recent_put", recent_values(attempt, attempt.outcome, kept, ttl_s)))
        await writes.submit(lines)

    async def attempts(self, trigger_id: str, occurrence_id: str) -> list[Attempt]:
        rows = await self._cql.run("attempts", [trigger_id, occurrence_id])
        return [Attempt(r[s.COL_TRIGGER_ID], r[s.COL_OCCURRENCE_ID], r[s.COL_ATTEMPT],
                        r[s.COL_STARTED_AT_MS], r[s.COL_DURATION_MS] or 0,
                        r[s.COL_STATUS_CODE], r[s.COL_ERROR], r[s.COL_RESPONSE_EXCERPT],
                        r[s.COL_DISPATCHER] or "") for r in rows]

    async def recent_attempts(self, trigger_id: str) -> list[Attempt]:
        # The whole partition: the ring holds at most ``kept`` rows.
        return [_recent(trigger_id, r) for r in await self._cql.run("recent", [trigger_id])]

    # --- DeadLetterIndex ---------------------------------------------------------------
    async def put_dead_letter(self, d: DeadLetter, ttl_s: int) -> None:
        # The listing entries first: an entry whose record is missing is skipped by readers
        # (never the other way round, an open record nobody can list).
        day = day_of(d.dead_at_ms)
        rest = [d.trigger_id, d.caller, d.reason.value, d.last_error, d.attempt_count,
                d.fire_at_ms, d.callback_url]  # day_cols after the key
        await asyncio.gather(*(
            self._cql.run("dl_day_put", [scope, day, d.dead_at_ms, d.id, *rest, ttl_s])
            for scope in (d.caller, s.scope_all_bucket(d.id))))
        await self._cql.run("dl_put", [d.id, *_fields(d), DeadLetterState.OPEN.value, None, ttl_s])

    async def put_dead_letter_if_new(self, d: DeadLetter, ttl_s: int) -> bool:
        # A read, not an LWT: the paths that call this re-send at least once anyway, and two
        # of them racing write the same entries (put_dead_letter is idempotent).
        if await self.get_dead_letter(d.id) is not None:
            return False
        await self.put_dead_letter(d, ttl_s)
        return True

    async def get_dead_letter(self, dead_letter_id: str) -> DeadLetter | None:
        rows = await self._cql.run("dl_get", [dead_letter_id])
        if not rows or rows[0][s.COL_TRIGGER_ID] is None:
            return None
        r = rows[0]
        return _letter(r, r[s.COL_STATE], r[s.COL_RESOLVED_AT_MS])

    async def resolve_dead_letter(self, d: DeadLetter, ttl_s: int) -> None:
        # The record first: an entry left listed after a crash shows a resolved record, and
        # the listing skips it. So does an entry under the legacy '*' (not deleted: a delete
        # there per resolution would fill the partition the buckets empty with tombstones).
        await self._cql.run("dl_put", [d.id, *_fields(d), d.state.value, d.resolved_at_ms, ttl_s])
        day = day_of(d.dead_at_ms)
        await asyncio.gather(*(self._cql.run("dl_day_delete", [scope, day, d.dead_at_ms, d.id])
                               for scope in (d.caller, s.scope_all_bucket(d.id))))

    async def list_dead_letters(self, q: DeadLetterQuery, cursor: DeadLetterCursor | None,
                                limit: int) -> DeadLetterPage:
        async def read(scope: str, day: int, before_ms: int, before_id: str,
                       rows: int) -> list[dict[str, Any]]:
            return await self._cql.run("dl_day_list", [scope, day, before_ms, before_id, rows])

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
