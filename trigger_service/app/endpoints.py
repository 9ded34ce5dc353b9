"""Endpoint health for people: a caller lists its endpoints' records, operators
list everyone's; either enables a disabled (or failing) endpoint. No HTTP here.

Enabling deletes the record (``EndpointHealthStore.clear``), sends the operators'
``endpoint.enabled`` event (in the background, retried) and, with ``replay_since_ms``,
replays what was parked or dead-lettered for the endpoint since then, delivering each such
occurrence once:

- parked (``on_disabled = "hold"``): the caller's PAUSED triggers whose ``last_error`` is
  ``ENDPOINT_DISABLED``, whose callback is on the origin and whose occurrence was due at or
  after the time, resumed by a job over triggers (``app.trigger_jobs``, action ``resume``:
  each series by its own catch-up policy, a one-time trigger at once). They are found
  through the index of parked triggers of the (caller, origin) (``EndpointHealthStore.
  parked_since``, written by the dispatcher before it parks one), each entry checked against its
  row: the cost is that of the endpoint's parked triggers, never of the caller's others. A
  trigger parked before the index existed has no entry: it stays PAUSED (resumed by itself, or
  by an operator's resume of the caller);
- dead-lettered (``on_disabled = "dead_letter"``): the caller's open dead letters with
  reason ``endpoint_disabled`` on the origin that died at or after the time, by a bulk
  replay (``DeadLetterService.start_bulk``).

Both wait first until no dispatcher can still have the old record (its refresh period and a
margin), as an operator's resume of a paused caller does; without a replay the parked
triggers stay PAUSED (each can be resumed by itself) and the answer is immediate.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import structlog

from trigger_service.app.dead_letters import DeadLetterService
from trigger_service.app.trigger_jobs import TriggerJobRunner
from trigger_service.config.endpoint_health import EndpointHealthSettings
from trigger_service.core.dead_letters import DeadLetterQuery, DeadLetterReason, ReplayJob
from trigger_service.core.endpoint_health import (
    ENDPOINT_DISABLED,
    EndpointHealth,
    ParkedTrigger,
    enabled_event,
    origin_prefix,
)
from trigger_service.core.errors import NothingToReplay
from trigger_service.core.model import Status, Trigger
from trigger_service.core.ports import Clock, TriggerStates
from trigger_service.core.ports.endpoint_health import EndpointHealthStore, OpsEvents
from trigger_service.core.tags import TriggerFilter
from trigger_service.core.trigger_jobs import JobAction, TriggerJob
from trigger_service.core.urls import callback_origin

log = structlog.get_logger(__name__)

SETTLE_MARGIN_MS = 1_000


@dataclass(frozen=True, slots=True)
class Enabled:
    """What an enable did: the record it cleared (None: there was none) and the replay
    jobs it started (None: nothing to replay, or no replay asked)."""

    caller: str
    origin: str
    cleared: EndpointHealth | None
    trigger_job: TriggerJob | None = None
    dead_letter_job: ReplayJob | None = None


class EndpointService:
    def __init__(self, settings: EndpointHealthSettings, store: EndpointHealthStore,
                 events: OpsEvents, states: TriggerStates, jobs: TriggerJobRunner,
                 letters: DeadLetterService, clock: Clock) -> None:
        """``states``: the triggers' rows, read by id (the parked triggers' entries)."""
        self._s = settings
        self._store = store
        self._events = events
        self._states = states
        self._jobs = jobs
        self._letters = letters
        self._clock = clock
        self._sending: set[asyncio.Task[bool]] = set()

    async def endpoints(self, caller: str | None) -> list[EndpointHealth]:
        """The failing and disabled endpoints, ``caller``'s (None: every caller's).
        Raises ``StoreError``."""
        return await self._store.endpoint_health(caller)

    async def enable(self, caller: str, origin: str, replay_since_ms: int | None,
                     by: str) -> Enabled:
        """Enable ``caller``'s endpoint ``origin`` (idempotent: a healthy one stays so, and
        sends no event) and, with ``replay_since_ms``, replay what was parked or
        dead-lettered since then. ``by``: who asked (in the event). Raises ``StoreError``."""
        cleared = await self._store.clear(caller, origin)
        now_ms = self._clock.now_ms()
        if cleared is not None:
            log.warning("endpoint_enabled", caller=caller, origin=origin, by=by)
            task = asyncio.create_task(self._events.send(
                enabled_event(cleared, caller, origin, now_ms, by)))
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)
        if replay_since_ms is None:
            return Enabled(caller, origin, cleared)
        # A dispatcher with the old copy would park the replayed occurrences again.
        await self._clock.sleep_ms(self._s.refresh_s * 1000 + SETTLE_MARGIN_MS)
        ids = await self._parked_ids(caller, origin, replay_since_ms)
        job = (await self._jobs.start_over(caller, JobAction.RESUME,
                                           TriggerFilter(status=Status.PAUSED), ids)
               if ids else None)
        return Enabled(caller, origin, cleared, job,
                       await self._replay_letters(caller, origin, replay_since_ms))

    async def _parked_ids(self, caller: str, origin: str, since_ms: int) -> list[str]:
        """The ids of ``caller``'s triggers parked for ``origin`` at an occurrence due at or
        after ``since_ms``, in the order of their entries: each entry's row read and checked
        (``_parked_for``). The entries of triggers that are no longer parked are deleted."""
        ids: dict[str, None] = {}
        async for page in self._store.parked_since(caller, origin, since_ms):
            rows = await self._states.get_many([h.trigger_id for h in page])
            stale: list[ParkedTrigger] = []
            for h, t in zip(page, rows, strict=True):
                if t is not None and t.caller == caller and _parked_for(t, origin, since_ms):
                    ids[t.trigger_id] = None
                elif _stale(h, t):
                    stale.append(h)
            if stale:
                await self._store.forget_parked(caller, origin, stale)
        return list(ids)

    async def _replay_letters(self, caller: str, origin: str, since_ms: int
                              ) -> ReplayJob | None:
        query = DeadLetterQuery(caller, since_ms, self._clock.now_ms(),
                                DeadLetterReason.ENDPOINT_DISABLED, origin_prefix(origin))
        try:
            return await self._letters.start_bulk(query)
        except NothingToReplay:
            return None


def _parked_for(t: Trigger, origin: str, since_ms: int) -> bool:
    return (t.status is Status.PAUSED and t.last_error == ENDPOINT_DISABLED and t.plan is None
            and callback_origin(t.callback_url) == origin and t.due_at_ms() >= since_ms)


def _stale(h: ParkedTrigger, t: Trigger | None) -> bool:
    """Whether the entry ``h`` can no longer stand for a parked trigger: its trigger is gone
    or finished, or no longer parked and moved on from the occurrence parked (resumed). Kept:
    an entry of a trigger still parked (edited, or parked again later: a duplicate is
    harmless), and one whose trigger is still PENDING at that occurrence (its dispatcher
    may be about to park it: the entry is written before the parking LWT)."""
    if t is None or t.status.terminal:
        return True
    parked = t.status is Status.PAUSED and t.last_error == ENDPOINT_DISABLED
    return not parked and t.due_at_ms() != h.due_at_ms
