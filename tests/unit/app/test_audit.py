"""``AuditTrail``: recording is bounded (entries past ``max_pending`` in flight are dropped
and counted) and stamped by the clock; listing clamps the window to the retention."""

from __future__ import annotations

from trigger_service.adapters.memory.store import MemoryStore
from trigger_service.app.audit import AuditTrail
from trigger_service.config.audit import AuditSettings
from trigger_service.core.audit import AuditAction
from trigger_service.core.time.clock import ManualClock
from trigger_service.platform.metrics import InMemoryMetrics

NOW_MS = 1_700_000_000_000


async def test_entries_past_the_bound_are_dropped_and_counted() -> None:
    store, metrics = MemoryStore(), InMemoryMetrics()
    trail = AuditTrail(AuditSettings(max_pending=2), store, ManualClock(NOW_MS), metrics)
    for n in range(3):  # nothing has run yet: all three are in flight at once
        trail.record(actor="orders", caller="orders", action=AuditAction.CANCEL,
                     target=f"trg_{n}", request_id=f"r{n}", outcome="ok")
    await trail.drain()
    assert sorted(e.target for e in store.audit_entries.values()) == ["trg_0", "trg_1"]
    assert {e.at_ms for e in store.audit_entries.values()} == {NOW_MS}
    snapshot = metrics.snapshot()
    assert (snapshot.get("audit_entries_total"), snapshot.get("audit_write_failures_total")) == (
        2, 1)


async def test_a_listing_reaches_back_to_the_retention_at_most() -> None:
    trail = AuditTrail(AuditSettings(retention_days=1), MemoryStore(), ManualClock(NOW_MS),
                       InMemoryMetrics())
    q = trail.query(caller="orders", since_ms=0)
    assert (q.since_ms, q.until_ms) == (NOW_MS - 86_400_000, NOW_MS)
    assert trail.query(caller=None, since_ms=NOW_MS - 5).since_ms == NOW_MS - 5
