"""The Telegram and SES providers end to end on the real stack (API → Cassandra → SQS →
dispatcher): a Telegram channel to the Bot-API-format simulator (only to the chats the caller's
``telegram_chats`` list: refused at registration, and again when sent), and email through
Amazon SES on LocalStack (``ses`` in ``localstack/localstack.env``'s SERVICES), read back from
LocalStack's ``/_aws/ses`` endpoint.

SES is LocalStack's at ``TRIGGER_EMAIL_SES_ENDPOINT_URL`` when that is set in the environment, else
the stack's SQS endpoint (the same LocalStack)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from email import message_from_string, policy
from email.message import EmailMessage
from typing import Any

import aioboto3
import aiohttp
import pytest
from botocore.exceptions import ClientError

from dispatcher.channels.caller_policy import (
    RECIPIENT_NOT_ALLOWED,
    CallerPolicyNotifiers,
    policies_of,
)
from dispatcher.channels.notifiers import NotifierRouter
from tests.integration.conftest import Stack
from tests.integration.helpers import until
from tests.providers import TelegramSimulator, telegram_error
from trigger_service.adapters.redis.limits import RedisSendBudget
from trigger_service.config.recipient_controls import RecipientPolicy
from trigger_service.core.notify.channels import EmailSpec, OccurrenceNotice
from trigger_service.core.time.clock import SystemClock
from trigger_service.platform.metrics import InMemoryMetrics

pytestmark = pytest.mark.integration

SENDER = "reminders@ses-test.example"


@pytest.fixture
def caller_controls() -> str:
    """The chats of these tests on the operator's one bot, and any email recipient."""
    return 'email_domains = ["*"]\ntelegram_chats = [4242, 777, 888, 9001]\n'


@pytest.fixture
def extra_env() -> dict[str, str]:
    return {"TRIGGER_EMAIL_TRANSPORT": "ses", "TRIGGER_SMTP_FROM_ADDRESS": f"Reminders <{SENDER}>"}


@dataclass
class Providers:
    telegram: TelegramSimulator
    ses_endpoint: str


def ses_endpoint(stack: Stack) -> str:
    return os.environ.get("TRIGGER_EMAIL_SES_ENDPOINT_URL") or stack.settings.sqs.endpoint_url


async def verify_sender(stack: Stack, endpoint: str) -> None:
    """LocalStack's SES, like SES in its sandbox, sends only from a verified identity."""
    s = stack.settings.sqs
    async with aioboto3.Session().client(
            "ses", endpoint_url=endpoint, region_name=s.region, aws_access_key_id=s.access_key_id,
            aws_secret_access_key=s.secret_access_key) as ses:
        try:
            await ses.verify_email_identity(EmailAddress=SENDER)
        except ClientError as e:
            # A LocalStack started before localstack.env listed ses serves no SES.
            pytest.fail(f"LocalStack at {endpoint} serves no SES ({e}): restart it "
                        "(infra/down.sh localstack, then make up)")


@pytest.fixture
async def providers(stack: Stack) -> AsyncIterator[Providers]:
    telegram = TelegramSimulator()
    url = await telegram.start()
    endpoint = ses_endpoint(stack)
    s = stack.settings
    s = replace(s, telegram=replace(s.telegram, base_url=url, bot_token=telegram.token),
                email=replace(s.email, ses_endpoint_url=endpoint))
    notifiers = NotifierRouter.from_settings(s)
    await notifiers.open()
    await stack.start_dispatcher(notifiers=notifiers)
    try:
        yield Providers(telegram, endpoint)
    finally:
        await notifiers.close()
        await telegram.stop()


@pytest.fixture
async def ses(stack: Stack, providers: Providers) -> str:
    """The SES endpoint, its sender verified (only the SES tests need LocalStack's SES)."""
    await verify_sender(stack, providers.ses_endpoint)
    return providers.ses_endpoint


