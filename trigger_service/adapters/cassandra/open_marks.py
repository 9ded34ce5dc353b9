"""Where readers of the open index start each partition (``open_marks``): past the run of
tombstones the finished triggers of a busy hour leave at its front.

A finished trigger deletes its entry, and the tombstone is scanned by every read of that
(caller, hour, part) until compaction drops it, hours later. One caller's partition can gather
hundreds of thousands, and Cassandra fails a read that scans 100,000
(``tombstone_failure_threshold``). Triggers finish in roughly fire-time order (a herd as it
falls due), so the tombstones form a run at the front, with a few entries still open in it:
a retry waiting, a paused trigger, one in flight for long.

So each partition has a *mark*: the key (fire time, id) from which readers read it. Every
entry still there below the mark is *held*: copied next to the mark, where a reader finds it
without scanning the run around it (and checks it against its row, as every entry). A page
reads each partition from its mark, merged with its held entries.

Who moves a mark up:

- a *probe* by one finisher in ``PROBE_ONE_IN`` (after its entry's delete): it reads the
  entries from the mark up to ``STRAGGLER_MS`` before its own fire time (nearer ones are in
  flight, not stragglers) and at most ``PROBE_SPAN_MS`` of fire times, holds the few it finds
  (``HOLD_PER_PROBE``, ``HOLD_MAX`` per partition) and sets the mark past them, in one
  single-partition batch;
- a reader that read a partition from its mark: the first entry it found is the new mark
  (nothing lies between), when that skips ``READER_STEP_MS`` of fire times or more.

Neither sets a mark past ``now - OPEN_MARK_LAG_MS``, and an entry whose fire time lies more
than ``OPEN_EARLY_MS`` before its write's timestamp is held by its writer (``held_write``: an
edit to an earlier time, a registration in the past). So an open trigger's entry is never
below a mark unheld: one written after a mark was set, below it, has a fire time before the
setter's ``now - OPEN_MARK_LAG_MS``; unless its writer held it, its timestamp is before
``now - OPEN_WRITE_DELAY_MS``: it was acknowledged (and written before its row or the LWT
that moved the trigger there) when the setter read, so the setter saw it and held it or
stopped before it. Concurrent setters race harmlessly: each batch is right on its own.

A hold goes once a reader (or a probe short of room) finds its trigger finished, at another
time or missing, and the hold older than ``OPEN_MARK_LAG_MS`` (a writer holds an entry before
the row or the LWT that puts its trigger there). Holds go a run at a time: one range delete
over consecutive holds that all went, written at ``now - OPEN_MARK_LAG_MS``, so it deletes no
hold it did not see (each one written before that was acknowledged, and seen, when it read).
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from cassandra.query import UNSET_VALUE

from trigger_service.adapters import schema as s
from trigger_service.adapters.cassandra.indexes import Entry, home_value
from trigger_service.core.model import Trigger

Write = tuple[str, Sequence[Any]]
Row = dict[str, Any]
Run = Callable[[str, Sequence[Any]], Awaitable[list[Row]]]
RunBatch = Callable[[Sequence[Write]], Awaitable[None]]
GetManyAt = Callable[[Sequence[tuple[str, int | None, int]]], Awaitable[list[Trigger | None]]]
Key = tuple[int, str]  # (fire_at_ms, trigger_id)

HOUR_MS = 3_600_000
# One finisher in this many probes: a reader scans at most about this many tombstones of its
# partition past the last probe, besides those of the last OPEN_MARK_LAG_MS.
PROBE_ONE_IN = 64
PROBE_SPAN_MS = 60_000  # fire times one probe reads (a hot partition's minute: ~7,500 entries)
STRAGGLER_MS = 30_000  # a probe stops this far before its finisher's own fire time
HOLD_PER_PROBE = 16
HOLD_MAX = 64  # holds per partition a probe adds to (writers' own holds come on top)
READER_STEP_MS = 10_000  # the least move a reader writes


def mark_queries(keyspace: str) -> dict[str, str]:
    """name → CQL of the marks (and the probe's read of the open index)."""
    t, marks = f"{keyspace}.{s.TABLE_OPEN}", f"{keyspace}.{s.TABLE_OPEN_MARKS}"
    part = f"{s.COL_CALLER} = ? AND {s.COL_FIRE_HOUR} = ? AND {s.COL_PART} = ?"
    key = f"({s.COL_FIRE_AT_MS}, {s.COL_TRIGGER_ID})"
    held = (f"{s.COL_FIRE_AT_MS}, {s.COL_TRIGGER_ID}, {s.COL_HOME_AT_MS}, {s.COL_SHARD}, "
            f"WRITETIME({s.COL_SHARD}) AS {s.COL_WRITTEN_US}")
    return {
        # The static mark comes with the first row, or alone: without a clustering bound.
        "open_mark": f"SELECT {s.COL_MARK} FROM {marks} WHERE {part} LIMIT 1",
        "open_held": f"SELECT {held} FROM {marks} WHERE {part} AND {key} > (?, ?) LIMIT ?",
        "open_marks": f"SELECT {s.COL_MARK}, {held} FROM {marks} WHERE {part} LIMIT ?",
        "open_mark_put": f"UPDATE {marks} USING TTL ? SET {s.COL_MARK} = ? WHERE {part}",
        "open_held_put": f"INSERT INTO {marks} ({s.COL_CALLER}, {s.COL_FIRE_HOUR}, "
        f"{s.COL_PART}, {s.COL_FIRE_AT_MS}, {s.COL_TRIGGER_ID}, {s.COL_HOME_AT_MS}, "
        f"{s.COL_SHARD}) VALUES (?, ?, ?, ?, ?, ?, ?) USING TTL ? AND TIMESTAMP ?",
        "open_held_drop": f"DELETE FROM {marks} USING TIMESTAMP ? WHERE {part} "
        f"AND {key} >= (?, ?) AND {key} <= (?, ?)",
        "open_probe": f"SELECT {s.COL_FIRE_AT_MS}, {s.COL_TRIGGER_ID}, {s.COL_HOME_AT_MS}, "
        f"{s.COL_SHARD}, TTL({s.COL_SHARD}) AS {s.COL_TTL} FROM {t} WHERE {part} "
        f"AND {key} >= (?, ?) AND {key} < (?, ?) LIMIT ?",
    }


@dataclass(frozen=True, slots=True)
class Held:
    """An entry held below its partition's mark, and the hold's write time (µs)."""

    entry: Entry
    written_us: int

    @property
    def key(self) -> Key:
        return self.entry[0]

    @property
    def part(self) -> int:
        return self.entry[2] % s.OPEN_PARTS

    def row(self) -> Row:
        """As a row of ``open_triggers`` (to merge with them)."""
        (fire_at_ms, trigger_id), home, shard = self.entry
        return {s.COL_FIRE_AT_MS: fire_at_ms, s.COL_TRIGGER_ID: trigger_id,
                s.COL_HOME_AT_MS: home, s.COL_SHARD: shard}


def held_write(t: Trigger, index_ttl_s: int, ts_us: int) -> Write | None:
    """The hold ``t``'s entry needs from its own writer (with ``entry_writes``): its fire
    time lies more than ``OPEN_EARLY_MS`` before the write, so maybe below a mark. None
    otherwise."""
    if t.fire_at_ms >= ts_us // 1000 - s.OPEN_EARLY_MS:
        return None
    return ("open_held_put", [t.caller, t.fire_at_ms // HOUR_MS, t.shard % s.OPEN_PARTS,
                              t.fire_at_ms, t.trigger_id, home_value(t), t.shard,
                              index_ttl_s, ts_us])


def gone(held: Held, t: Trigger | None, now_ms: int) -> bool:
    """Whether ``held``'s trigger (``t``, as read) no longer needs the hold: finished, at
    another fire time or missing, and the hold older than ``OPEN_MARK_LAG_MS`` (a writer
    holds an entry before the row or the LWT that puts the trigger there)."""
    if held.written_us >= (now_ms - s.OPEN_MARK_LAG_MS) * 1000:
        return False
    return t is None or t.status.terminal or t.fire_at_ms != held.key[0]


class OpenMarks:
    """Reads and moves the marks. ``probe_one_in``: how many finishers per probe (tests set
    1)."""

    def __init__(self, run: Run, run_batch: RunBatch, get_many_at: GetManyAt) -> None:
        self._run = run
        self._run_batch = run_batch
        self._get_many_at = get_many_at
        self.probe_one_in = PROBE_ONE_IN

    async def hour(self, caller: str, hour: int, now_ms: int) -> list[Key | None]:
        """The mark of each partition of ``caller``'s ``hour``, by part (None: no mark)."""
        if _unmarked(hour, now_ms):
            return [None] * s.OPEN_PARTS
        rows = await asyncio.gather(*(self._run("open_mark", [caller, hour, part])
                                      for part in range(s.OPEN_PARTS)))
        return [_mark(r) for r in rows]

    async def held(self, caller: str, hour: int, part: int, after: Key, want: int,
                   now_ms: int) -> list[Held]:
        """The first ``want`` holds of a partition after ``after``, in order."""
        if _unmarked(hour, now_ms):
            return []
        return _held(await self._run("open_held", [caller, hour, part, *after, want]))

    async def probe(self, t: Trigger, now_ms: int) -> None:
        """After ``t``'s entry was deleted (it finished or moved), as of ``now_ms`` (read
        before): one finisher in ``probe_one_in`` moves the mark of its entry's partition up
        over the dead run behind it, holding what is still there. Safe to repeat and to race.
        Raises ``StoreError`` (best effort: the mark only stays lower)."""
        if zlib.crc32(f"{t.trigger_id}@{t.fire_at_ms}".encode()) % self.probe_one_in:
            return
        caller, hour, part = t.caller, t.fire_at_ms // HOUR_MS, t.shard % s.OPEN_PARTS
        rows = await self._run("open_marks", [caller, hour, part, HOLD_MAX + 1])
        start, held = _mark(rows) or (hour * HOUR_MS, ""), _held(rows)
        end_ms = min(t.fire_at_ms - STRAGGLER_MS, now_ms - s.OPEN_MARK_LAG_MS,
                     start[0] + PROBE_SPAN_MS, (hour + 1) * HOUR_MS)
        if (end_ms, "") <= start:
            return
        found = await self._run("open_probe", [caller, hour, part, *start, end_ms, "",
                                               HOLD_PER_PROBE + 1])
        room = HOLD_MAX - len(held)
        if room < len(found):  # full: drop the holds that went first
            checked = list(zip(held, await self._get_many_at(
                [(h.key[1], h.entry[1], h.entry[2]) for h in held]), strict=True))
            await self.write(self.drops(caller, checked, now_ms))
            room += sum(1 for h, t in checked if gone(h, t, now_ms))
        writes, mark = _holds(caller, hour, part, found, {h.key for h in held}, room, now_ms)
        if (mark or (end_ms, "")) > start:
            await self._run_batch([*writes, _mark_write(caller, hour, part, mark or (end_ms, ""))])

    @staticmethod
    def moved(caller: str, hour: int, part: int, start: Key, first: Key | None,
              now_ms: int) -> Write | None:
        """A reader read ``part`` of ``hour`` from ``start`` (its mark, or the hour's start
        without one) as of ``now_ms`` and found ``first`` first (None: nothing to the hour's
        end): the write moving the mark up to it, if that skips ``READER_STEP_MS`` or more."""
        mark = min(first or ((hour + 1) * HOUR_MS, ""), (now_ms - s.OPEN_MARK_LAG_MS, ""))
        return (_mark_write(caller, hour, part, mark)
                if mark[0] - start[0] >= READER_STEP_MS else None)

    @staticmethod
    def drops(caller: str, checked: Sequence[tuple[Held, Trigger | None]], now_ms: int
              ) -> list[Write]:
        """The deletes of the holds that went: ``checked`` are consecutive holds of one
        partition, in key order, with their triggers as read. One range delete per run of
        holds that all went."""
        runs: list[list[Held]] = []
        extends = False
        for h, t in checked:
            if gone(h, t, now_ms):
                if extends:
                    runs[-1].append(h)
                else:
                    runs.append([h])
            extends = bool(runs) and runs[-1][-1] is h
        ts_us = (now_ms - s.OPEN_MARK_LAG_MS) * 1000
        return [("open_held_drop", [ts_us, caller, run[0].key[0] // HOUR_MS, run[0].part,
                                    *run[0].key, *run[-1].key]) for run in runs]

    async def write(self, writes: Sequence[Write]) -> None:
        """``moved`` and ``drops`` writes, in one request. Raises ``StoreError``."""
        if writes:
            await self._run_batch(writes)


def _unmarked(hour: int, now_ms: int) -> bool:
    """Whether ``hour`` starts after every fire time a mark or a writer's hold can be at yet
    (both are before their writer's clock, which is before ``now_ms`` +
    ``OPEN_WRITE_DELAY_MS``): the pending listing's usual hours, read without them."""
    return hour * HOUR_MS >= now_ms + s.OPEN_WRITE_DELAY_MS


def _mark(rows: Sequence[Row]) -> Key | None:
    mark = rows[0][s.COL_MARK] if rows else None
    return None if mark is None else (mark[0], mark[1])


def _held(rows: Sequence[Row]) -> list[Held]:
    return [Held(((r[s.COL_FIRE_AT_MS], r[s.COL_TRIGGER_ID]), r[s.COL_HOME_AT_MS],
                  r[s.COL_SHARD]), r[s.COL_WRITTEN_US])
            for r in rows if r[s.COL_FIRE_AT_MS] is not None]


def _holds(caller: str, hour: int, part: int, rows: Sequence[Row], held: set[Key], room: int,
           now_ms: int) -> tuple[list[Write], Key | None]:
    """The holds of a probe's ``rows`` (the entries from the mark, in order, up to
    ``HOLD_PER_PROBE`` + 1), and the new mark: the first entry it could not hold, or None if
    it held them all (the mark goes to the end of the probe's range)."""
    writes: list[Write] = []
    for i, r in enumerate(rows):
        key = (r[s.COL_FIRE_AT_MS], r[s.COL_TRIGGER_ID])
        if i == HOLD_PER_PROBE:  # the read's last: what lies after it is unknown
            return writes, key
        if key in held:
            continue
        if room <= 0:
            return writes, key
        room -= 1
        home = r[s.COL_HOME_AT_MS]  # unset, not null, for an earlier release's row
        writes.append(("open_held_put", [
            caller, hour, part, *key, UNSET_VALUE if home is None else home, r[s.COL_SHARD],
            r[s.COL_TTL] or s.OPEN_MARK_TTL_S, now_ms * 1000]))
    return writes, None


def _mark_write(caller: str, hour: int, part: int, mark: Key) -> Write:
    return ("open_mark_put", [s.OPEN_MARK_TTL_S, mark, caller, hour, part])
