"""Notification channels end to end on the real stack: API → Cassandra → SQS → dispatcher →
a real SMTP server (aiosmtpd), Twilio- and FCM-format simulators, and the inbox (Cassandra,
Redis pub/sub, the SSE stream through the real API)."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from typing import Any

import pytest

from dispatcher.channels.inbox import InboxNotifier
from dispatcher.channels.notifiers import NotifierRouter
from tests.integration.conftest import Stack
from tests.integration.helpers import dispatcher_process, sigkill
from tests.integration.helpers import until as until  # (test_budgets imports it from here)
from tests.providers import (
    PushSimulator,
    Reply,
    SmsSimulator,
    SmtpSink,
    fcm_error,
    slow,
    twilio_error,
)
from trigger_service.adapters import schema
from trigger_service.adapters.redis.client import open_from_settings
from trigger_service.adapters.redis.inbox_bus import RedisInboxBus, open_listener
from trigger_service.core.time.clock import SystemClock
from trigger_service.core.time.timing import parse_rfc3339_ms
from trigger_service.platform.metrics import InMemoryMetrics

pytestmark = pytest.mark.integration

PHONE = "+4915112345678"


@dataclass
class Providers:
    smtp: SmtpSink
    sms: SmsSimulator
    push: PushSimulator
    notifiers: NotifierRouter
    env: dict[str, str]  # what points a dispatcher process at them


@pytest.fixture
async def stand_by(stack: Stack) -> AsyncIterator[Providers]:
    """The providers and notifiers sending to them (no dispatcher yet), and the API
    streaming inboxes from the real Redis."""
    smtp, sms, push = SmtpSink(), SmsSimulator(), PushSimulator()
    port = await smtp.start()
    sms_url, push_url = await sms.start(), await push.start()
    s = stack.settings
    s = replace(s, smtp=replace(s.smtp, port=port), sms=replace(s.sms, base_url=sms_url),
                push=replace(s.push, base_url=push_url))
    api_bus = RedisInboxBus(stack.redis, open_listener(s.redis.url))
    stack.runtime.inbox_bus = api_bus
    client = open_from_settings(s.redis)
    inbox = InboxNotifier(stack.runtime.store, RedisInboxBus(client), SystemClock(),
                          InMemoryMetrics(), s.inbox.retention_days * 86_400)
    notifiers = NotifierRouter.from_settings(s, inbox=inbox)
    await notifiers.open()
    p = Providers(smtp, sms, push, notifiers, {
        "TRIGGER_SMTP_HOST": "127.0.0.1", "TRIGGER_SMTP_PORT": str(port),
        "TRIGGER_SMS_BASE_URL": sms_url, "TRIGGER_PUSH_BASE_URL": push_url})
    try:
        yield p
    finally:
        await notifiers.close()
        await client.aclose()
        await api_bus.close()
        await p.sms.stop()
        await p.push.stop()
        await p.smtp.stop()


def four(stack: Stack, token: str = "tok-1", phone: str = PHONE) -> list[dict[str, Any]]:
    return [{"type": "email", "to": "ada@example.com", "subject": "Standup", "text": "Now"},
            {"type": "sms", "to": phone, "text": "Standup now"},
            {"type": "push", "token": token, "title": "Standup", "body": "Now"},
            {"type": "inbox", "recipient": "ada", "title": "Standup", "body": "Now"}]


@pytest.fixture
async def providers(stack: Stack, stand_by: Providers) -> Providers:
    """``stand_by`` with a dispatcher sending to them."""
    await stack.start_dispatcher(notifiers=stand_by.notifiers)
    return stand_by


async def create(stack: Stack, **body: Any) -> str:
    status, created, _ = await stack.post({"payload": {"k": 1}, **body})
    assert status == 201, created
    return str(created["triggerId"])


async def view(stack: Stack, tid: str) -> Any:
    resp = await stack.client.get(f"/v1/triggers/{tid}", headers=stack.auth())
    assert resp.status == 200
    return await resp.json()


async def test_a_four_channel_reminder_reaches_every_channel_once(
        stack: Stack, providers: Providers) -> None:
    resp = await stack.client.get("/v1/inbox/ada/stream", headers=stack.auth())
    assert resp.status == 200
    channel = schema.inbox_channel(stack.caller, "ada")
    assert await until(lambda: _subscribed(stack, channel), 5)
    tid = await create(stack, channels=four(stack), delaySeconds=2)
    fire_at_ms = parse_rfc3339_ms((await view(stack, tid))["fireAt"])
    line = b""
    while not line.startswith(b"data:"):
        line = await asyncio.wait_for(resp.content.readline(), 30)
    sse_ms = time.time_ns() // 1_000_000
    message = json.loads(line[5:])
    resp.close()
    assert message["triggerId"] == tid and message["title"] == "Standup"
    assert await until(lambda: _fired(stack, tid), 20)
    got = await view(stack, tid)
    assert [(c["type"], c["status"]) for c in got["channels"]] == [
        ("email", "DELIVERED"), ("sms", "DELIVERED"), ("push", "DELIVERED"),
        ("inbox", "DELIVERED")]
    assert len(providers.smtp.messages) == 1 and len(providers.sms.requests) == 1
    assert len(providers.push.requests) == 1
    mail = providers.smtp.messages[0].message
    assert mail["Message-ID"].startswith(f"<{tid}.1.0@") and "/ack/" in mail.get_content()
    assert providers.sms.requests[0].body["To"] == PHONE
    sends = [providers.sms.requests[0].at_ms, providers.push.requests[0].at_ms]
    assert all(at >= fire_at_ms for at in sends)  # never early
    print(f"\nlag: sms {sends[0] - fire_at_ms} ms, push {sends[1] - fire_at_ms} ms, "
          f"inbox SSE {sse_ms - fire_at_ms} ms")


async def _fired(stack: Stack, tid: str) -> bool:
    return bool((await view(stack, tid))["status"] in ("FIRED", "FAILED"))


async def test_permanent_provider_errors_take_one_attempt_each(
        stack: Stack, providers: Providers) -> None:
    providers.sms.script("+15005550001", twilio_error(400, 21211, "invalid 'To' number"))
    providers.push.script("gone-token", fcm_error(404, "NOT_FOUND", "UNREGISTERED"))
    tid = await create(stack, channels=four(stack, "gone-token", "+15005550001"),
                       delaySeconds=1)
    assert await until(lambda: _fired(stack, tid), 20)
    await asyncio.sleep(2.5)  # (no retry comes: the backoff here is 1 s)
    got = await view(stack, tid)
    assert got["status"] == "FAILED"
    by_type = {c["type"]: c for c in got["channels"]}
    assert (by_type["sms"]["status"], by_type["sms"]["providerCode"]) == ("FAILED", "21211")
    assert (by_type["push"]["status"], by_type["push"]["providerCode"]) == ("FAILED",
                                                                          "UNREGISTERED")
    assert by_type["email"]["status"] == by_type["inbox"]["status"] == "DELIVERED"
    assert len(providers.sms.requests) == 1 and len(providers.push.requests) == 1
    resp = await stack.client.get(f"/v1/dead-letters/{tid}.1", headers=stack.auth())
    letter = await resp.json()
    assert resp.status == 200 and "21211" in letter["lastError"]


async def test_a_provider_503_twice_then_delivered_on_attempt_three(
        stack: Stack, providers: Providers) -> None:
    providers.sms.script(PHONE, twilio_error(503), twilio_error(503))
    tid = await create(stack, channels=four(stack), delaySeconds=1)
    assert await until(lambda: _fired(stack, tid), 30)
    got = await view(stack, tid)
    sms = next(c for c in got["channels"] if c["type"] == "sms")
    assert got["status"] == "FIRED" and (sms["status"], sms["attempts"]) == ("DELIVERED", 3)
    assert [r.status for r in providers.sms.requests] == [503, 503, 201]
    assert len(providers.smtp.messages) == len(providers.push.requests) == 1


ESCALATION = {"steps": [{"afterSeconds": 0, "channel": 0}, {"afterSeconds": 3, "channel": 1}]}


def ladder(stack: Stack) -> list[dict[str, Any]]:
    return four(stack)[2:0:-1]  # push first, then SMS


async def test_escalation_acknowledged_after_step_one_never_sends_step_two(
        stack: Stack, providers: Providers) -> None:
    tid = await create(stack, channels=ladder(stack), escalation=ESCALATION, delaySeconds=1)
    assert await until(lambda: _count(providers.push.requests, 1), 20)
    resp = await stack.client.post(f"/v1/triggers/{tid}/ack", headers=stack.auth())
    assert resp.status == 200, await resp.text()
    assert await until(lambda: _fired(stack, tid), 20)
    await asyncio.sleep(1)
    got = await view(stack, tid)
    assert [c["status"] for c in got["channels"]] == ["DELIVERED", "SKIPPED"]
    assert providers.sms.requests == [] and got["acknowledged"] is True
    resp = await stack.client.get(f"/v1/triggers/{tid}/attempts", headers=stack.auth())
    items = (await resp.json())["items"]  # newest first: the skipped one after the push
    assert [(a["channel"], a["outcome"]) for a in items] == [("sms", "skipped"),
                                                            ("push", "delivered")], items
    assert items[0]["error"] == "sms: not sent, the occurrence was acknowledged"


async def test_escalation_not_acknowledged_sends_step_two_once(
        stack: Stack, providers: Providers) -> None:
    tid = await create(stack, channels=ladder(stack), escalation=ESCALATION, delaySeconds=1)
    fire_at_ms = parse_rfc3339_ms((await view(stack, tid))["fireAt"])
    assert await until(lambda: _fired(stack, tid), 30)
    # A step is due at the fire time + its afterSeconds (docs/channels.md), not after the step
    # before it arrived: a late first step (a loaded machine) does not push the second one back.
    push_at, sms_at = providers.push.requests[0].at_ms, providers.sms.requests[0].at_ms
    assert len(providers.sms.requests) == 1
    assert push_at >= fire_at_ms and sms_at >= fire_at_ms + 3_000
    assert [c["status"] for c in (await view(stack, tid))["channels"]] == ["DELIVERED"] * 2


async def test_a_channel_in_quiet_hours_is_deferred_and_shown_so(
        stack: Stack, providers: Providers) -> None:
    chans = four(stack)[:2]
    chans[1]["quietHours"] = {"start": "00:00", "end": "23:59", "timeZone": "Pacific/Kiritimati"}
    now_local = time.gmtime(time.time() + 14 * 3600)
    if now_local.tm_hour == 23 and now_local.tm_min >= 58:
        pytest.skip("too close to the end of the quiet window")
    tid = await create(stack, channels=chans, delaySeconds=1)
    assert await until(lambda: _count(providers.smtp.messages, 1), 20)
    await asyncio.sleep(1)
    got = await view(stack, tid)
    sms = got["channels"][1]
    assert got["status"] == "PENDING" and sms["status"] == "DEFERRED"
    assert sms["dueAt"].endswith("Z") and providers.sms.requests == []


async def _subscribed(stack: Stack, channel: str) -> bool:
    """A stream of ``channel``'s inbox is live in the API (on its one Redis subscription)."""
    bus = stack.runtime.inbox_bus
    assert isinstance(bus, RedisInboxBus)
    return bus.local_subscribers() > 0


