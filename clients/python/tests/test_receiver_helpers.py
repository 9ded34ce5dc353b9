"""receiver.verify (Standard Webhooks, several secrets, old timestamps refused) and the
Deduplicators (in-memory LRU)."""

from __future__ import annotations

import base64
import json
import time
from datetime import UTC, datetime

import pytest
from standardwebhooks.webhooks import Webhook

from trigger_client import InvalidSignature
from trigger_client._sse import SseParser
from trigger_client.receiver import AsyncDeduplicator, Deduplicator, verify

NEW = "whsec_" + base64.b64encode(b"n" * 32).decode()
OLD = "whsec_" + base64.b64encode(b"o" * 32).decode()
OCC = "trg_01JD5Z8Q3X4M2N6P7R8S9T0V1W.1"
BODY = json.dumps({"triggerId": OCC[:-2], "occurrenceId": OCC, "payload": {"a": 1},
                   "fireAt": "2026-12-01T14:00:00.000Z",
                   "scheduledAt": "2026-12-01T14:00:00.000Z"})


def signed(secrets: list[str], at_s: float, body: str = BODY) -> dict[str, str]:
    stamp = datetime.fromtimestamp(int(at_s), UTC)
    sigs = " ".join(Webhook(s).sign(OCC, stamp, body) for s in secrets)
    return {"Webhook-Id": OCC, "Webhook-Timestamp": str(int(at_s)), "Webhook-Signature": sigs,
            "X-Trigger-Attempt": "2"}


def test_a_callback_signed_by_the_old_secret_verifies_with_both_given() -> None:
    cb = verify([NEW, OLD], signed([OLD], time.time()), BODY.encode())
    assert (cb.occurrence_id, cb.attempt, cb.payload) == (OCC, 2, {"a": 1})


def test_a_wrong_secret_or_a_changed_body_is_refused() -> None:
    with pytest.raises(InvalidSignature):
        verify(NEW, signed([OLD], time.time()), BODY)
    with pytest.raises(InvalidSignature):
        verify(NEW, signed([NEW], time.time()), BODY.replace('"a": 1', '"a": 2'))


def test_an_old_signed_request_replayed_is_refused() -> None:
    headers = signed([NEW], time.time() - 301)
    with pytest.raises(InvalidSignature, match="tolerance"):
        verify(NEW, headers, BODY)
    with pytest.raises(InvalidSignature, match="tolerance"):  # a stricter receiver
        verify(NEW, signed([NEW], time.time() - 40), BODY, tolerance_s=30)
    with pytest.raises(ValueError):
        verify(NEW, headers, BODY, tolerance_s=3600)  # looser than the library: refused


def test_missing_headers_are_refused() -> None:
    with pytest.raises(InvalidSignature):
        verify(NEW, {}, BODY)


def test_in_memory_dedup_claims_once_releases_and_forgets_oldest() -> None:
    now = [0.0]
    d = Deduplicator.in_memory(max_entries=2, ttl_s=10, clock_s=lambda: now[0])
    assert d.claim("a") and not d.claim("a")
    d.release("a")
    assert d.claim("a")
    assert d.claim("b") and d.claim("c")  # "a" forgotten: over max_entries
    assert d.claim("a")
    now[0] = 11.0  # every entry expired
    assert d.claim("b")


async def test_async_in_memory_dedup() -> None:
    d = AsyncDeduplicator.in_memory()
    assert await d.claim(OCC) and not await d.claim(OCC)
    await d.release(OCC)
    assert await d.claim(OCC)


def test_sse_parser_events_ids_and_comments() -> None:
    p = SseParser()
    lines = [": ping", "id: msg_1", "data: {\"a\":", "data: 1}", "", "", "event: x",
             "data:2", ""]
    events = [e for e in map(p.feed, lines) if e is not None]
    assert [(e.id, e.event, e.data) for e in events] == [
        ("msg_1", "message", "{\"a\":\n1}"), ("msg_1", "x", "2")]
    assert p.comments == 1
