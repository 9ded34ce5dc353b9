"""Event subscriptions in the SDK: the requests the sync and async clients make for
``/v1/event-subscriptions``, the models they read, and ``receiver.verify_event``."""

from __future__ import annotations

import base64
import json
import time
from datetime import UTC, datetime

import httpx
import pytest
from standardwebhooks.webhooks import Webhook

from mock_api import Script
from trigger_client import AsyncTriggerClient, InvalidSignature, TriggerClient
from trigger_client.receiver import verify, verify_event
from trigger_client.subscriptions import EventSubscription

SUB = {"name": "alerts", "url": "https://hooks.example.com/ev",
       "events": ["endpoint.disabled", "trigger.dead_lettered"]}
FAILED = {"eventId": "evt_1", "type": "trigger.dead_lettered", "at": "2026-01-01T00:00:00.000Z",
          "failedAt": "2026-01-01T10:00:00.000Z", "attempts": 8, "lastError": "HTTP 500",
          "data": {"triggerId": "trg_1"}}
SECRET = "whsec_" + base64.b64encode(b"n" * 32).decode()


def test_put_list_failures_delete(script: Script) -> None:
    script.answers = [httpx.Response(201, json=SUB), httpx.Response(200, json={"items": [SUB]}),
                      httpx.Response(200, json={"items": [FAILED]}),
                      httpx.Response(200, json={"name": "a b", "deleted": True})]
    c = TriggerClient("http://api", "t", transport=script.transport)
    made = c.subscriptions.put("alerts", SUB["url"], ["trigger.dead_lettered"])
    assert made == EventSubscription("alerts", SUB["url"],
                                     ("endpoint.disabled", "trigger.dead_lettered"))
    assert c.subscriptions.list() == [made]
    [f] = c.subscriptions.failures("alerts")
    assert (f.event_id, f.attempts, f.failed_at) == ("evt_1", 8,
                                                     datetime(2026, 1, 1, 10, tzinfo=UTC))
    assert c.subscriptions.delete("a b").deleted
    assert [(r.method, r.url.raw_path.decode()) for r in script.requests] == [
        ("PUT", "/v1/event-subscriptions/alerts"), ("GET", "/v1/event-subscriptions"),
        ("GET", "/v1/event-subscriptions/alerts/failures"),
        ("DELETE", "/v1/event-subscriptions/a%20b")]
    assert script.bodies()[0] == {"url": SUB["url"], "events": ["trigger.dead_lettered"]}


async def test_async_put_and_list(script: Script) -> None:
    script.answers = [httpx.Response(200, json=SUB), httpx.Response(200, json={"items": []})]
    async with AsyncTriggerClient("http://api", "t", transport=script.transport) as c:
        assert (await c.subscriptions.put("alerts", SUB["url"], ("endpoint.disabled",))).name \
            == "alerts"
        assert await c.subscriptions.list() == []


def test_an_event_verifies_like_a_callback_and_a_callback_check_refuses_it() -> None:
    body = json.dumps({"type": "trigger.dead_lettered", "at": "2026-01-01T00:00:05.000Z",
                       "data": {"triggerId": "trg_1", "occurrenceId": "trg_1.1"}})
    now = int(time.time())
    headers = {"webhook-id": "evt_" + "a" * 32, "webhook-timestamp": str(now),
               "webhook-signature": Webhook(SECRET).sign(
                   "evt_" + "a" * 32, datetime.fromtimestamp(now, UTC), body)}
    event = verify_event([SECRET], headers, body.encode())
    assert (event.event_id, event.type, event.data["occurrenceId"]) == (
        "evt_" + "a" * 32, "trigger.dead_lettered", "trg_1.1")
    with pytest.raises(InvalidSignature):
        verify([SECRET], headers, body)  # signed, but not a callback
    with pytest.raises(InvalidSignature):
        verify_event([SECRET], headers, body.replace("trg_1.1", "trg_1.2"))
