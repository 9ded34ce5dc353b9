"""Write coalescing: concurrent writes share requests. Each submission (the index entries of
one registration, its row, a delivery's history line) goes out with the others waiting, as
one unlogged batch; a lone write waits for nobody (``adapters.batching``: its adaptive
linger). A batch's failure fails each submission in it: each is retried by its caller, and
every write coalesced is idempotent (timestamps fixed by the trigger; a history line is best
effort)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trigger_service.adapters.batching import NO_ERRORS, Batcher, ItemErrors
from trigger_service.adapters.cassandra import driver
from trigger_service.core.ports import Clock

# At most this many submissions share one batch (a registration's up to 5 index entries, and
# one a tag or label: near Cassandra's default warning of 10 partitions per unlogged batch
# untagged), rows only with a payload this small (8 such rows stay far below the 50 KiB batch
# limit), a submission waits at most this long for company.
COALESCE_SUBMISSIONS = 8
COALESCE_PAYLOAD_MAX_BYTES = 2048
COALESCE_LINGER_MS = 2
COALESCE_FLUSHES = 64
# A patient submission (nobody waits on it sooner than on a write beside it that waits for
# company too) waits up to this long for a full batch, even when no batch is in flight.
PATIENT_LINGER_MS = 100

Writes = Sequence[tuple[str, Sequence[Any]]]  # statements by name with values, written together


def write_batcher(cql: driver.Statements, clock: Clock, *,
                  patient: bool = False) -> Batcher[Writes]:
    """Submitted writes, coalesced into unlogged batches of ``cql`` (``clock`` times the
    linger). ``patient``: a lone write waits ``PATIENT_LINGER_MS`` for company rather than
    going at once."""
    async def flush(batch: Sequence[Writes]) -> ItemErrors:
        await cql.run_unlogged([w for writes in batch for w in writes])
        return NO_ERRORS

    if patient:
        return Batcher(flush, clock, max_batch=COALESCE_SUBMISSIONS,
                       linger_ms=PATIENT_LINGER_MS, max_concurrent_flushes=COALESCE_FLUSHES,
                       eager=False)
    return Batcher(flush, clock, max_batch=COALESCE_SUBMISSIONS, linger_ms=COALESCE_LINGER_MS,
                   max_concurrent_flushes=COALESCE_FLUSHES)
