"""Daily send budgets on the real stack: counted in Redis per caller, channel type and UTC
day, one per recipient (an email to two addresses takes two); a spent budget refuses the next
registration 429 with Retry-After, an email to more addresses than a whole day's budget 422,
and a send past it is not made (the real SMTP server gets nothing) while the occurrence's
other channel goes out, then the occurrence is dead-lettered ``budget_exhausted``."""

from __future__ import annotations

import time

import pytest

from dispatcher.channels.caller_policy import CallerPolicyNotifiers, policies_of
from tests.integration.conftest import ANY_RECIPIENT, Stack
from tests.integration.test_channels import (  # noqa: F401 (fixtures)
    PHONE,
    Providers,
    create,
    stand_by,
    until,
    view,
)
from trigger_service.adapters import schema
from trigger_service.adapters.redis.limits import RedisSendBudget
from trigger_service.core.ports.limit import seconds_to_next_day, utc_day
from trigger_service.core.time.clock import SystemClock
from trigger_service.platform.metrics import InMemoryMetrics

pytestmark = pytest.mark.integration

EMAIL = {"type": "email", "to": "ada@example.com", "subject": "Standup", "text": "Now"}
SMS = {"type": "sms", "to": PHONE, "text": "Standup now"}


@pytest.fixture
def caller_controls() -> str:
    return ANY_RECIPIENT + "daily_budget = { email = 2, sms = 5 }\n"


async def spend(stack: Stack, channel: str, count: int) -> str:
    """Set today's count of the test caller's ``channel`` sends in Redis; its key."""
    key = schema.budget_key(stack.caller, channel, utc_day(int(time.time() * 1000)))
    await stack.redis.set(key, count, ex=120)
    return key


async def test_a_spent_budget_refuses_the_next_registration_429(stack: Stack) -> None:
    await spend(stack, "email", 1)
    status, created, _ = await stack.post({"delaySeconds": 600, "channels": [EMAIL]})
    assert status == 201, created  # one send left
    await spend(stack, "email", 2)
    before_s = seconds_to_next_day(int(time.time() * 1000))
    status, answer, headers = await stack.post({"delaySeconds": 600, "channels": [EMAIL]})
    assert status == 429 and answer["error"] == "quota_exceeded", answer
    assert 1 <= int(headers["Retry-After"]) <= before_s
    status, created, _ = await stack.post({"delaySeconds": 600, "channels": [SMS]})
    assert status == 201, created  # another channel type has its own budget


async def test_a_send_past_the_budget_dead_letters_that_channel(
        stack: Stack, stand_by: Providers) -> None:  # noqa: F811 (the fixture)
    budget = RedisSendBudget(stack.redis)
    notifiers = CallerPolicyNotifiers(stand_by.notifiers, policies_of(stack.runtime.callers),
                                      budget, SystemClock(), InMemoryMetrics())
    email_key = await spend(stack, "email", 1)
    sms_key = await spend(stack, "sms", 0)
    tid = await create(stack, channels=[EMAIL, SMS], delaySeconds=1)
    await spend(stack, "email", 2)  # spent by others between registration and the send
    await stack.start_dispatcher(notifiers=notifiers)
    assert await until(lambda: _finished(stack, tid))
    got = await view(stack, tid)
    assert got["status"] == "FAILED"
    by_type = {c["type"]: c for c in got["channels"]}
    assert (by_type["email"]["status"], by_type["email"]["providerCode"]) == (
        "FAILED", "budget_exhausted")
    assert by_type["sms"]["status"] == "DELIVERED"
    assert stand_by.smtp.messages == [] and len(stand_by.sms.requests) == 1
    assert await stack.redis.get(email_key) == "2"  # a refused send takes nothing
    assert await stack.redis.get(sms_key) == "1"  # the sent one was counted
    resp = await stack.client.get(f"/v1/dead-letters/{tid}.1", headers=stack.auth())
    letter = await resp.json()
    assert resp.status == 200 and letter["reason"] == "budget_exhausted", letter


async def test_an_email_takes_one_per_recipient(
        stack: Stack, stand_by: Providers) -> None:  # noqa: F811 (the fixture)
    two = EMAIL | {"to": ["ada@example.com", "bob@example.com"]}
    status, answer, _ = await stack.post({"delaySeconds": 600, "channels": [
        EMAIL | {"to": ["a@example.com", "b@example.com", "c@example.com"]}]})
    assert (status, answer["error"]) == (422, "recipient_not_allowed"), answer  # 3 > 2 a day
    await spend(stack, "email", 1)
    status, answer, _ = await stack.post({"delaySeconds": 600, "channels": [two]})
    assert (status, answer["error"]) == (429, "quota_exceeded"), answer  # one left, not two
    email_key = await spend(stack, "email", 0)
    tid = await create(stack, channels=[two], delaySeconds=1)
    budget = RedisSendBudget(stack.redis)
    await stack.start_dispatcher(notifiers=CallerPolicyNotifiers(
        stand_by.notifiers, policies_of(stack.runtime.callers), budget, SystemClock(),
        InMemoryMetrics()))
    assert await until(lambda: _finished(stack, tid))
    assert (await view(stack, tid))["status"] == "FIRED"
    assert await stack.redis.get(email_key) == "2"  # both addresses counted
    assert len(stand_by.smtp.messages) == 1
    day = utc_day(int(time.time() * 1000))
    assert not await budget.take(stack.caller, "email", day, 2)  # the day's two are taken
    assert await stack.redis.get(email_key) == "2"  # a refused take counts nothing


async def _finished(stack: Stack, tid: str) -> bool:
    return bool((await view(stack, tid))["status"] in ("FIRED", "FAILED"))
