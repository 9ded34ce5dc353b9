from __future__ import annotations

import pytest

from trigger_service.adapters.memory.store import MemoryStore
from trigger_service.core.errors import StoreError
from trigger_service.platform.counters import CounterFlusher
from trigger_service.platform.metrics import InMemoryMetrics


async def test_each_flush_adds_only_what_changed_since_the_last() -> None:
    metrics, store = InMemoryMetrics(), MemoryStore()
    flusher = CounterFlusher(metrics, store)
    metrics.inc("duplicate_messages_total", 2)
    metrics.inc("deliveries_total", outcome="fired")
    assert await flusher.flush() == {"duplicate_messages_total": 2,
                                     'deliveries_total{outcome="fired"}': 1}
    assert await flusher.flush() == {}  # nothing new: no write at all
    assert store.calls["add_counters"] == 1
    metrics.inc("duplicate_messages_total")
    await flusher.flush()
    assert store.counters == {"duplicate_messages_total": 3,
                              'deliveries_total{outcome="fired"}': 1}


async def test_a_failed_flush_is_added_by_the_next_one() -> None:
    metrics, store = InMemoryMetrics(), MemoryStore()
    flusher = CounterFlusher(metrics, store)
    metrics.inc("claim_takeovers_total")
    store.failures["add_counters"] = StoreError("down")
    with pytest.raises(StoreError):
        await flusher.flush()
    del store.failures["add_counters"]
    metrics.inc("claim_takeovers_total")
    await flusher.flush()
    assert store.counters == {"claim_takeovers_total": 2}


async def test_two_processes_sum_up() -> None:
    store = MemoryStore()
    for _ in range(2):
        metrics = InMemoryMetrics()
        metrics.inc("overdue_resent_total", 3)
        await CounterFlusher(metrics, store).flush()
    assert await store.read_counters() == {"overdue_resent_total": 6}