async def _count(items: list[Any], n: int) -> bool:
    return len(items) >= n


async def test_a_dispatcher_killed_between_two_channels_resends_only_the_unrecorded(
        stack: Stack, stand_by: Providers) -> None:
    """SIGKILL a dispatcher process while its SMS is in flight (the other channels already
    recorded): the one that takes the claim over sends the SMS again (a counted takeover)
    and nothing else twice."""
    p = stand_by
    p.sms.script(PHONE, slow(Reply(201, {"sid": "SMslow"}), 30))
    env = {**os.environ, **stack.env, **p.env, "TRIGGER_DISPATCH_RECEIVERS": "1",
           "TRIGGER_DISPATCH_METRICS_PORT": "0"}
    async with dispatcher_process(env) as proc:
        tid = await create(stack, channels=four(stack), delaySeconds=1)

        async def three_recorded() -> bool:
            got = [c["status"] for c in (await view(stack, tid))["channels"]]
            return got.count("DELIVERED") == 3 and len(p.sms.requests) == 1

        assert await until(three_recorded, 40)
        await sigkill(proc)
    taker = await stack.start_dispatcher(notifiers=p.notifiers)
    assert await until(lambda: _fired(stack, tid), 60)
    got = await view(stack, tid)
    assert got["status"] == "FIRED"
    assert [c["status"] for c in got["channels"]] == ["DELIVERED"] * 4
    assert len(p.sms.requests) == 2  # the one in flight at the kill, and the takeover's
    assert len(p.smtp.messages) == len(p.push.requests) == 1
    resp = await stack.client.get("/v1/inbox/ada", headers=stack.auth())
    assert len((await resp.json())["items"]) == 1
    assert taker.metrics.snapshot().get("claim_takeovers_total") == 1
