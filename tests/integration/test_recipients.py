"""Recipients on the real stack: Cassandra, LocalStack SQS, Redis, the API, a
dispatcher and the SMS provider simulator. A daily reminder for a person who moves from New
York to Tokyo fires at its wall time in Tokyo, once; a changed phone number reaches a pending
SMS reminder; a deleted recipient's reminders dead-letter with the reason (at delete time,
and at send time when the delete's own pass never saw them)."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from tests.integration.conftest import Stack
from tests.integration.helpers import until
from tests.integration.test_channels import Providers, stand_by
from trigger_service.core.time.timing import parse_rfc3339_ms

pytestmark = pytest.mark.integration
__all__ = ["stand_by"]  # the providers fixture

TOKYO = ZoneInfo("Asia/Tokyo")


async def put(stack: Stack, rid: str, body: dict[str, Any]) -> int:
    resp = await stack.client.put(f"/v1/recipients/{rid}", json=body, headers=stack.auth())
    assert resp.status in (200, 201), await resp.text()
    return resp.status


async def view(stack: Stack, tid: str) -> Any:
    resp = await stack.client.get(f"/v1/triggers/{tid}", headers=stack.auth())
    assert resp.status == 200
    return await resp.json()


async def _moved_on(stack: Stack, tid: str) -> bool:
    return bool((await view(stack, tid))["occurrencesFired"] == 1)


async def test_a_daily_reminder_follows_its_recipient_from_new_york_to_tokyo(
        stack: Stack) -> None:
    await put(stack, "ada", {"timeZone": "America/New_York"})
    # The rule's time of day: Tokyo's wall time 25 s from now (so the test need not wait
    # for a morning); in New York that wall time is half a day away.
    wall = (datetime.now(UTC) + timedelta(seconds=25)).astimezone(TOKYO).replace(
        microsecond=0, tzinfo=None)
    status, created, _ = await stack.post(stack.body(
        recipient="ada", timeZone="recipient", localTime=wall.isoformat(), rrule="FREQ=DAILY"))
    assert status == 201, created
    tid = created["triggerId"]
    before = await view(stack, tid)
    assert (before["timeZone"], before["resolvedTimeZone"]) == ("recipient", "America/New_York")
    assert parse_rfc3339_ms(before["fireAt"]) - time.time() * 1000 > 3_600_000
    await stack.start_dispatcher()
    assert await put(stack, "ada", {"timeZone": "Asia/Tokyo"}) == 200
    after = await view(stack, tid)
    expected_ms = int(wall.replace(tzinfo=TOKYO).timestamp() * 1000)
    assert after["resolvedTimeZone"] == "Asia/Tokyo"
    assert parse_rfc3339_ms(after["fireAt"]) == expected_ms
    rec = stack.receiver
    assert await rec.wait_for(lambda: len(rec.for_trigger(tid)) >= 1, timeout_s=60)
    arrival = rec.for_trigger(tid)[0]
    assert arrival.at_ms >= expected_ms  # never early
    # The outcome (the series moved on) is written just after the callback answered.
    assert await until(lambda: _moved_on(stack, tid), timeout_s=10)
    nxt = await view(stack, tid)
    assert nxt["status"] == "PENDING" and nxt["occurrencesFired"] == 1
    assert parse_rfc3339_ms(nxt["nextFireAt"]) == expected_ms + 86_400_000  # a day later
    await asyncio.sleep(3)  # nothing more: no second delivery, none at New York's time
    assert len(rec.for_trigger(tid)) == 1


async def test_a_changed_phone_number_reaches_a_pending_sms_reminder(
        stack: Stack, stand_by: Providers) -> None:
    await put(stack, "bob", {"timeZone": "Europe/Berlin", "phone": "+15005550100"})
    status, created, _ = await stack.post({
        "recipient": "bob", "delaySeconds": 3, "channels": [{"type": "sms"}],
        "message": {"text": "Your table is ready"}})
    assert status == 201, created
    tid = created["triggerId"]
    await put(stack, "bob", {"timeZone": "Europe/Berlin", "phone": "+15005550199"})
    await stack.start_dispatcher(notifiers=stand_by.notifiers)
    got = await stack.wait_status(tid, "FIRED", timeout_s=30)
    assert got["status"] == "FIRED", got
    assert [r.body["To"] for r in stand_by.sms.requests] == ["+15005550199"]
    assert stand_by.sms.requests[0].body["Body"].startswith("Your table is ready")


async def test_a_deleted_recipients_reminders_dead_letter_with_the_reason(
        stack: Stack) -> None:
    await put(stack, "cy", {"timeZone": "UTC", "phone": "+15005550101"})
    later = await stack.post({"recipient": "cy", "delaySeconds": 600,
                              "channels": [{"type": "sms"}], "message": {"text": "x"}})
    soon = await stack.post({"recipient": "cy", "delaySeconds": 2,
                             "channels": [{"type": "sms"}], "message": {"text": "y"}})
    assert later[0] == soon[0] == 201
    # The second one's send finds no profile: as if the delete had crashed before its pass.
    await stack.runtime.recipients.delete_profile(stack.caller, "cy")
    await stack.start_dispatcher()
    sent = await stack.wait_status(soon[1]["triggerId"], "FAILED", timeout_s=30)
    assert sent["lastError"] == "recipient_deleted: recipient cy was deleted"
    # The API's delete (the profile again first): the pending one fails at once.
    await put(stack, "cy", {"timeZone": "UTC"})
    resp = await stack.client.delete("/v1/recipients/cy", headers=stack.auth())
    assert (await resp.json())["triggersFailed"] == 1
    for tid in (later[1]["triggerId"], soon[1]["triggerId"]):
        got = await view(stack, tid)
        assert got["status"] == "FAILED" and got["lastError"].startswith("recipient_deleted")
        resp = await stack.client.get(f"/v1/dead-letters/{tid}.1", headers=stack.auth())
        assert resp.status == 200, await resp.text()
        assert (await resp.json())["reason"] == "recipient_deleted"
