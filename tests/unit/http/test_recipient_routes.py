"""Recipient controls through the API on the fakes: create, PATCH, snooze and preview refuse
a recipient the callers file does not list (422 recipient_not_allowed: email domains, SMS
country codes, Telegram chats and push tokens on the operator's bot and FCM project) and a
channel whose daily budget has not enough recipients left (429 quota_exceeded with
Retry-After), or could never have (422); an untrusted caller's HTML is stored sanitised."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from tests.api_server import ApiTestServer
from tests.fake_runtime import fake_runtime
from tests.openapi_check import check_contract
from tests.unit.app.support import CALLBACK, make_env
from tests.unit.http.test_routes import AUTH, OTHER, Api, assert_error
from trigger_service.adapters.memory.limits import MemorySendBudget
from trigger_service.adapters.memory.store import MemoryLease
from trigger_service.config.callers import CallerRegistry, hash_token
from trigger_service.core.notify.channels import EmailSpec
from trigger_service.core.ports.limit import utc_day
from trigger_service.http.app import build_app

CALLERS = CallerRegistry.from_mapping({"callers": {
    "orders": {"token_sha256": hash_token("tok"), "callback_prefixes": [CALLBACK],
               "email_domains": ["example.com", "*.example.org"], "sms_country_codes": ["1"],
               "telegram_chats": [123456789, "@Shop_News"], "push_tokens": ["device-1"],
               "daily_budget": {"email": 5, "sms": 2}},
    "billing": {"token_sha256": hash_token("tok2"), "callback_prefixes": [CALLBACK]},
}})
EMAIL = {"type": "email", "to": "a@example.com", "subject": "s", "text": "t"}
SMS = {"type": "sms", "to": "+15551234567", "text": "t"}
TELEGRAM = {"type": "telegram", "chatId": 123456789, "text": "t"}
PUSH = {"type": "push", "token": "device-1", "title": "t", "body": "b"}


def body(*channels: dict[str, Any]) -> dict[str, Any]:
    return {"delaySeconds": 600, "channels": list(channels)}


@pytest.fixture
async def budget() -> MemorySendBudget:
    return MemorySendBudget()


@pytest.fixture
async def rapi(budget: MemorySendBudget) -> AsyncIterator[Api]:
    env = make_env(budget=budget)
    runtime = fake_runtime(env.settings, CALLERS, env.store, env.queue, env.cache,
                           MemoryLease(env.clock, 10_000), env.clock, env.metrics, budget=budget)
    app = build_app(runtime, env.service)
    contract = check_contract(app)
    client = TestClient(ApiTestServer(app))
    await client.start_server()
    try:
        yield Api(env, runtime, client)
    finally:
        await client.close()
    contract.assert_clean()


@pytest.mark.parametrize(("channel", "field"), [
    (EMAIL | {"to": ["a@example.com", "b@evil.test"]}, "channels[0].to"),
    (EMAIL | {"replyTo": "support@evil.test"}, "channels[0].replyTo"),
    (SMS | {"to": "+4915112345678"}, "channels[0].to"),
])
async def test_create_refuses_a_recipient_outside_the_callers_controls(
        rapi: Api, channel: dict[str, Any], field: str) -> None:
    _, _, resp = await rapi.post(body(channel))
    answer = await assert_error(resp, 422, "recipient_not_allowed", ["field"])
    assert answer["field"] == field


async def test_a_caller_without_controls_may_not_email(rapi: Api) -> None:
    _, _, resp = await rapi.post(body(EMAIL), headers=OTHER)
    await assert_error(resp, 422, "recipient_not_allowed", ["field"])


@pytest.mark.parametrize(("channel", "field", "profile"), [
    (TELEGRAM, "channels[0].chatId", {"telegram": 123456789}),
    (PUSH, "channels[0].token", {"pushTokens": ["device-1"]})])
async def test_a_caller_without_controls_may_not_use_the_operators_bot_nor_project(
        rapi: Api, channel: dict[str, Any], field: str, profile: dict[str, Any]) -> None:
    _, _, resp = await rapi.post(body(channel), headers=OTHER)
    answer = await assert_error(resp, 422, "recipient_not_allowed", ["field"])
    assert answer["field"] == field
    resp = await rapi.client.put("/v1/recipients/ada", headers=OTHER,
                                 json={"timeZone": "UTC", **profile})
    answer = await assert_error(resp, 422, "recipient_not_allowed", ["field"])
    assert answer["field"] == next(iter(profile))


@pytest.mark.parametrize(("channel", "field"), [
    (TELEGRAM | {"chatId": 987654321}, "channels[0].chatId"),
    (TELEGRAM | {"chatId": "@other_news"}, "channels[0].chatId"),
    (PUSH | {"token": "device-2"}, "channels[0].token")])
async def test_only_the_callers_own_chats_and_tokens_are_allowed(
        rapi: Api, channel: dict[str, Any], field: str) -> None:
    _, _, resp = await rapi.post(body(channel))
    answer = await assert_error(resp, 422, "recipient_not_allowed", ["field"])
    assert answer["field"] == field
    status, answer, _ = await rapi.post(body(TELEGRAM, TELEGRAM | {"chatId": "@shop_news"},
                                             PUSH))
    assert status == 201, answer
    resp = await rapi.client.put("/v1/recipients/ada", headers=AUTH, json={
        "timeZone": "UTC", "pushTokens": ["device-1", "device-2"]})
    answer = await assert_error(resp, 422, "recipient_not_allowed", ["field"])
    assert answer["field"] == "pushTokens"


async def test_an_email_takes_one_from_the_budget_per_recipient(
        rapi: Api, budget: MemorySendBudget) -> None:
    six = EMAIL | {"to": [f"u{i}@example.com" for i in range(6)]}
    _, _, resp = await rapi.post(body(six))  # more than the whole day's budget of 5
    answer = await assert_error(resp, 422, "recipient_not_allowed", ["field"])
    assert answer["field"] == "channels[0]" and "daily_budget.email" in answer["message"]
    three = EMAIL | {"to": [f"u{i}@example.com" for i in range(3)]}
    _, _, resp = await rapi.post(body(three, three))  # 6 per occurrence, together
    await assert_error(resp, 422, "recipient_not_allowed", ["field"])
    budget.counts[("orders", "email", utc_day(rapi.env.clock.now_ms()))] = 2
    status, answer, _ = await rapi.post(body(three))  # 3 left: enough
    assert status == 201, answer
    budget.counts[("orders", "email", utc_day(rapi.env.clock.now_ms()))] = 3
    _, _, resp = await rapi.post(body(three))  # 2 left: not enough today
    await assert_error(resp, 429, "quota_exceeded")
    status, answer, _ = await rapi.post(body(EMAIL))
    assert status == 201, answer


async def test_allowed_recipients_are_created(rapi: Api) -> None:
    status, answer, _ = await rapi.post(body(EMAIL | {"to": "x@news.example.org"}, SMS))
    assert status == 201, answer


async def test_html_is_stored_sanitised(rapi: Api) -> None:
    html = '<p onclick="x()">Hi <b>there</b><script>alert(1)</script></p>'
    status, created, _ = await rapi.post(body(EMAIL | {"html": html}))
    assert status == 201, created
    stored = await rapi.env.service.get("orders", created["triggerId"])
    assert stored.plan is not None
    spec = stored.plan.channels[0]
    assert isinstance(spec, EmailSpec) and spec.html == "<p>Hi <b>there</b></p>"


async def test_preview_and_patch_and_snooze_refuse_the_same(rapi: Api) -> None:
    bad = EMAIL | {"replyTo": "x@evil.test"}
    resp = await rapi.client.post("/v1/triggers/preview", json=body(bad), headers=AUTH)
    await assert_error(resp, 422, "recipient_not_allowed", ["field"])
    status, created, _ = await rapi.post(body(EMAIL))
    assert status == 201, created
    url = f"/v1/triggers/{created['triggerId']}"
    resp = await rapi.client.patch(url, json={"channels": [bad]}, headers=AUTH)
    await assert_error(resp, 422, "recipient_not_allowed", ["field"])
    resp = await rapi.client.patch(url, json={"channels": [EMAIL | {"to": "b@example.com"}]},
                                   headers=AUTH)
    assert resp.status == 200, await resp.json()


async def test_a_spent_budget_refuses_create_preview_patch_and_snooze_429(
        rapi: Api, budget: MemorySendBudget) -> None:
    status, created, _ = await rapi.post(body(SMS))
    assert status == 201, created
    url = f"/v1/triggers/{created['triggerId']}"
    budget.counts[("orders", "sms", utc_day(rapi.env.clock.now_ms()))] = 2
    # 2023-11-14T22:13:20Z: 6,400 s to the next UTC midnight.
    _, _, resp = await rapi.post(body(SMS))
    await assert_error(resp, 429, "quota_exceeded")
    assert resp.headers["Retry-After"] == "6400"
    resp = await rapi.client.post("/v1/triggers/preview", json=body(SMS), headers=AUTH)
    await assert_error(resp, 429, "quota_exceeded")
    resp = await rapi.client.patch(url, json={"delaySeconds": 900}, headers=AUTH)
    await assert_error(resp, 429, "quota_exceeded")
    resp = await rapi.client.post(f"{url}/snooze", json={"delaySeconds": 60}, headers=AUTH)
    await assert_error(resp, 429, "quota_exceeded")
    status, answer, _ = await rapi.post(body(EMAIL))  # the email budget is not spent
    assert status == 201, answer
    rapi.env.clock.advance_ms(6_400_000)  # the next UTC day
    status, answer, _ = await rapi.post(body(SMS))
    assert status == 201, answer


async def test_a_keyed_retry_gets_its_trigger_once_the_budget_is_spent(
        rapi: Api, budget: MemorySendBudget) -> None:
    keyed = AUTH | {"Idempotency-Key": "budget-retry-1"}
    resp = await rapi.client.post("/v1/triggers", json=body(SMS), headers=keyed)
    assert resp.status == 201, await resp.json()
    created = await resp.json()
    budget.counts[("orders", "sms", utc_day(rapi.env.clock.now_ms()))] = 2
    resp = await rapi.client.post("/v1/triggers", json=body(SMS), headers=keyed)
    assert resp.status == 201, await resp.json()
    assert resp.headers["Idempotent-Replayed"] == "true"
    assert (await resp.json())["triggerId"] == created["triggerId"]
    resp = await rapi.client.post("/v1/triggers", json=body(SMS),
                                  headers=AUTH | {"Idempotency-Key": "budget-retry-2"})
    await assert_error(resp, 429, "quota_exceeded")


async def test_callback_only_triggers_are_not_vetted(rapi: Api) -> None:
    status, answer, _ = await rapi.post({"callbackUrl": CALLBACK, "delaySeconds": 5},
                                        headers=OTHER)
    assert status == 201, answer
