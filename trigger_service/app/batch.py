"""Batch create: many registrations answered one by one, their I/O shared. No HTTP here.

Each entry goes through exactly the single registration's use case, the same one call
(``TriggerService.register``: its planning, its key's replay, its budgets and quota place,
its rows, its SQS message), so a batch item and a ``POST /v1/triggers`` with the same body
and key are one and the same request.
What a batch shares is the cost around them: one request, one JSON parse, one
authentication, one rate-limit call for all its items (``take_up_to``), and the registrations
run concurrently (at most ``IN_FLIGHT`` at once), so the store's coalesced writes
(``adapters.batching``) and the queue's lingering sends (``TRIGGER_SQS_SEND_LINGER_MS``) fill
their batches from one request instead of from many.

Entries that share an idempotency key run one after the other in index order: the first
registers, a later one with the same body is its replay (``200``), one with another body is
``IdempotencyKeyReused`` (``422``), exactly as two requests in a row would be.

An entry's failure is its own answer: ``ApiError`` as its status and code, a dependency's
failure (``AdapterError``) as ``503 dependency_unavailable`` (that entry was not accepted; a
retry with its key is safe). Nothing an entry raises stops the others.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

import structlog

from trigger_service.app.idempotency import Registered
from trigger_service.app.registration import NewTrigger, RegisterRequest
from trigger_service.app.triggers import TriggerService
from trigger_service.config.callers import Caller
from trigger_service.core.errors import AdapterError, ApiError, DependencyUnavailable

log = structlog.get_logger(__name__)

MAX_ITEMS = 1_000
# Registrations of one batch running at once: enough to fill the store's and the queue's
# batches, few enough that one batch does not take every connection of the process.
IN_FLIGHT = 200


@dataclass(frozen=True, slots=True)
class BatchEntry:
    """One item of a batch as the HTTP layer parsed it."""

    index: int
    request: RegisterRequest
    idem_key: str | None
    request_hash: str


@dataclass(frozen=True, slots=True)
class BatchOutcome:
    """What became of one entry: ``registered`` (with the timed ``new``), or ``error``."""

    index: int
    registered: Registered | None = None
    new: NewTrigger | None = None
    error: ApiError | None = None


class BatchRegistration:
    def __init__(self, service: TriggerService, in_flight: int = IN_FLIGHT) -> None:
        self._service = service
        self._in_flight = in_flight

    async def register_all(self, caller: Caller, entries: Sequence[BatchEntry],
                           request_id: str = "") -> list[BatchOutcome]:
        """Register every entry, each answered on its own (the module docstring), in the
        order of ``entries``. Never raises for one entry's failure. ``request_id`` goes into
        a ``dependency_unavailable`` item's message (the log has the driver's text)."""
        groups: dict[str, list[BatchEntry]] = {}
        alone: list[list[BatchEntry]] = []
        for entry in entries:
            if entry.idem_key is None:
                alone.append([entry])
            else:
                groups.setdefault(entry.idem_key, []).append(entry)
        gate = asyncio.Semaphore(self._in_flight)
        outcomes: dict[int, BatchOutcome] = {}

        async def run(group: list[BatchEntry]) -> None:
            for entry in group:  # a key's entries in index order: the first one decides
                async with gate:
                    outcomes[entry.index] = await self._one(caller, entry, request_id)

        await asyncio.gather(*(run(g) for g in [*alone, *groups.values()]))
        return [outcomes[e.index] for e in entries]

    async def _one(self, caller: Caller, entry: BatchEntry, request_id: str) -> BatchOutcome:
        try:
            done = await self._service.register(caller, entry.request, entry.idem_key,
                                                entry.request_hash)
        except ApiError as e:
            return BatchOutcome(entry.index, error=e)
        except AdapterError as e:
            log.error("dependency_error", index=entry.index, dependency=e.dependency,
                      error=str(e))
            return BatchOutcome(entry.index, error=DependencyUnavailable.for_request(request_id))
        return BatchOutcome(entry.index, registered=done.registered, new=done.new)
