"""Who runs a job (bulk replays, jobs over triggers): a lease on the job's row, taken by
Paxos, shared by both job stores (their statements differ by name only).

A job row's lease is (``owner``, ``until``): its holder renews it, anyone takes it once it
lapsed, and a job never leased is taken by whoever comes first. Job rows live
``JOB_TTL_S`` at most (a job is finished long before; the TTL only bounds a forgotten one).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from trigger_service.adapters import schema as s

JOB_TTL_S = 30 * 86_400

Run = Callable[[str, Sequence[Any]], Awaitable[list[dict[str, Any]]]]


async def claim_lease(run: Run, prefix: str, job_id: str, owner: str, now_ms: int,
                      lease_ms: int) -> bool:
    """Take or renew the lease of ``job_id`` for ``owner`` until ``now_ms + lease_ms``:
    renewed if ``owner`` holds it, taken if it lapsed by ``now_ms`` or was never taken
    (statements ``<prefix>_claim``, ``_claim_free``, ``_claim_new``). Whether it holds it."""
    until_ms = now_ms + lease_ms
    for name, cond in ((f"{prefix}_claim", owner), (f"{prefix}_claim_free", now_ms),
                       (f"{prefix}_claim_new", None)):
        params = [JOB_TTL_S, owner, until_ms, job_id] + ([] if cond is None else [cond])
        rows = await run(name, params)
        if rows and rows[0].get(s.LWT_APPLIED):
            return True
    return False
