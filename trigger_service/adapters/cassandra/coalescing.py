"""Write coalescing: concurrent writes share requests. Each submission (the index entries of
one registration, its row, a delivery's history line) goes out with the others waiting, as
one unlogged batch; a lone write waits for nobody (``adapters.batching``: its adaptive
linger). A batch's failure fails each submission in it: each is retried by its caller, and
every write coalesced is idempotent (timestamps fixed by the trigger; a history line is best
effort)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from trigger_service.adapters.batching import NO_ERRORS, Batcher, ItemErrors
from trigger_service.adapters.cassandra import driver
from trigger_service.core.ports import Clock

# At most this many submissions share one request (a registration's up to 5 index entries
# and one more a tag or label; or its row), and a request's values at most
# ``COALESCE_MAX_BYTES``: a fuller batch is cut into several requests, sent at once, so a
# batch of big rows stays far below Cassandra's 50 KiB batch limit
# (``batch_size_fail_threshold``). Rows are coalesced only with a payload this small, and a
# submission waits at most this long for company.
COALESCE_SUBMISSIONS = 32
# The writes a caller's answer waits on (``waited``: a registration makes three such round
# trips before its answer) share a request with fewer while Cassandra has room (fewer than
# ``WAITED_BUSY_FLUSHES`` requests of the batcher in flight): Cassandra applies one
# request's batch on one of its threads, so every submission in it waits for all of it.
# Once it is busy, ``COALESCE_SUBMISSIONS``: a fuller batch costs both ends less per write.
# Measured (docs/benchmarks.md, 2026-11-30): 64 clients registered 459-488/s with 32 a batch
# always, 605-628/s with 8 always, 545-660/s with these; batch create (CPU-bound) made
# 1,816-2,066/s with 32 always, 1,614-1,647/s with 8 always, 1,910-1,945/s with these.
WAITED_SUBMISSIONS = 8
WAITED_BUSY_FLUSHES = 16
COALESCE_MAX_BYTES = 24 * 1024
COALESCE_PAYLOAD_MAX_BYTES = 2048
COALESCE_LINGER_MS = 2
COALESCE_FLUSHES = 64
# A patient submission (nobody waits on it sooner than on a write beside it that waits for
# company too) waits up to this long for a full batch, even when no batch is in flight.
PATIENT_LINGER_MS = 100
# What a statement costs in a batch besides its values (its id, the values' lengths).
_STATEMENT_BYTES = 32
_COLLECTIONS = (list, tuple, set, frozenset, dict)

Writes = Sequence[tuple[str, Sequence[Any]]]  # statements by name with values, written together


def write_batcher(cql: driver.Statements, clock: Clock, *, patient: bool = False,
                  waited: bool = False) -> Batcher[Writes]:
    """Submitted writes, coalesced into unlogged batches of ``cql`` (``clock`` times the
    linger). ``patient``: a lone write waits ``PATIENT_LINGER_MS`` for company rather than
    going at once. ``waited``: a caller's answer waits on these writes (a registration's),
    so batches are small while Cassandra has room (``WAITED_SUBMISSIONS``); otherwise,
    and once it is busy, ``COALESCE_SUBMISSIONS``."""
    async def flush(batch: Sequence[Writes]) -> ItemErrors:
        parts = by_size(batch, COALESCE_MAX_BYTES)
        if len(parts) == 1:  # the usual case: one request, its failure every submission's
            await cql.run_unlogged(_joined(batch, parts[0]))
            return NO_ERRORS
        outcomes = await asyncio.gather(*(cql.run_unlogged(_joined(batch, part))
                                          for part in parts), return_exceptions=True)
        return {i: outcome for part, outcome in zip(parts, outcomes, strict=True)
                if isinstance(outcome, Exception) for i in part}

    if patient:
        return Batcher(flush, clock, max_batch=COALESCE_SUBMISSIONS,
                       linger_ms=PATIENT_LINGER_MS, max_concurrent_flushes=COALESCE_FLUSHES,
                       eager=False)
    if waited:
        return Batcher(flush, clock, max_batch=WAITED_SUBMISSIONS,
                       linger_ms=COALESCE_LINGER_MS, max_concurrent_flushes=COALESCE_FLUSHES,
                       busy_batch=COALESCE_SUBMISSIONS, busy_flushes=WAITED_BUSY_FLUSHES)
    return Batcher(flush, clock, max_batch=COALESCE_SUBMISSIONS, linger_ms=COALESCE_LINGER_MS,
                   max_concurrent_flushes=COALESCE_FLUSHES)


def by_size(batch: Sequence[Writes], max_bytes: int) -> list[list[int]]:
    """The submissions of ``batch`` (by position) cut into requests, in order, each of
    values of at most ``max_bytes`` (estimated: ``written_bytes``) unless one submission
    alone is more."""
    requests: list[list[int]] = [[]]
    size = 0
    for i, writes in enumerate(batch):
        n = sum(written_bytes(values) for _, values in writes)
        if requests[-1] and size + n > max_bytes:
            requests.append([])
            size = 0
        requests[-1].append(i)
        size += n
    return requests


def _joined(batch: Sequence[Writes], part: list[int]) -> list[tuple[str, Sequence[Any]]]:
    return [w for i in part for w in batch[i]]


def written_bytes(values: Sequence[Any]) -> int:
    """About what one statement's values take in a batch (UTF-8 text, bytes, collections
    item by item; other values 16). Every coalesced write is sized, so by type identity
    first: most values are ints, None and unset."""
    n = _STATEMENT_BYTES
    for v in values:
        kind = type(v)
        if kind is str:
            n += len(v) if v.isascii() else len(v.encode())
        elif kind is bytes:
            n += len(v)
        elif kind in _COLLECTIONS:
            n += written_bytes(list(v.items()) if kind is dict else v) - _STATEMENT_BYTES
        else:
            n += 16
    return n