async def create(stack: Stack, **body: Any) -> str:
    status, created, _ = await stack.post({"payload": {"k": 1}, **body})
    assert status == 201, created
    return str(created["triggerId"])


async def view(stack: Stack, tid: str) -> Any:
    resp = await stack.client.get(f"/v1/triggers/{tid}", headers=stack.auth())
    assert resp.status == 200
    return await resp.json()


async def finished(stack: Stack, tid: str, timeout_s: float = 30) -> Any:
    return await stack.wait_status(tid, ("FIRED", "FAILED"), timeout_s)


async def sent_emails(endpoint: str) -> list[dict[str, Any]]:
    """What LocalStack's SES sent from our sender (its retrospection endpoint)."""
    async with aiohttp.ClientSession() as session, session.get(
            f"{endpoint}/_aws/ses", params={"email": SENDER}) as resp:
        assert resp.status == 200
        return list((await resp.json())["messages"])


def parsed(raw: str) -> EmailMessage:
    msg = message_from_string(raw, policy=policy.default)
    assert isinstance(msg, EmailMessage)
    return msg


async def test_a_telegram_reminder_is_sent_once_with_its_ack_link(
        stack: Stack, providers: Providers) -> None:
    tid = await create(stack, delaySeconds=1, channels=[
        {"type": "telegram", "chatId": 4242, "text": "*Standup* now", "parseMode": "MarkdownV2"}])
    got = await finished(stack, tid)
    (channel,) = got["channels"]
    assert got["status"] == "FIRED"
    assert (channel["type"], channel["status"], channel["attempts"]) == ("telegram",
                                                                         "DELIVERED", 1)
    (sent,) = providers.telegram.messages
    assert channel["providerMessageId"] == f"4242:{sent['message_id']}"
    assert sent["chat_id"] == 4242 and sent["parse_mode"] == "MarkdownV2"
    # The simulator refuses MarkdownV2 with an unescaped '.', so the link was escaped.
    assert sent["text"].startswith("*Standup* now") and "/ack/" in sent["text"]


async def test_a_blocked_bot_fails_the_channel_for_good_in_one_attempt(
        stack: Stack, providers: Providers) -> None:
    providers.telegram.script("777", telegram_error(403, "Forbidden: bot was blocked by the "
                                                         "user"))
    providers.telegram.script("888", telegram_error(429, "Too Many Requests: retry after 1",
                                                    retry_after=1))
    tid = await create(stack, delaySeconds=1, channels=[
        {"type": "telegram", "chatId": 777, "text": "Pills"},
        {"type": "telegram", "chatId": 888, "text": "Pills"}])
    got = await finished(stack, tid)
    blocked, throttled = got["channels"]
    assert got["status"] == "FAILED"
    assert (blocked["status"], blocked["attempts"], blocked["providerCode"]) == ("FAILED", 1,
                                                                                 "403")
    assert "bot was blocked" in blocked["lastError"]
    assert (throttled["status"], throttled["attempts"]) == ("DELIVERED", 2)
    assert [r.status for r in providers.telegram.requests if r.body["chat_id"] == 777] == [403]
    # FAILED is written before the dead letter is listed: it may follow a moment later.
    async def listed() -> bool:
        return (await stack.client.get(f"/v1/dead-letters/{tid}.1",
                                       headers=stack.auth())).status != 404

    await until(listed, 10, interval_s=0.2)
    resp = await stack.client.get(f"/v1/dead-letters/{tid}.1", headers=stack.auth())
    assert resp.status == 200 and "403" in (await resp.json())["lastError"]


