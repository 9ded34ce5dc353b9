"""Shared builders for the use-case and HTTP unit tests: the service on in-memory fakes."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field

from trigger_service.adapters.memory.idempotency import MemoryIdempotencyCache
from trigger_service.adapters.memory.store import MemoryQueue, MemoryStore
from trigger_service.app.quota import QuotaGate
from trigger_service.app.registration import NewTrigger
from trigger_service.app.triggers import TriggerService
from trigger_service.config.settings import Settings
from trigger_service.core.errors import StoreTimeout
from trigger_service.core.model import Trigger
from trigger_service.core.notify.addresses import HostResolver
from trigger_service.core.ports.limit import SendBudget
from trigger_service.core.ports.values import KeyedCreation
from trigger_service.core.time.clock import ManualClock
from trigger_service.platform.metrics import InMemoryMetrics

NOW_MS = 1_700_000_000_000  # 2023-11-14T22:13:20.000Z
CALLBACK = "http://127.0.0.1:9000/cb"
SETTINGS = Settings()


class RecordingStore(MemoryStore):
    """A ``MemoryStore`` that also remembers the TTLs it was given."""

    def __init__(self) -> None:
        super().__init__()
        self.index_ttls: dict[str, int] = {}
        self.cas_ttls: list[int | None] = []

    async def create(self, trigger: Trigger, index_ttl_s: int) -> None:
        await super().create(trigger, index_ttl_s)
        self.index_ttls[trigger.trigger_id] = index_ttl_s

    async def create_keyed(self, trigger: Trigger, index_ttl_s: int) -> KeyedCreation:
        done = await super().create_keyed(trigger, index_ttl_s)
        self.index_ttls[trigger.trigger_id] = index_ttl_s
        return done

    async def compare_and_set(
        self, old: Trigger, new: Trigger, *, ttl_s: int | None = None, patient: bool = False
    ) -> bool:
        self.cas_ttls.append(ttl_s)
        return await super().compare_and_set(old, new, ttl_s=ttl_s, patient=patient)


class GatedStore(RecordingStore):
    """A creation waits for ``gate``: a first writer that is slow to write."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.gate.set()

    async def create(self, trigger: Trigger, index_ttl_s: int) -> None:
        await self.gate.wait()
        await super().create(trigger, index_ttl_s)

    async def create_keyed(self, trigger: Trigger, index_ttl_s: int) -> KeyedCreation:
        await self.gate.wait()
        return await super().create_keyed(trigger, index_ttl_s)


class TimedOutStore(RecordingStore):
    """A creation writes, then fails ``timeouts`` times as a timed-out write does: the
    caller is told ``StoreTimeout`` though the row is there."""

    def __init__(self) -> None:
        super().__init__()
        self.timeouts = 0

    async def create(self, trigger: Trigger, index_ttl_s: int) -> None:
        await super().create(trigger, index_ttl_s)
        self._time_out()

    async def create_keyed(self, trigger: Trigger, index_ttl_s: int) -> KeyedCreation:
        done = await super().create_keyed(trigger, index_ttl_s)
        self._time_out()
        return done

    def _time_out(self) -> None:
        if self.timeouts > 0:
            self.timeouts -= 1
            raise StoreTimeout("cassandra create timed out: 10.0.0.5:9042 said nothing")


@dataclass
class Env:
    clock: ManualClock
    store: RecordingStore
    queue: MemoryQueue
    cache: MemoryIdempotencyCache
    metrics: InMemoryMetrics
    service: TriggerService
    settings: Settings = field(default=SETTINGS)


def make_env(settings: Settings = SETTINGS, *, store: RecordingStore | None = None,
             cache: MemoryIdempotencyCache | None = None,
             clock: ManualClock | None = None, quota: QuotaGate | None = None,
             resolver: HostResolver | None = None,
             budget: SendBudget | None = None) -> Env:
    clock = clock or ManualClock(NOW_MS)
    store = store if store is not None else RecordingStore()
    queue = MemoryQueue(clock)
    cache = cache if cache is not None else MemoryIdempotencyCache(clock)
    metrics = InMemoryMetrics()
    service = TriggerService(settings, store, store, queue, cache, clock, metrics, quota,
                             resolver=resolver, budget=budget, debounce_heads=store)
    return Env(clock, store, queue, cache, metrics, service, settings)


def request(env: Env, delay_ms: int, *, payload: object = None,
            url: str = CALLBACK) -> NewTrigger:
    """A validated registration received now, firing ``delay_ms`` from now."""
    now_ms = env.clock.now_ms()
    return NewTrigger(url, json.dumps(payload), now_ms + delay_ms, now_ms)


async def drive(clock: ManualClock, task: asyncio.Task[object], *, step_ms: int = 20,
                max_steps: int = 1_000) -> int:
    """Advance ``clock`` in steps until ``task`` is done; the milliseconds advanced."""
    advanced = 0
    for _ in range(max_steps):
        for _ in range(10):  # turns of the loop: coalesced reads take a few (coalesced_reads)
            await asyncio.sleep(0)
        if task.done():
            return advanced
        clock.advance_ms(step_ms)
        advanced += step_ms
    raise AssertionError(f"task still running after {advanced} ms of manual time")
