"""Types and helpers shared by the contract tests (kept out of ``conftest.py`` so that test
modules can import them)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

import pytest

from trigger_service.core.model import Route, Trigger, new_trigger_id
from trigger_service.core.ports import (
    CounterStore,
    DeliveryQueue,
    DueIndex,
    Enqueuer,
    QueueDepth,
    SweepCursors,
    TriggerCatalog,
)
from trigger_service.core.ports.audit import AuditLog
from trigger_service.core.ports.debounce import DebounceHeads
from trigger_service.core.ports.history import AttemptLog, DeadLetterIndex, ReplayJobStore
from trigger_service.core.ports.homes import KeyedRows
from trigger_service.core.ports.idempotency import IdempotencyStore
from trigger_service.core.ports.inbox import InboxStore
from trigger_service.core.ports.values import ReceivedMessage
from trigger_service.core.tags import FilteredListing
from trigger_service.core.time.clock import SystemClock
from trigger_service.core.trigger_jobs import TriggerJobStore

INDEX_TTL_S = 3_600  # index entries written by the contract tests expire after an hour
MIN_MS = -(2**63)  # the smallest fire time: a listing cursor that starts a month


class Store(TriggerCatalog, IdempotencyStore, DueIndex, SweepCursors, CounterStore,
            AttemptLog, DeadLetterIndex, ReplayJobStore, InboxStore, FilteredListing,
            TriggerJobStore, DebounceHeads, AuditLog, Protocol):
    """Everything the trigger store offers (``MemoryStore``, ``CassandraStore``)."""

    keyed_rows: KeyedRows  # the primitives of one row per keyed id (adapters.homes)


class Queue(Enqueuer, DeliveryQueue, QueueDepth, Protocol):
    """Both sides of the queue and its depth (``MemoryQueue``, ``SqsQueue``)."""


DeadLetterRow = tuple[str, int, str]  # trigger id, fire time, reason


@dataclass
class QueueUnderTest:
    impl: str
    queue: Queue
    dead_letters: Callable[[], Awaitable[list[DeadLetterRow]]]  # read, not consumed


def unique(prefix: str) -> str:
    """A name no other test (or earlier run) uses: callers, groups, keys, owners."""
    return f"{prefix}{uuid.uuid4().hex[:12]}"


def utc_ms(year: int, month: int, day: int, hour: int = 0, minute: int = 0,
           second: int = 0, ms: int = 0) -> int:
    dt = datetime(year, month, day, hour, minute, second, tzinfo=UTC)
    return int(dt.timestamp()) * 1000 + ms


def make_trigger(caller: str, fire_at_ms: int, *, shard: int = 0, route: Route = Route.SWEEP,
                 idem_key: str | None = None) -> Trigger:
    """A new PENDING trigger created now (the store's writes carry the creation time, so it
    must not lie in the future)."""
    now_ms = SystemClock().now_ms()
    return Trigger(
        trigger_id=new_trigger_id(now_ms), caller=caller,
        callback_url=f"https://receiver.example/{caller}/cb?x=1",
        payload_json='{"n": 1, "text": "h\\u00e9 \u2713", "nested": {"a": [1, 2]}}',
        fire_at_ms=fire_at_ms, created_at_ms=now_ms, shard=shard, route=route,
        idem_key=idem_key,
    )


async def receive_now(queue: DeliveryQueue, visibility_s: int = 30) -> list[ReceivedMessage]:
    """What is visible right now on every lane (no long poll)."""
    got: list[ReceivedMessage] = []
    for lane in range(queue.lanes):
        got += await queue.receive(max_messages=10, wait_s=0, visibility_s=visibility_s,
                                   lane=lane)
    return got


async def receive_within(queue: DeliveryQueue, timeout_s: float, *, visibility_s: int = 30,
                         want: int = 1) -> list[ReceivedMessage]:
    """Poll until at least ``want`` messages arrived (all of them) or the time is up."""
    deadline = time.monotonic() + timeout_s
    got: list[ReceivedMessage] = []
    while True:
        remaining = deadline - time.monotonic()
        got += await receive_now(queue, visibility_s)
        if len(got) < want and remaining >= 1:
            got += await queue.receive(max_messages=10, wait_s=1, visibility_s=visibility_s)
        if len(got) >= want or time.monotonic() >= deadline:
            return got
        await asyncio.sleep(0.05)


def known_violation(request: pytest.FixtureRequest, fixture: str, impl: str,
                    reason: str) -> None:
    """Mark this test xfail(strict) when ``fixture`` runs the implementation ``impl``: a real
    adapter that breaks its documented contract (the strictness flags the fix)."""
    callspec = getattr(request.node, "callspec", None)
    if callspec is not None and callspec.params.get(fixture) == impl:
        request.applymarker(pytest.mark.xfail(strict=True, reason=reason))


@contextmanager
def rows_per_call(store: object, rows: int) -> Iterator[None]:
    """Within the block, a listing call of ``store`` (either one: both have the attribute)
    reads at most ``rows`` index entries (``list_max_rows``)."""
    bounded: Any = store
    saved, bounded.list_max_rows = bounded.list_max_rows, rows
    try:
        yield
    finally:
        bounded.list_max_rows = saved
