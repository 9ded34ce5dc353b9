"""What every bulk job's runner does, whatever its items are (bulk replays of dead letters,
jobs over triggers): the process that made a job starts it at once (``kick``), and every API
process looks for unfinished jobs every ``POLL_S`` (``poll``: one of the store's buckets of
them a round, a bounded read; a job whose runner died is taken over when its lease expires;
an LWT decides who runs it). ``run_once`` reads them all.

A runner works on a job's pending items a page at a time, ``_PARALLEL`` at once, renewing its
lease every ``_RENEW_EVERY`` items, then finishes the job unless the lease was lost. Each
item is worked on by ``_one`` (which sets its final state); a subclass says how, and where
its store keeps jobs (``_open_ids``, ``_claim``, ``_items``, ``_finish``)."""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import AsyncIterator
from typing import Generic, Protocol, TypeVar

import structlog

from trigger_service.core.dead_letters import ItemState
from trigger_service.core.errors import AdapterError
from trigger_service.core.ports import Clock

log = structlog.get_logger(__name__)

POLL_S = 2.0
LEASE_MS = 30_000
_RENEW_EVERY = 20  # items between lease renewals (far inside the lease)
_PARALLEL = 8


class Item(Protocol):
    @property
    def state(self) -> ItemState: ...


ItemT = TypeVar("ItemT", bound=Item)


class JobRounds(Generic[ItemT]):
    kind = "job"  # in log event names

    def __init__(self, clock: Clock, owner: str | None) -> None:
        self._clock = clock
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}:{id(self):x}"
        self._kicked: set[asyncio.Task[int]] = set()
        self._lock = asyncio.Lock()
        self._turn = -1

    # --- what a kind of job provides ----------------------------------------------------
    async def _open_ids(self, turn: int | None) -> list[str]:
        raise NotImplementedError

    async def _claim(self, job_id: str, now_ms: int, lease_ms: int) -> bool:
        raise NotImplementedError

    def _items(self, job_id: str) -> AsyncIterator[list[ItemT]]:
        raise NotImplementedError

    async def _finish(self, job_id: str) -> None:
        raise NotImplementedError

    async def _one(self, job_id: str, item: ItemT) -> None:
        """Work on one pending item and store its final state."""
        raise NotImplementedError

    # --- the rounds ---------------------------------------------------------------------
    def kick(self, job_id: str) -> None:
        """Start running the job now, in the background (after it was made)."""
        task = asyncio.ensure_future(self._quiet_round(job_id))
        self._kicked.add(task)
        task.add_done_callback(self._kicked.discard)

    async def _quiet_round(self, job_id: str) -> int:
        try:
            return await self._run([job_id])
        except AdapterError as e:
            log.warning(f"{self.kind}_round_failed", error=str(e))  # the poll retries
            return 0

    def cancel(self) -> None:
        """Stop the rounds kicked in the background (the process is stopping; a job left
        unfinished is resumed by the next runner once its lease expires)."""
        for task in list(self._kicked):
            task.cancel()

    async def run_once(self) -> int:
        """Work on every unfinished job this runner can lease; items worked on."""
        return await self._run(await self._open_ids(None))

    async def poll(self) -> int:
        """``run_once`` over the next bucket of unfinished jobs only; items worked on."""
        self._turn += 1
        return await self._run(await self._open_ids(self._turn))

    async def _run(self, job_ids: list[str]) -> int:
        async with self._lock:  # one round at a time per process
            worked = 0
            for job_id in job_ids:
                if await self._claim(job_id, self._clock.now_ms(), LEASE_MS):
                    worked += await self._work(job_id)
            return worked

    async def _work(self, job_id: str) -> int:
        """The job's pending items, a page at a time (never all held at once)."""
        done = since_renewal = 0
        async for items in self._items(job_id):
            pending = [i for i in items if i.state is ItemState.PENDING]
            for start in range(0, len(pending), _PARALLEL):
                if since_renewal >= _RENEW_EVERY:
                    if not await self._claim(job_id, self._clock.now_ms(), LEASE_MS):
                        log.warning(f"{self.kind}_job_lease_lost", job_id=job_id)
                        return done
                    since_renewal = 0
                chunk = pending[start:start + _PARALLEL]
                await asyncio.gather(*(self._one(job_id, item) for item in chunk))
                done += len(chunk)
                since_renewal += len(chunk)
        await self._finish(job_id)
        log.info(f"{self.kind}_job_finished", job_id=job_id, items=done)
        return done
