"""The audit log listings: the requests the sync and async clients make and the entries they
read."""

from __future__ import annotations

from datetime import UTC, datetime

import httpx

from mock_api import Script
from trigger_client import AsyncTriggerClient, AuditEntry, TriggerClient

ENTRY = {"at": "2026-11-30T10:12:22.104Z", "actor": "orders", "action": "cancel",
         "target": "trg_1", "requestId": "a7f3c4d43c5fe7f4", "outcome": "ok"}


def test_audit_reads_a_page_of_typed_entries(script: Script) -> None:
    script.answers = [httpx.Response(200, json={"items": [ENTRY], "nextCursor": "c2"}),
                      httpx.Response(200, json={"items": [], "nextCursor": None})]
    c = TriggerClient("http://api", "t", transport=script.transport)
    page = c.audit(since="2026-11-30T00:00:00Z", action="cancel")
    assert page.items == (AuditEntry(datetime(2026, 11, 30, 10, 12, 22, 104_000, tzinfo=UTC),
                                     "orders", "cancel", "trg_1", "a7f3c4d43c5fe7f4", "ok"),)
    assert page.next_cursor == "c2"
    assert c.ops.audit(actor="alice", cursor="c2").items == ()
    [first, second] = script.requests
    assert (first.url.path, dict(first.url.params)) == (
        "/v1/audit", {"since": "2026-11-30T00:00:00Z", "action": "cancel"})
    assert (second.url.path, dict(second.url.params)) == (
        "/v1/ops/audit", {"actor": "alice", "cursor": "c2"})


async def test_the_async_client_reads_the_same(script: Script) -> None:
    script.answers = [httpx.Response(200, json={"items": [ENTRY], "nextCursor": None})] * 2
    async with AsyncTriggerClient("http://api", "t", transport=script.transport) as c:
        assert len((await c.audit()).items) == len((await c.ops.audit()).items) == 1
    assert [r.url.path for r in script.requests] == ["/v1/audit", "/v1/ops/audit"]