async def test_an_email_through_ses_arrives_with_our_headers(
        stack: Stack, providers: Providers, ses: str) -> None:
    tid = await create(stack, delaySeconds=1, channels=[
        {"type": "email", "to": ["ada@example.com", "bob@example.org"], "subject": "Standup",
         "text": "In five minutes", "html": "<p>In <b>five</b> minutes</p>"}])
    got = await finished(stack, tid)
    (channel,) = got["channels"]
    assert (got["status"], channel["status"], channel["attempts"]) == ("FIRED", "DELIVERED", 1)
    mine = [m for m in await sent_emails(ses) if tid in m["RawData"]]
    assert [m["Id"] for m in mine] == [channel["providerMessageId"]]
    mail = parsed(mine[0]["RawData"])
    assert mail["Message-ID"].startswith(f"<{tid}.1.0@ses-test.example>")
    assert mail["X-Trigger-Id"] == tid and mail["Subject"] == "Standup"
    assert mail["To"] == "ada@example.com, bob@example.org"
    text = mail.get_body(("plain",))
    html = mail.get_body(("html",))
    assert text is not None and html is not None
    assert "In five minutes" in text.get_content() and "/ack/" in text.get_content()
    assert "<b>five</b>" in html.get_content()


async def test_an_address_ses_refuses_fails_the_email_for_good(
        stack: Stack, providers: Providers, ses: str) -> None:
    # A From that is not verified: SES refuses the message itself (MessageRejected, 400).
    s = stack.settings
    notifiers = NotifierRouter.from_settings(replace(
        s, smtp=replace(s.smtp, from_address="nobody@unverified.example"),
        email=replace(s.email, ses_endpoint_url=ses)))
    await notifiers.open()
    try:
        out = await notifiers.send(EmailSpec(("ada@example.com",), "s", "t"),
                                   OccurrenceNotice("01JT", "01JT.1", "dev", 0, 0))
    finally:
        await notifiers.close()
    assert not out.ok and out.permanent and out.provider_code == "MessageRejected"


async def test_a_chat_not_in_the_callers_list_is_refused_at_registration(
        stack: Stack) -> None:
    for chat in (4243, "@someone_elses"):
        status, answer, _ = await stack.post({"delaySeconds": 60, "channels": [
            {"type": "telegram", "chatId": chat, "text": "Pills"}]})
        assert (status, answer["error"], answer["field"]) == (
            422, "recipient_not_allowed", "channels[0].chatId"), answer
    status, answer, _ = await stack.post({"delaySeconds": 60, "channels": [
        {"type": "push", "token": "device-1", "title": "t", "body": "b"}]})
    assert (status, answer["field"]) == (422, "channels[0].token"), answer  # no push_tokens
    resp = await stack.client.put("/v1/recipients/ada", headers=stack.auth(),
                                  json={"timeZone": "UTC", "telegram": 4243})
    assert resp.status == 422 and (await resp.json())["field"] == "telegram"


async def test_a_chat_no_longer_allowed_is_not_messaged_when_due(stack: Stack) -> None:
    telegram = TelegramSimulator()
    url = await telegram.start()
    s = stack.settings
    router = NotifierRouter.from_settings(
        replace(s, telegram=replace(s.telegram, base_url=url, bot_token=telegram.token)))
    await router.open()
    try:
        tid = await create(stack, delaySeconds=1, channels=[
            {"type": "telegram", "chatId": 9001, "text": "Pills"},
            {"type": "telegram", "chatId": 4242, "text": "Pills"}])
        # The callers file as it is when the trigger is due: 9001 taken off the list.
        narrowed = RecipientPolicy(telegram_chats=frozenset({"4242"}))
        file_of = policies_of(stack.runtime.callers)
        policed = CallerPolicyNotifiers(
            router, lambda c: narrowed if c == stack.caller else file_of(c),
            RedisSendBudget(stack.redis), SystemClock(), InMemoryMetrics())
        await stack.start_dispatcher(notifiers=policed)
        got = await finished(stack, tid)
    finally:
        await router.close()
        await telegram.stop()
    refused, sent = got["channels"]
    assert (refused["status"], refused["providerCode"]) == ("FAILED", RECIPIENT_NOT_ALLOWED)
    assert sent["status"] == "DELIVERED"
    assert [m["chat_id"] for m in telegram.messages] == [4242]
