"""The index of a caller's open triggers by fire time (``open_triggers``, ``open_hours``):
its entries, and a ``status=PENDING`` (or ``IN_FLIGHT``) LIST page read through it.

An entry is written with a trigger's other index entries, before its row, at each fire time
the trigger takes, and deleted (best effort) once the trigger leaves that time or finishes.
So every open trigger has its entry, and the few entries left behind by a crash are skipped
by readers, who check each entry against the row, as for every index here.

A page reads each (hour, part) partition from its mark, with the entries held below it
(``open_marks``), never through the tombstones of the triggers finished before it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from trigger_service.adapters import schema as s
from trigger_service.adapters.cassandra.indexes import Entry, home_value, merge_parts
from trigger_service.adapters.cassandra.open_marks import Held, OpenMarks, RunBatch, held_write
from trigger_service.core.errors import StoreError
from trigger_service.core.model import Status, Trigger, fire_month, month_end_ms, month_start_ms
from trigger_service.core.ports.values import ListPage

Write = tuple[str, Sequence[Any]]
Run = Callable[[str, Sequence[Any]], Awaitable[list[dict[str, Any]]]]
GetManyAt = Callable[[Sequence[tuple[str, int | None, int]]], Awaitable[list[Trigger | None]]]

HOUR_MS = 3_600_000
_MIN_MS = -(2**63)
_HOURS_PER_READ = 64  # open_hours rows per request
_MAX_HOUR_READS = 48  # hours one page may look into before it answers short, with a cursor
Key = tuple[int, str]  # (fire_at_ms, trigger_id)


def open_queries(keyspace: str) -> dict[str, str]:
    """name → CQL of the open index."""
    t, hours = f"{keyspace}.{s.TABLE_OPEN}", f"{keyspace}.{s.TABLE_OPEN_HOURS}"
    part = f"{s.COL_CALLER} = ? AND {s.COL_FIRE_HOUR} = ? AND {s.COL_PART} = ?"
    return {
        "open_entry_put": f"INSERT INTO {t} ({s.COL_CALLER}, {s.COL_FIRE_HOUR}, {s.COL_PART}, "
        f"{s.COL_FIRE_AT_MS}, {s.COL_TRIGGER_ID}, {s.COL_HOME_AT_MS}, {s.COL_SHARD}) "
        "VALUES (?, ?, ?, ?, ?, ?, ?) USING TTL ? AND TIMESTAMP ?",
        "open_entry_del": f"DELETE FROM {t} WHERE {part} AND {s.COL_FIRE_AT_MS} = ? "
        f"AND {s.COL_TRIGGER_ID} = ?",
        "open_entries": f"SELECT {s.COL_FIRE_AT_MS}, {s.COL_TRIGGER_ID}, {s.COL_HOME_AT_MS}, "
        f"{s.COL_SHARD} FROM {t} WHERE {part} "
        f"AND ({s.COL_FIRE_AT_MS}, {s.COL_TRIGGER_ID}) > (?, ?) LIMIT ?",
        # From a mark, which is itself an entry to read.
        "open_entries_from": f"SELECT {s.COL_FIRE_AT_MS}, {s.COL_TRIGGER_ID}, "
        f"{s.COL_HOME_AT_MS}, {s.COL_SHARD} FROM {t} WHERE {part} "
        f"AND ({s.COL_FIRE_AT_MS}, {s.COL_TRIGGER_ID}) >= (?, ?) LIMIT ?",
        "hour_put": f"INSERT INTO {hours} ({s.COL_CALLER}, {s.COL_FIRE_HOUR}) VALUES (?, ?) "
        "USING TTL ? AND TIMESTAMP ?",
        "hour_forget": f"DELETE FROM {hours} USING TIMESTAMP ? WHERE {s.COL_CALLER} = ? "
        f"AND {s.COL_FIRE_HOUR} = ?",
        # Every caller with listing entries: what the open index's backfill walks.
        "listed_callers": f"SELECT DISTINCT {s.COL_CALLER} FROM "
        f"{keyspace}.{s.TABLE_CALLER_MONTHS}",
        "hours": f"SELECT {s.COL_FIRE_HOUR} FROM {hours} WHERE {s.COL_CALLER} = ? "
        f"AND {s.COL_FIRE_HOUR} >= ? AND {s.COL_FIRE_HOUR} <= ? LIMIT ?",
    }


def _where(t: Trigger) -> list[Any]:
    return [t.caller, t.fire_at_ms // HOUR_MS, t.shard % s.OPEN_PARTS]


class OpenIndex:
    """The writes that keep the index exact and the reads that page through it, with the
    partitions' marks (``marks``). Per store (process): remembers which hour rows it wrote
    lately, to write each once a minute."""

    def __init__(self, run: Run, run_batch: RunBatch, get_many_at: GetManyAt) -> None:
        self._run = run
        self._get_many_at = get_many_at
        self._hours_written_ms: dict[tuple[str, int], int] = {}
        self.marks = OpenMarks(run, run_batch, get_many_at)

    def entry_writes(self, t: Trigger, index_ttl_s: int, ts_us: int) -> list[Write]:
        """The entry of ``t`` at its fire time (held at once if that lies far before the
        write: ``open_marks.held_write``), and its hour's row unless this process wrote that
        within ``OPEN_HOUR_REWRITE_MS`` (see ``schema.OPEN_HOUR_FORGET_BACKDATE_MS``).
        Nothing for a finished trigger."""
        if t.status.terminal:
            return []
        writes: list[Write] = [("open_entry_put", [*_where(t), t.fire_at_ms, t.trigger_id,
                                             home_value(t), t.shard, index_ttl_s, ts_us])]
        if hold := held_write(t, index_ttl_s, ts_us):
            writes.append(hold)
        now_ms, hour = ts_us // 1000, t.fire_at_ms // HOUR_MS
        if now_ms - self._hours_written_ms.get((t.caller, hour), _MIN_MS) >= s.OPEN_HOUR_REWRITE_MS:
            if len(self._hours_written_ms) > 100_000:  # forget what no longer saves writes
                self._hours_written_ms = {k: v for k, v in self._hours_written_ms.items()
                                          if now_ms - v < s.OPEN_HOUR_REWRITE_MS}
            self._hours_written_ms[(t.caller, hour)] = now_ms
            hour_ttl_s = index_ttl_s + ((hour + 1) * HOUR_MS - t.fire_at_ms) // 1000
            writes.append(("hour_put", [t.caller, hour, hour_ttl_s, ts_us]))
        return writes

    def unwritten(self, t: Trigger) -> None:
        """``entry_writes`` of ``t`` did not reach Cassandra: its hour row is written again
        by the next entry of that hour (not a minute later)."""
        self._hours_written_ms.pop((t.caller, t.fire_at_ms // HOUR_MS), None)

    @staticmethod
    def leave(old: Trigger, new: Trigger) -> list[Write]:
        """The delete of ``old``'s entry once ``new`` (applied) no longer holds it: ``new``
        is finished or at another fire time. Nothing otherwise (a claim, a retry, an edit
        that keeps the time: the entry is still right)."""
        if old.status.terminal or (not new.status.terminal
                                   and new.fire_at_ms == old.fire_at_ms):
            return []
        return [("open_entry_del", [*_where(old), old.fire_at_ms, old.trigger_id])]

    async def left(self, old: Trigger, new: Trigger, now_ms: int) -> None:
        """After the writes of ``leave(old, new)`` were applied, as of ``now_ms``: the mark
        of ``old``'s partition may move up over it (``OpenMarks.probe``). Raises
        ``StoreError`` (best effort)."""
        if self.leave(old, new):
            await self.marks.probe(old, now_ms)

    async def page(self, caller: str, *, start: tuple[int, int, str], last_month: int,
                   limit: int, status: Status, max_rows: int, now_ms: int) -> ListPage:
        """``TriggerCatalog.list_by_caller`` for an open status: the caller's ``status``
        triggers after ``start`` ((month, fire time, id), as every LIST cursor) by fire time,
        up to the end of ``last_month``. Reads the hours with entries in order, all parts of
        an hour at once, each from its mark; answers short (with a cursor, even empty) once
        it has read ``max_rows`` entries (each a row read: a rare open status among many
        open triggers) or looked into ``_MAX_HOUR_READS`` hours."""
        month, after_ms, after_id = start
        after: Key = (max(after_ms, month_start_ms(month) - 1), after_id)
        last_hour = (month_end_ms(last_month) - 1) // HOUR_MS
        found: list[Trigger] = []
        reads = rows_read = 0
        hours = await self._hours(caller, after[0] // HOUR_MS if after[0] >= 0 else 0, last_hour)
        marks: list[Key | None] = []  # of hours[0], read once
        while hours and len(found) < limit:
            if reads == _MAX_HOUR_READS or rows_read >= max_rows:
                return ListPage(found, _cursor(after))
            reads += 1
            hour = hours[0]
            if hour > after[0] // HOUR_MS:
                after = (hour * HOUR_MS - 1, "")
            marks = marks or await self.marks.hour(caller, hour, now_ms)
            entries, held, done, hints = await self._read_hour(
                caller, hour, after, min(limit - len(found), max_rows - rows_read), marks, now_ms)
            rows_read += len(entries)
            triggers = await self._get_many_at(
                [(tid, home, shard) for (_, tid), home, shard in entries])
            for (key, _, _), t in zip(entries, triggers, strict=True):
                after = key
                if t is not None and t.fire_at_ms == key[0] and t.status is status:
                    found.append(t)
            checked = [(held[e[0]], t) for e, t in zip(entries, triggers, strict=True)
                       if e[0] in held]
            for part in range(s.OPEN_PARTS):
                hints += self.marks.drops(caller, [c for c in checked if c[0].part == part],
                                          now_ms)
            with contextlib.suppress(StoreError):  # hints: the next reader writes them
                await self.marks.write(hints)
            if not done:
                continue
            if not entries and after[0] < hour * HOUR_MS:
                await self._forget_hour(caller, hour, now_ms)
            hours.pop(0)
            marks = []
            if not hours:
                hours = await self._hours(caller, hour + 1, last_hour)
            after = max(after, ((hour + 1) * HOUR_MS - 1, ""))  # an entry at the hour's last ms
        return ListPage(found, _cursor(after) if hours else None)

    async def _hours(self, caller: str, first: int, last: int) -> list[int]:
        rows = await self._run("hours", [caller, first, last, _HOURS_PER_READ])
        return [r[s.COL_FIRE_HOUR] for r in rows]

    async def _read_hour(self, caller: str, hour: int, after: Key, want: int,
                         marks: Sequence[Key | None], now_ms: int
                         ) -> tuple[list[Entry], dict[Key, Held], bool, list[Write]]:
        """Up to ``want`` entries of ``hour`` after ``after`` in order, merged from its
        parts (each read from its mark when that is past ``after``) and their holds; the
        holds among them, by key; whether the hour holds no more after them; and the marks
        to move up to the first entry found past them (``OpenMarks.moved``)."""
        froms = [m if m is not None and m > after else None for m in marks]
        parts, holds = await asyncio.gather(
            asyncio.gather(*(
                self._run("open_entries", [caller, hour, part, after[0], after[1], want])
                if mark is None else self._run("open_entries_from",
                                               [caller, hour, part, *mark, want])
                for part, mark in enumerate(froms))),
            asyncio.gather(*(self.marks.held(caller, hour, part, after, want, now_ms)
                             for part in range(s.OPEN_PARTS))))
        entries, done = merge_parts([*parts, *([h.row() for h in hs] for hs in holds)], want,
                                    s.COL_FIRE_AT_MS)
        hour_start: Key = (hour * HOUR_MS, "")
        moves = [self.marks.moved(caller, hour, part, start, _first(rows), now_ms)
                 for part, (m, mark, rows) in enumerate(zip(marks, froms, parts, strict=True))
                 if (start := mark or (hour_start if m is None and after < hour_start
                                       else None)) is not None]
        unique = [e for i, e in enumerate(entries) if i == 0 or e[0] != entries[i - 1][0]]
        return (unique, {h.key: h for hs in holds for h in hs}, done,
                [w for w in moves if w is not None])

    async def _forget_hour(self, caller: str, hour: int, now_ms: int) -> None:
        """The hour holds no entry: its row goes, unless written again lately."""
        ts_us = (now_ms - s.OPEN_HOUR_FORGET_BACKDATE_MS) * 1000
        await self._run("hour_forget", [ts_us, caller, hour])


def _cursor(after: Key) -> tuple[int, int, str]:
    return (fire_month(after[0]), after[0], after[1])


def _first(rows: Sequence[dict[str, Any]]) -> Key | None:
    return (rows[0][s.COL_FIRE_AT_MS], rows[0][s.COL_TRIGGER_ID]) if rows else None
