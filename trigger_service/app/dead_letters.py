"""Dead letters: list, inspect, replay, purge, and replay in bulk (no HTTP here).

Scope: a caller sees and acts on its own dead letters only (another caller's id is
``NotFound``, exactly like an unknown one); ``scope=None`` is an ops user's view of all.

Replay, and why it never delivers twice:

- a one-time trigger goes back from FAILED to PENDING with a fresh attempt budget, at the
  same occurrence id (what its receiver deduplicates on), by an LWT on the FAILED row: of two
  replays racing, one applies; the other, and every later one, is ``AlreadyReplayed``;
- an occurrence of a series (the series went on without it) is delivered by a new one-time
  trigger with the same callback and payload, registered under an idempotency key made from
  the dead letter and its death, so a repeated replay finds the same trigger;
- a bulk job fixes its items (id and time of death) when it is made; each item is replayed
  through the same path and only if the letter is still that death, so a job resumed after a
  crash, or two runners, never replay one letter twice.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Protocol

import structlog
from ulid import ULID

from trigger_service.app.registration import NewTrigger
from trigger_service.app.triggers import TriggerService
from trigger_service.config.settings import Settings
from trigger_service.core.dead_letters import (
    Attempt,
    DeadLetter,
    DeadLetterCursor,
    DeadLetterFilters,
    DeadLetterPage,
    DeadLetterQuery,
    DeadLetterState,
    JobItem,
    ReplayJob,
)
from trigger_service.core.errors import (
    AlreadyReplayed,
    InvalidRequest,
    NotFound,
    NothingToReplay,
    NotReplayable,
    QuotaExceeded,
)
from trigger_service.core.model import Route, Status, Trigger, route_for
from trigger_service.core.ports import Clock, Metrics, TriggerStates
from trigger_service.core.ports.history import AttemptLog, DeadLetterIndex, ReplayJobStore

log = structlog.get_logger(__name__)

MAX_BULK = 10_000  # dead letters in one bulk replay job
# Unfinished bulk replay jobs over one caller's letters (or over every caller's): what bounds
# the open-jobs rows every API process polls. A job runs in seconds to minutes, so a caller
# that needs more at once can narrow none of them usefully: it waits for one to finish.
MAX_OPEN_JOBS = 10
_BULK_PAGE = 500


class HistoryStore(TriggerStates, AttemptLog, DeadLetterIndex, ReplayJobStore, Protocol):
    """What the dead-letter use cases read and write (``platform.wiring.Store`` is one)."""


class DeadLetterService:
    def __init__(self, settings: Settings, store: HistoryStore, triggers: TriggerService,
                 clock: Clock, metrics: Metrics) -> None:
        self._s = settings
        self._store = store
        self._triggers = triggers
        self._clock = clock
        self._metrics = metrics

    def query(self, f: DeadLetterFilters) -> DeadLetterQuery:
        """What ``f`` asked, every bound an instant: ``since`` left out is the oldest dead
        letter that can still exist, ``until`` left out is now; a ``since`` further back is
        kept as asked (a job's filters say what was asked; reads start at the oldest anyway).
        Raises ``InvalidRequest`` naming ``since`` when it is after ``until``."""
        now_ms = self._clock.now_ms()
        until_ms = now_ms if f.until_ms is None else f.until_ms
        since_ms = self._oldest_ms(now_ms) if f.since_ms is None else f.since_ms
        if since_ms > until_ms:
            raise InvalidRequest("since: after until")
        return DeadLetterQuery(f.caller, since_ms, until_ms, f.reason, f.callback_prefix)

    async def list_letters(self, q: DeadLetterQuery, cursor: DeadLetterCursor | None,
                   limit: int) -> DeadLetterPage:
        return await self._store.list_dead_letters(self._retained(q), cursor, limit)

    async def get(self, scope: str | None, dead_letter_id: str) -> DeadLetter:
        """An open or replayed dead letter in ``scope``; purged, unknown or another
        caller's → ``NotFound``."""
        d = await self._store.get_dead_letter(dead_letter_id) if _plausible(dead_letter_id) \
            else None
        if d is None or d.state is DeadLetterState.PURGED or (scope and d.caller != scope):
            raise NotFound(f"no dead letter {dead_letter_id}")
        return d

    async def detail(self, scope: str | None, dead_letter_id: str,
                     ) -> tuple[DeadLetter, Trigger | None, list[Attempt]]:
        """The letter, its trigger (None once expired) and the occurrence's attempts."""
        d = await self.get(scope, dead_letter_id)
        t = await self._store.get(d.trigger_id)
        return d, t, await self._store.attempts(d.trigger_id, d.id)

    async def purge(self, scope: str | None, dead_letter_id: str) -> DeadLetter:
        """Take it off the list for good (the trigger and its history stay)."""
        d = await self.get(scope, dead_letter_id)
        purged = replace(d, state=DeadLetterState.PURGED, resolved_at_ms=self._clock.now_ms())
        await self._store.resolve_dead_letter(purged, ttl_s=self._s.retention_s)
        log.info("dead_letter_purged", id=d.id, caller=d.caller)
        return purged

    async def replay(self, scope: str | None, dead_letter_id: str, fire_at_ms: int | None = None,
                     *, dead_at_ms: int | None = None) -> Trigger:
        """Deliver the occurrence once more at ``fire_at_ms`` (now if None or past); the
        trigger that will. ``dead_at_ms``: only if the letter is still that death (jobs).
        Raises ``NotFound``, ``AlreadyReplayed``, ``NotReplayable``."""
        d = await self.get(scope, dead_letter_id)
        if d.state is not DeadLetterState.OPEN or (
                dead_at_ms is not None and d.dead_at_ms != dead_at_ms):
            raise AlreadyReplayed(f"dead letter {d.id} was replayed already")
        t = await self._store.get(d.trigger_id)
        if t is None:
            raise NotReplayable(f"trigger {d.trigger_id} has expired; nothing to replay")
        now_ms = self._clock.now_ms()
        at_ms = max(fire_at_ms or now_ms, now_ms)
        if t.schedule is None:
            new = await self._revive(d, t, at_ms, now_ms)
        else:
            new = await self._copy(d, t, at_ms, now_ms)
        await self._store.resolve_dead_letter(
            replace(d, state=DeadLetterState.REPLAYED, resolved_at_ms=now_ms),
            ttl_s=self._s.retention_s)
        self._metrics.inc("dead_letters_replayed_total")
        log.info("dead_letter_replayed", id=d.id, caller=d.caller, trigger_id=new.trigger_id,
                 fire_at_ms=new.fire_at_ms)
        return new

    async def _revive(self, d: DeadLetter, t: Trigger, at_ms: int, now_ms: int) -> Trigger:
        """FAILED → PENDING at ``at_ms``, the same occurrence, a fresh attempt budget; exact
        (no jitter: a replay fires when asked, and a FAILED trigger has no later occurrence
        to spread), and without an ``expires_at_ms`` that has passed by then (a replay is an
        explicit ask: it would only expire again)."""
        if t.status is not Status.FAILED or f"{t.trigger_id}.{t.occurrence_seq}" != d.id:
            # Replayed already (a crash before the letter was marked), or never failed.
            await self._store.resolve_dead_letter(
                replace(d, state=DeadLetterState.REPLAYED, resolved_at_ms=now_ms),
                ttl_s=self._s.retention_s)
            raise AlreadyReplayed(f"dead letter {d.id} was replayed already "
                                  f"(the trigger is {t.status.value})")
        new = replace(t, status=
            Status.PENDING, attempts=0, claim_id=None, claimed_at_ms=None,
            next_attempt_at_ms=None, fired_at_ms=None, fire_at_ms=at_ms, jitter_s=0,
            occurrence_seq=t.occurrence_seq - 1, revision=(t.revision or 0) + 1,
            route=route_for(at_ms, now_ms, self._s.direct_max_delay_s),
            # A passed expiresAt is dropped: a replay fires when asked.
            expires_at_ms=None if t.expires_at_ms is not None and t.expires_at_ms < at_ms
            else t.expires_at_ms)
        if not await self._store.advance(t, new, self._s.index_ttl_s(at_ms, now_ms), now_ms):
            raise AlreadyReplayed(f"dead letter {d.id} is being replayed")
        if new.route is Route.DIRECT:
            await self._triggers.enqueue(new)  # a failed send is healed like any other
        return new

    async def _copy(self, d: DeadLetter, t: Trigger, at_ms: int, now_ms: int) -> Trigger:
        """A one-time trigger for a series' dead occurrence (once per death)."""
        key = f"replay:{d.id}:{d.dead_at_ms}"
        req = NewTrigger(callback_url=d.callback_url, payload_json=t.payload_json,
                         fire_at_ms=at_ms, received_at_ms=now_ms, plan=t.plan,
                         flow_control=t.flow_control, priority=t.priority)
        done = await self._triggers.register_planned(t.caller, req, key, key,
                                                     snoozed_from=t.trigger_id)
        if done.replayed:
            raise AlreadyReplayed(f"dead letter {d.id} was replayed already")
        copy = await self._store.get(done.trigger_id)
        assert copy is not None
        return copy

    # --- bulk ----------------------------------------------------------------------------
    async def start_bulk(self, q: DeadLetterQuery) -> ReplayJob:
        """A job replaying every open dead letter matching ``q`` now (up to ``MAX_BULK``).
        Raises ``QuotaExceeded`` when ``MAX_OPEN_JOBS`` jobs over ``q.caller``'s letters are
        unfinished (a bound, not a lock: requests racing may all pass, each seeing fewer),
        ``NothingToReplay`` when no open letter matches, ``InvalidRequest`` when more than
        ``MAX_BULK`` do; no job is made then."""
        open_jobs = await self._store.count_open_jobs(q.caller)
        if open_jobs >= MAX_OPEN_JOBS:
            raise QuotaExceeded(
                f"{open_jobs} bulk replay jobs over these letters are unfinished, the most at "
                f"once ({MAX_OPEN_JOBS}); wait for one to finish "
                "(GET /v1/dead-letters/replay/{jobId})")
        items: list[JobItem] = []
        cursor: DeadLetterCursor | None = None
        retained = self._retained(q)
        while True:
            page = await self._store.list_dead_letters(retained, cursor, _BULK_PAGE)
            items += [JobItem(d.id, d.dead_at_ms) for d in page.items]
            cursor = page.next_cursor
            if cursor is None:
                break
            if len(items) > MAX_BULK:
                raise InvalidRequest(f"filters: more than {MAX_BULK} dead letters match; "
                                     "narrow them (since/until, reason)", field="filters")
        if not items:
            raise NothingToReplay("no open dead letter matches these filters; no job was made")
        now_ms = self._clock.now_ms()
        job = ReplayJob("job_" + str(ULID.from_timestamp(now_ms / 1000)), q, now_ms,
                        len(items))
        await self._store.create_job(job, items, ttl_s=self._s.retention_s)
        log.info("replay_job_created", job_id=job.job_id, total=job.total)
        return job

    def _retained(self, q: DeadLetterQuery) -> DeadLetterQuery:
        """``q`` from the oldest dead letter that can still exist (they live the retention):
        a ``since`` years back would otherwise cost a read per empty day."""
        oldest_ms = self._oldest_ms(self._clock.now_ms())
        return q if q.since_ms >= oldest_ms else replace(q, since_ms=oldest_ms)

    def _oldest_ms(self, now_ms: int) -> int:
        """When the oldest dead letter that can still exist at ``now_ms`` died (they live
        the retention)."""
        return now_ms - self._s.retention_s * 1000

    async def job(self, scope: str | None, job_id: str) -> ReplayJob:
        job = await self._store.get_job(job_id) if job_id.isascii() and len(job_id) < 64 \
            else None
        if job is None or (scope and job.query.caller != scope):
            raise NotFound(f"no replay job {job_id}")
        return job


def _plausible(dead_letter_id: str) -> bool:
    """``trg_<ulid>.<n>``: anything else cannot be an id (and never reaches the store)."""
    head, _, n = dead_letter_id.partition(".")
    return (dead_letter_id.isascii() and head.startswith("trg_") and len(head) == 30
            and n.isdigit() and len(n) < 10)
