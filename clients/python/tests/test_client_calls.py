"""Pagination as iterators, the requests each call makes, and the answers' models."""

from __future__ import annotations

from datetime import UTC, datetime
from urllib.parse import parse_qs

import httpx
import pytest

from mock_api import CREATED, Script, trigger_json
from trigger_client import AsyncTriggerClient, DstPolicy, Status, TriggerClient


def pages(request: httpx.Request) -> httpx.Response:
    """Three pages of two triggers; the cursor is the page number."""
    q = parse_qs(request.url.query.decode())
    page = int(q.get("cursor", ["0"])[0])
    items = [trigger_json(2 * page + k) for k in (0, 1)]
    return httpx.Response(200, json={"items": items,
                                     "nextCursor": str(page + 1) if page < 2 else None})


def test_list_iterates_every_page_lazily(script: Script) -> None:
    script.answers = [pages]
    c = TriggerClient("http://api", "t", transport=script.transport)
    it = c.triggers.list(Status.PENDING, page_size=2)
    first = next(it)
    assert len(script.requests) == 1 and first.payload == {"n": 0}
    rest = list(it)
    assert [t.payload["n"] for t in rest] == [1, 2, 3, 4, 5]
    assert [r.url.params.get("cursor") for r in script.requests] == [None, "1", "2"]
    assert {r.url.params["status"] for r in script.requests} == {"PENDING"}
    assert {r.url.params["limit"] for r in script.requests} == {"2"}


async def test_async_list_iterates_every_page(script: Script) -> None:
    script.answers = [pages]
    async with AsyncTriggerClient("http://api", "t", transport=script.transport) as c:
        got = [t.trigger_id async for t in c.triggers.list()]
    assert len(got) == 6 and len(set(got)) == 6


def test_create_body_is_the_apis_camel_case(script: Script) -> None:
    script.answers = [httpx.Response(201, json=CREATED)]
    c = TriggerClient("http://api", "t", transport=script.transport)
    c.triggers.create(callback_url="http://x/cb", payload={"a": 1},
                      local_time=datetime(2027, 3, 14, 9, 0), time_zone="Europe/Berlin",
                      rrule="FREQ=DAILY", dst_policy=DstPolicy(gap="skip"))
    assert script.bodies() == [{"callbackUrl": "http://x/cb", "payload": {"a": 1},
                                "localTime": "2027-03-14T09:00:00",
                                "timeZone": "Europe/Berlin", "rrule": "FREQ=DAILY",
                                "dstPolicy": {"gap": "skip", "overlap": "first"}}]


def test_snooze_patch_ack_cancel_paths_and_bodies(script: Script) -> None:
    tid = CREATED["triggerId"]
    script.answers = [
        httpx.Response(201, json={**CREATED, "snoozedFrom": tid}),
        httpx.Response(200, json=trigger_json(1, rrule=None)),
        httpx.Response(200, json={"triggerId": tid, "acknowledged": True, "status": "FIRED"}),
        httpx.Response(200, json={"triggerId": tid, "status": "CANCELLED"})]
    c = TriggerClient("http://api", "t", transport=script.transport)
    snoozed = c.triggers.snooze(tid, fire_at=datetime(2027, 1, 1, tzinfo=UTC))
    c.triggers.patch(tid, rrule=None, delay_s=60)
    c.triggers.ack(tid, f"{tid}.1")
    cancelled = c.triggers.cancel(tid)
    assert snoozed.snoozed_from == tid and cancelled.status is Status.CANCELLED
    assert [(r.method, r.url.path) for r in script.requests] == [
        ("POST", f"/v1/triggers/{tid}/snooze"), ("PATCH", f"/v1/triggers/{tid}"),
        ("POST", f"/v1/triggers/{tid}/ack"), ("DELETE", f"/v1/triggers/{tid}")]
    assert script.bodies()[:3] == [{"fireAt": "2027-01-01T00:00:00+00:00"},
                                   {"rrule": None, "delaySeconds": 60},
                                   {"occurrenceId": f"{tid}.1"}]
    assert "Idempotency-Key" in script.requests[0].headers


def test_a_path_parameter_cannot_change_the_route(script: Script) -> None:
    script.answers = [httpx.Response(200, json=trigger_json(1))]
    TriggerClient("http://api", "t", transport=script.transport).triggers.get("../stats")
    assert script.requests[0].url.raw_path == b"/v1/triggers/..%2Fstats"


def test_trigger_model_reads_every_field() -> None:
    t = trigger_json(3, channels=[{"type": "inbox", "status": "DELIVERED", "attempts": 1,
                                   "lastError": None, "providerCode": None,
                                   "providerMessageId": "msg_1",
                                   "deliveredAt": "2026-12-01T14:00:01.000Z", "dueAt": None}],
                     dstPolicy={"gap": "skip", "overlap": "both"}, exdates=["2027-01-01T09:00"])
    from trigger_client import Trigger
    m = Trigger.from_json(t)
    assert m.fire_at == datetime(2026, 12, 1, 14, tzinfo=UTC) and m.raw is t
    assert m.channels is not None and m.channels[0].delivered_at is not None
    assert m.dst_policy == DstPolicy("skip", "both") and m.exdates == ("2027-01-01T09:00",)


@pytest.mark.parametrize("status", [200, 503])
def test_readiness_is_an_answer_not_an_error(script: Script, status: int) -> None:
    body = {"status": "ready"} if status == 200 else {
        "error": "not_ready", "message": "m", "down": ["redis"]}
    script.answers = [httpx.Response(status, json=body)]
    health = TriggerClient("http://api", transport=script.transport).ops.readyz()
    assert health.ok is (status == 200) and health.down == (() if status == 200 else ("redis",))


def test_deadlines_on_create_patch_and_the_model(script: Script) -> None:
    tid = CREATED["triggerId"]
    script.answers = [httpx.Response(201, json=CREATED),
                      httpx.Response(200, json=trigger_json(
                          1, expiresAt="2027-01-01T00:00:00.000Z", maxLatenessSeconds=90))]
    c = TriggerClient("http://api", "t", transport=script.transport)
    c.triggers.create(callback_url="http://x/cb", delay_s=60,
                      expires_at=datetime(2027, 1, 1, tzinfo=UTC), max_lateness_s=90)
    patched = c.triggers.patch(tid, expires_at=None, max_lateness_s=90)
    assert script.bodies() == [
        {"callbackUrl": "http://x/cb", "delaySeconds": 60,
         "expiresAt": "2027-01-01T00:00:00+00:00", "maxLatenessSeconds": 90},
        {"expiresAt": None, "maxLatenessSeconds": 90}]
    assert patched.expires_at == datetime(2027, 1, 1, tzinfo=UTC)
    assert patched.max_lateness_s == 90


async def test_async_create_sends_the_deadlines(script: Script) -> None:
    script.answers = [httpx.Response(201, json=CREATED)]
    async with AsyncTriggerClient("http://api", "t", transport=script.transport) as c:
        await c.triggers.create(callback_url="http://x/cb", delay_s=1, max_lateness_s=5,
                                expires_at="2027-01-01T00:00:00Z")
    assert script.bodies() == [{"callbackUrl": "http://x/cb", "delaySeconds": 1,
                                "maxLatenessSeconds": 5, "expiresAt": "2027-01-01T00:00:00Z"}]
