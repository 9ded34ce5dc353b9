"""``AuditTrail``: recording is bounded (entries past ``max_pending`` in flight, or past their
caller's share of it, are dropped and counted by reason) and stamped by the clock; listing
clamps the window to the retention."""

from __future__ import annotations

from trigger_service.adapters.memory.store import MemoryStore
from trigger_service.app.audit import CALLER_SHARE_DIVISOR, AuditTrail
from trigger_service.config.audit import AuditSettings
from trigger_service.core.audit import AuditAction
from trigger_service.core.time.clock import ManualClock
from trigger_service.platform.metrics import InMemoryMetrics

NOW_MS = 1_700_000_000_000


async def test_entries_past_the_bound_are_dropped_and_counted() -> None:
    store, metrics = MemoryStore(), InMemoryMetrics()
    trail = AuditTrail(AuditSettings(max_pending=2), store, ManualClock(NOW_MS), metrics)
    for n in range(3):  # nothing has run yet: all three are in flight at once
        trail.record(actor=f"c{n}", caller=f"c{n}", action=AuditAction.CANCEL,
                     target=f"trg_{n}", request_id=f"r{n}", outcome="ok")
    await trail.drain()
    assert sorted(e.target for e in store.audit_entries.values()) == ["trg_0", "trg_1"]
    assert {e.at_ms for e in store.audit_entries.values()} == {NOW_MS}
    snapshot = metrics.snapshot()
    assert (snapshot.get("audit_entries_total"),
            snapshot.get('audit_write_failures_total{reason="overflow"}')) == (2, 1)


async def test_one_callers_burst_leaves_room_for_another_callers_entries() -> None:
    store, metrics = MemoryStore(), InMemoryMetrics()
    trail = AuditTrail(AuditSettings(max_pending=8), store, ManualClock(NOW_MS), metrics)
    share = 8 // CALLER_SHARE_DIVISOR
    for n in range(8):  # nothing has run yet: a's whole burst is in flight at once
        trail.record(actor="a", caller="a", action=AuditAction.CANCEL, target=f"trg_a{n}",
                     request_id=f"ra{n}", outcome="ok")
    trail.record(actor="b", caller="b", action=AuditAction.CANCEL, target="trg_b",
                 request_id="rb", outcome="ok")
    trail.record(actor="ops", caller=None, action=AuditAction.CANCEL, target="trg_op",
                 request_id="rop", outcome="ok")  # an operator: a share of its own
    await trail.drain()
    targets = sorted(e.target for e in store.audit_entries.values())
    assert targets == sorted([f"trg_a{n}" for n in range(share)] + ["trg_b", "trg_op"])
    snapshot = metrics.snapshot()
    assert snapshot.get('audit_write_failures_total{reason="caller_share"}') == 8 - share
    assert snapshot.get("audit_entries_total") == share + 2
    # The share is of the entries in flight: once a's are written, a records again.
    trail.record(actor="a", caller="a", action=AuditAction.CANCEL, target="trg_a_next",
                 request_id="ra_next", outcome="ok")
    await trail.drain()
    assert any(e.target == "trg_a_next" for e in store.audit_entries.values())


async def test_a_listing_reaches_back_to_the_retention_at_most() -> None:
    trail = AuditTrail(AuditSettings(retention_days=1), MemoryStore(), ManualClock(NOW_MS),
                       InMemoryMetrics())
    q = trail.query(caller="orders", since_ms=0)
    assert (q.since_ms, q.until_ms) == (NOW_MS - 86_400_000, NOW_MS)
    assert trail.query(caller=None, since_ms=NOW_MS - 5).since_ms == NOW_MS - 5
