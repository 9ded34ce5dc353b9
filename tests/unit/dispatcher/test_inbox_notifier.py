"""``InboxNotifier`` on the in-memory store and bus: what it stores and publishes, and the
outcome it reports for each failure."""

from __future__ import annotations

import json

from structlog.testing import capture_logs

from dispatcher.channels.inbox import PUBLISH_FAILURES, STORE_FAILED, InboxNotifier
from trigger_service.adapters.memory.inbox import MemoryInboxBus
from trigger_service.adapters.memory.store import MemoryStore
from trigger_service.core.errors import CacheError, StoreError
from trigger_service.core.notify.channels import (
    ChannelOutcome,
    InboxSpec,
    OccurrenceNotice,
    SmsSpec,
)
from trigger_service.core.notify.inbox import message_id
from trigger_service.core.time.clock import ManualClock
from trigger_service.platform.metrics import InMemoryMetrics

NOW_MS = 1_700_000_000_000
SPEC = InboxSpec("ada", "Standup", "in 5 minutes", '{"room":"4.1"}')
OCC = OccurrenceNotice("trg_1", "trg_1.0", "orders", 2, NOW_MS, ack_url="https://x.example/ack?t=1")
MID = message_id("trg_1.0", 2, NOW_MS)


def notifier() -> tuple[InboxNotifier, MemoryStore, MemoryInboxBus, InMemoryMetrics, ManualClock]:
    store, bus, metrics, clock = MemoryStore(), MemoryInboxBus(), InMemoryMetrics(), \
        ManualClock(NOW_MS + 40)
    return InboxNotifier(store, bus, clock, metrics, 86_400), store, bus, metrics, clock


async def test_stores_then_publishes_the_message_id_only() -> None:
    n, store, bus, _, _ = notifier()
    assert await n.send(SPEC, OCC) == ChannelOutcome(ok=True, provider_message_id=MID)
    m = await store.get_inbox_message("orders", "ada", MID)
    assert m is not None and m.created_at_ms == NOW_MS + 40 and m.trigger_id == "trg_1"
    assert json.loads(m.data_json or "") == {"room": "4.1",
                                             "ackUrl": "https://x.example/ack?t=1"}
    [(caller, recipient, payload)] = bus.published
    assert (caller, recipient, payload) == ("orders", "ada", MID)  # streams read the store


async def test_a_redelivery_stores_nothing_new_and_keeps_the_read_time() -> None:
    n, store, bus, _, clock = notifier()
    await n.send(SPEC, OCC)
    await store.mark_inbox_read("orders", "ada", MID, NOW_MS + 500)
    clock.advance_ms(60_000)
    assert (await n.send(SPEC, OCC)).provider_message_id == MID
    page = await store.list_inbox("orders", "ada", before=None, limit=10, unread_only=False)
    assert [(m.message_id, m.read_at_ms, m.created_at_ms) for m in page.items] == [
        (MID, NOW_MS + 500, NOW_MS + 40)]
    assert len(bus.published) == 2  # a stream that missed the first one sees it now


async def test_a_store_failure_is_transient_shows_no_driver_text_and_publishes_nothing(
) -> None:
    n, store, bus, _, _ = notifier()
    store.failures["put_inbox_message"] = StoreError("cassandra 10.0.3.7:9042 timed out")
    with capture_logs() as logs:
        out = await n.send(SPEC, OCC)
    assert out == ChannelOutcome(ok=False, error=STORE_FAILED)  # the caller's lastError
    assert "10.0.3.7" not in STORE_FAILED
    assert [(e["event"], e["error"]) for e in logs] == [
        ("inbox_store_failed", "cassandra 10.0.3.7:9042 timed out")]  # the operator's
    assert bus.published == []


async def test_a_publish_failure_after_the_store_is_still_delivered_and_counted() -> None:
    n, store, bus, metrics, _ = notifier()
    bus.failure = CacheError("redis down")
    assert (await n.send(SPEC, OCC)).ok
    assert await store.get_inbox_message("orders", "ada", MID) is not None
    assert metrics.snapshot() == {PUBLISH_FAILURES: 1}


async def test_a_deleted_message_is_not_published_again() -> None:
    n, store, bus, _, _ = notifier()
    await n.send(SPEC, OCC)
    await store.delete_inbox_message("orders", "ada", MID, NOW_MS)
    assert (await n.send(SPEC, OCC)).ok and len(bus.published) == 1


async def test_another_channel_type_fails_permanently() -> None:
    n, *_ = notifier()
    out = await n.send(SmsSpec("+4915112345678", "hi"), OCC)
    assert not out.ok and out.permanent
