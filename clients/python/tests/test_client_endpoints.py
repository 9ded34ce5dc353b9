"""Endpoint health in the SDK: the requests the sync and async clients make for
``/v1/endpoints`` and ``/v1/ops/endpoints`` and the models they read."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import httpx
import pytest

from mock_api import Script
from trigger_client import AsyncTriggerClient, TriggerClient

ITEM = {"caller": "orders", "origin": "https://hooks.example.com:443", "state": "disabled",
        "failingSince": "2026-01-01T00:00:00.000Z", "lastFailureAt": "2026-01-06T00:00:00.000Z",
        "failures": 812, "lastError": "HTTP 503", "disabledAt": "2026-01-06T00:00:00.000Z"}
ENABLED = {"caller": "orders", "origin": "https://hooks.example.com:443", "state": "healthy",
           "previousState": "disabled",
           "replay": {"triggerJobId": "tjob_1", "deadLetterJobId": None}}


def test_list_and_enable_with_a_replay_time(script: Script) -> None:
    script.answers = [httpx.Response(200, json={"items": [ITEM]}),
                      httpx.Response(200, json=ENABLED)]
    c = TriggerClient("http://api", "t", transport=script.transport)
    [e] = c.endpoints.list()
    assert (e.state, e.failures, e.failing_since) == ("disabled", 812,
                                                       datetime(2026, 1, 1, tzinfo=UTC))
    got = c.endpoints.enable("https://hooks.example.com", datetime(
        2026, 1, 5, 1, tzinfo=timezone(timedelta(hours=1))))
    assert (got.previous_state, got.trigger_job_id, got.dead_letter_job_id) == (
        "disabled", "tjob_1", None)
    assert [(r.method, r.url.path) for r in script.requests] == [
        ("GET", "/v1/endpoints"), ("POST", "/v1/endpoints/enable")]
    assert script.bodies()[1] == {"origin": "https://hooks.example.com",
                                  "replaySince": "2026-01-05T00:00:00+00:00"}
    with pytest.raises(ValueError):
        c.endpoints.enable("https://h", datetime(2026, 1, 1))  # no zone: refused here


async def test_async_operators_list_all_and_enable_for_a_caller(script: Script) -> None:
    script.answers = [httpx.Response(200, json={"items": [ITEM, ITEM | {"caller": "b",
                                                                        "disabledAt": None,
                                                                        "state": "failing"}]}),
                      httpx.Response(200, json=ENABLED | {"previousState": None,
                                                          "replay": {"triggerJobId": None,
                                                                     "deadLetterJobId": None}})]
    async with AsyncTriggerClient("http://api", "t", transport=script.transport) as c:
        rows = await c.endpoints.list_all()
        assert [(e.caller, e.disabled_at is None) for e in rows] == [("orders", False),
                                                                      ("b", True)]
        got = await c.endpoints.enable_for("a b", "https://hooks.example.com")
        assert got.previous_state is None
    assert [r.url.raw_path.decode() for r in script.requests] == [
        "/v1/ops/endpoints", "/v1/ops/endpoints/a%20b/enable"]
    assert script.bodies()[1] == {"origin": "https://hooks.example.com"}
