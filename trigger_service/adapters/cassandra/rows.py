"""Trigger rows in ``triggers_by_second``: partitioned by the second of the fire time a
trigger was created with (its home, ``Trigger.home_at_ms``) and a group of shards
(``core.model.row_partition``), so that the conditional writes of a wave (claims, outcomes,
cancels) that share a partition go to Cassandra as one conditional ``BATCH``: one Paxos round
for many triggers, not one each.

Held by ``.triggers`` (``CassandraTriggers``, which writes the pointers in ``triggers``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from trigger_service.adapters import schema
from trigger_service.adapters.batching import Batcher, ItemErrors
from trigger_service.adapters.cassandra.sealing import RowSealer
from trigger_service.adapters.cassandra.statements import (
    cas_condition,
    creation_values,
    trigger_from_row,
)
from trigger_service.core.coalescing import TurnCoalescer
from trigger_service.core.model import Trigger, row_partition
from trigger_service.core.ports import Clock

Row = dict[str, Any]
Run = Callable[[str, Sequence[Any]], Awaitable[list[Row]]]
# Conditional statements (by name, with their values) on rows of one partition, as one
# request; its rows (``driver.execute_conditional``).
RunConditional = Callable[[Sequence[tuple[str, Sequence[Any]]]], Awaitable[list[Row]]]

# Conditional writes waiting together (over every partition: each partition's go as one
# batch), how long one waits for company at most, and how often a batch that lost on some
# rows goes again without them before the rest go one by one.
_COALESCE = 256
_LINGER_MS = 2
_FLUSHES = 64
_BATCH_ROUNDS = 4
# A patient write (an outcome nobody waits for) waits this long for company: the outcomes
# of a wave come back over its second, and each partition's go in one round.
_PATIENT_LINGER_MS = 250
# Rows per multi-row read (one partition's rows in one request).
_IN_CHUNK = 100
# Single-row reads of one turn of the loop read together, at most this many.
_COALESCED_READS = 500


@dataclass(slots=True)
class _Cas:
    """One conditional write of a row, and whether it applied."""

    key: list[Any]  # bucket_minute, shard, home_at_ms, trigger_id
    cond: list[Any]  # the values TRIGGER_CAS_CONDITION's columns must have
    statement: str
    params: list[Any]
    alone: bool  # too large to share a batch
    applied: bool = False


def row_key(trigger_id: str, shard: int, home_at_ms: int) -> list[Any]:
    """The primary key of a trigger's row, in the statements' order."""
    return [*row_partition(home_at_ms, shard), home_at_ms, trigger_id]


class TriggerRows:
    def __init__(self, run: Run, run_conditional: RunConditional, clock: Clock,
                 sealer: RowSealer) -> None:
        """``sealer``: seals the rows' sealed columns as written, opens them as read."""
        self._run = run
        self._sealer = sealer
        self._run_conditional = run_conditional
        self._cas: Batcher[_Cas] = Batcher(
            self._flush, clock, max_batch=_COALESCE, linger_ms=_LINGER_MS,
            max_concurrent_flushes=_FLUSHES)
        self._patient: Batcher[_Cas] = Batcher(
            self._flush, clock, max_batch=_COALESCE, linger_ms=_PATIENT_LINGER_MS,
            max_concurrent_flushes=_FLUSHES, eager=False)
        self._reads: TurnCoalescer[tuple[str, int, int], Row | None] = TurnCoalescer(
            self._read_at, _COALESCED_READS)

    def create(self, t: Trigger, ts_us: int) -> tuple[str, list[Any]]:
        """The plain write that creates ``t``'s row (``t.home_at_ms`` set), with a fixed
        timestamp: for the store to send alone or with others."""
        assert t.home_at_ms is not None
        return ("row_create", [ts_us, *self._sealer.values(t.trigger_id, creation_values(t)),
                               *row_key(t.trigger_id, t.shard, t.home_at_ms)])

    async def create_by_paxos(self, t: Trigger) -> bool:
        """Create ``t``'s row by Paxos (its cells then carry a ballot's timestamp, so no
        plain create of the id, backdated, can change them): whether it was written (False:
        a row is there already). Raises ``StoreError``."""
        assert t.home_at_ms is not None
        rows = await self._run("row_create_lwt", [
            *self._sealer.values(t.trigger_id, creation_values(t)),
            *row_key(t.trigger_id, t.shard, t.home_at_ms)])
        return bool(rows and rows[0].get(schema.LWT_APPLIED))

    async def get(self, trigger_id: str, home_at_ms: int, shard: int) -> Trigger | None:
        """The row at (``home_at_ms``, ``shard``), read with the reads asked for in the same
        turn of the loop (a received batch's, a herd's): those of one partition in one
        request. Raises ``StoreError`` (the shared request's)."""
        row = await self._reads.run((trigger_id, home_at_ms, shard))
        if row is None:
            return None
        return trigger_from_row(trigger_id, await self._sealer.open_row(trigger_id, row))

    async def get_many(self, homes: Sequence[tuple[str, int, int]]) -> dict[str, Trigger]:
        """The rows of (trigger id, home, shard) that exist: one request per partition (and
        per chunk of one), the partitions side by side."""
        out: dict[str, Trigger] = {}
        for (tid, _home, _shard), row in zip(homes, await self._read_at(homes), strict=True):
            if row is not None and (t := trigger_from_row(
                    tid, await self._sealer.open_row(tid, row))) is not None:
                out[tid] = t
        return out

    async def _read_at(self, keys: Sequence[tuple[str, int, int]]) -> list[Row | None]:
        """The raw rows at (trigger id, home, shard), in order (None: no row there)."""
        if len(keys) == 1:
            tid, home, shard = keys[0]
            rows = await self._run("row_get", row_key(tid, shard, home))
            return [rows[0] if rows else None]
        parts: dict[tuple[int, int], list[tuple[int, str]]] = {}
        for trigger_id, home, shard in dict.fromkeys(keys):
            parts.setdefault(row_partition(home, shard), []).append((home, trigger_id))
        reads = [self._run("row_get_in", [second, group, chunk])
                 for (second, group), rows in parts.items()
                 for chunk in (rows[i:i + _IN_CHUNK] for i in range(0, len(rows), _IN_CHUNK))]
        found = {(row[schema.COL_TRIGGER_ID], row[schema.COL_HOME_AT_MS]): row
                 for rows in await asyncio.gather(*reads) for row in rows}
        return [found.get((tid, home)) for tid, home, _ in keys]

    async def compare_and_set(self, old: Trigger, values: list[Any], *, ttl_s: int | None,
                              alone: bool, patient: bool = False) -> bool:
        """Write ``values`` (``TRIGGER_COLUMNS`` order, unset where unchanged) to ``old``'s
        row iff its state is still ``old``'s; concurrent calls for one partition share a
        Paxos round. ``alone``: a write too large to share a batch; ``patient``: it waits
        up to ``_PATIENT_LINGER_MS`` for company. Raises ``StoreError`` (a timeout leaves
        the outcome unknown)."""
        assert old.home_at_ms is not None
        key = row_key(old.trigger_id, old.shard, old.home_at_ms)
        cond = cas_condition(old)
        cas = _Cas(key, cond, "row_cas" if ttl_s is None else "row_cas_ttl",
                   ([] if ttl_s is None else [ttl_s]) + [*values, *key, *cond],
                   alone)
        await (self._patient if patient else self._cas).submit(cas)
        return cas.applied

    async def _flush(self, batch: Sequence[_Cas]) -> ItemErrors:
        """One Paxos round per partition (``_partition``), the partitions side by side. A
        partition's failure fails its writes alone."""
        by_partition: dict[tuple[Any, ...], list[int]] = {}
        for i, cas in enumerate(batch):
            by_partition.setdefault((cas.key[0], cas.key[1]), []).append(i)
        errors: dict[int, Exception] = {}

        async def partition(positions: list[int]) -> None:
            try:
                await self._partition([batch[i] for i in positions])
            except Exception as e:
                errors.update(dict.fromkeys(positions, e))

        await asyncio.gather(*(partition(p) for p in by_partition.values()))
        return errors

    async def _partition(self, writes: list[_Cas]) -> None:
        """Conditional writes to rows of one partition, in batches: each row once per batch
        (two conditions on one row would both be judged against the row before either: the
        later write waits for the earlier's round), a large row alone."""
        while writes:
            seen: set[str] = set()
            now: list[_Cas] = []
            later: list[_Cas] = []
            for w in writes:
                (later if w.key[3] in seen else now).append(w)
                seen.add(w.key[3])
            writes = later
            together = [w for w in now if not w.alone]
            size = schema.ROWS_PER_CONDITIONAL_BATCH
            rounds = [together[i:i + size] for i in range(0, len(together), size)]
            rounds += [[w] for w in now if w.alone]
            await asyncio.gather(*(self._rounds(r) for r in rounds))

    async def _rounds(self, writes: list[_Cas]) -> None:
        """One batch; if it did not apply, the rows whose state was not what their write
        expected lost (another write came first, or the row is gone), and the others go
        again without them."""
        for _ in range(_BATCH_ROUNDS):
            if not writes:
                return
            rows = await self._run_conditional([(w.statement, w.params) for w in writes])
            if rows and rows[0].get(schema.LWT_APPLIED):
                for w in writes:
                    w.applied = True
                return
            if len(writes) == 1:
                return
            current = {(r[schema.COL_HOME_AT_MS], r[schema.COL_TRIGGER_ID]):
                       [r.get(c) for c in schema.TRIGGER_CAS_CONDITION] for r in rows}
            writes = [w for w in writes if current.get((w.key[2], w.key[3])) == w.cond]
        for w in writes:  # contended round after round: each alone
            rows = await self._run_conditional([(w.statement, w.params)])
            w.applied = bool(rows and rows[0].get(schema.LWT_APPLIED))
