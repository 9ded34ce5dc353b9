"""The boundaries of the delivery history: attempts, dead letters and bulk replay jobs
(``core.ports`` holds the others; the same rules apply).

=====================  ==================================  ====================================
port                   used by                             implementations
=====================  ==================================  ====================================
``AttemptLog``         dispatcher (write), API (read)      adapters.cassandra.dead_letters,
``DeadLetterIndex``    dispatcher, reconciler, API         adapters.memory.dead_letters
``ReplayJobStore``     API (bulk replay)
=====================  ==================================  ====================================
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Protocol

from trigger_service.core.dead_letters import (
    Attempt,
    DeadLetter,
    DeadLetterCursor,
    DeadLetterPage,
    DeadLetterQuery,
    ItemState,
    JobItem,
    ReplayJob,
)


class AttemptLog(Protocol):
    """Every delivery attempt, durably; entries expire ``ttl_s`` after being written."""

    async def record_attempt(self, attempt: Attempt, ttl_s: int, *, kept: int,
                             patient: bool = False) -> None:
        """Record ``attempt`` in its occurrence's history and, when it has an outcome, in
        its trigger's recent attempts: slot ``core.recent_attempts.ring_slot(number, kept)``
        of the ring, replacing what was there; both in one request (idempotent: a repeat
        rewrites the same entries). Raises ``StoreError``. ``patient``: the line may wait
        for company (a wave's outcomes are being written beside it) to share a request
        with other lines."""
        ...

    async def recent_attempts(self, trigger_id: str) -> list[Attempt]:
        """Every attempt in the trigger's ring, in no order (at most the largest ``kept``
        it was written with; ``response_excerpt`` and ``dispatcher`` not kept). Raises
        ``StoreError``."""
        ...

    async def attempts(self, trigger_id: str, occurrence_id: str) -> list[Attempt]:
        """One occurrence's attempts, oldest first, as this history keeps them (no
        ``outcome``, ``channel`` nor ``number``: ``recent_attempts`` has those). Raises
        ``StoreError``."""
        ...


class DeadLetterIndex(Protocol):
    """Dead letters by id, and listed newest first per caller (and over every caller)."""

    async def put_dead_letter(self, d: DeadLetter, ttl_s: int) -> None:
        """Record ``d`` as open and list it (idempotent: a repeat rewrites the same entries).
        Raises ``StoreError``."""
        ...

    async def put_dead_letter_if_new(self, d: DeadLetter, ttl_s: int) -> bool:
        """``put_dead_letter`` unless a letter with this id exists in any state (a FAILED
        row found again must not reopen a replayed or purged letter); true if it was put.
        Raises ``StoreError``."""
        ...

    async def get_dead_letter(self, dead_letter_id: str) -> DeadLetter | None:
        """Raises ``StoreError``."""
        ...

    async def resolve_dead_letter(self, d: DeadLetter, ttl_s: int) -> None:
        """Store ``d`` (replayed or purged) and take its listing entries away. Raises
        ``StoreError``."""
        ...

    async def list_dead_letters(self, q: DeadLetterQuery, cursor: DeadLetterCursor | None,
                                limit: int) -> DeadLetterPage:
        """Open dead letters matching ``q``, newest first, from ``cursor`` (exclusive; the
        page's ``next_cursor`` goes on exactly there: no letter twice, none skipped); reads
        one day after another (a bounded number per call: a page may be short with a cursor
        to go on). Raises ``StoreError``."""
        ...


class ReplayJobStore(Protocol):
    """Bulk replay jobs: the job, its items (fixed at creation), and who runs it."""

    async def create_job(self, job: ReplayJob, items: Sequence[JobItem], ttl_s: int) -> None:
        """Items first, the job last (a job row always has all its items). Raises
        ``StoreError``."""
        ...

    async def get_job(self, job_id: str) -> ReplayJob | None:
        """The job with ``done``/``failed`` counted from its items. Raises ``StoreError``."""
        ...

    def job_items(self, job_id: str) -> AsyncIterator[list[JobItem]]:
        """The job's items in id order, a page at a time to the last (a job may hold
        thousands: never all at once); each page is read when asked for, so states set
        meanwhile may show. Raises ``StoreError``."""
        ...

    async def set_item_state(self, job_id: str, item: JobItem, state: ItemState,
                             ttl_s: int) -> None:
        """Raises ``StoreError``."""
        ...

    async def open_jobs(self, turn: int | None = None) -> list[str]:
        """Ids of the jobs not finished yet: all of them (``turn`` None), or those of one of
        the store's few buckets, the ``turn``-th (modulo their number: turns 0, 1, 2, ...
        visit every unfinished job within one cycle of the buckets, each reading a bounded
        part). Raises ``StoreError``."""
        ...

    async def count_open_jobs(self, caller: str | None) -> int:
        """How many jobs over ``caller``'s letters (``None``: over every caller's, the
        query's ``caller``) are not finished yet. Raises ``StoreError``."""
        ...

    async def claim_job(self, job_id: str, owner: str, now_ms: int, lease_ms: int) -> bool:
        """Take (or renew) the job's lease with an LWT: true if ``owner`` now runs it (the
        lease was free, expired or already ``owner``'s). Raises ``StoreError``."""
        ...

    async def finish_job(self, job_id: str, ttl_s: int) -> None:
        """Mark the job done and drop it from the open jobs (idempotent: a job finished
        again, by a runner that found it open, stays done). Raises ``StoreError``."""
        ...
