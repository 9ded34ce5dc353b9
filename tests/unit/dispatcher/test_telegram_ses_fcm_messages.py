"""The Telegram and SES providers' pure parts: a Telegram channel (parsing, the message, what
each Bot API answer means), SES's error classes, what both email notifiers refuse, and the
settings that choose them (the adapters against real servers:
tests/integration/test_provider_channels.py)."""

from __future__ import annotations

import pytest

from dispatcher.channels.email import EmailNotifier
from dispatcher.channels.notifiers import NotifierRouter
from dispatcher.channels.provider_http import HttpAnswer
from dispatcher.channels.ses import SesEmailNotifier, ses_error_outcome
from dispatcher.channels.telegram import (
    REDACTED,
    TelegramNotifier,
    telegram_message,
    telegram_outcome,
)
from trigger_service.config.providers import TelegramSettings
from trigger_service.config.settings import Settings
from trigger_service.core.errors import ConfigError, InvalidRequest
from trigger_service.core.notify.channels import (
    ChannelOutcome,
    ChannelType,
    EmailSpec,
    OccurrenceNotice,
    TelegramSpec,
    parse_channels,
    spec_to_json,
)

ACK = "https://r.example/ack/t1.1?sig=a_b&exp=9"
OCC = OccurrenceNotice("01JT", "01JT.3", "dev", 2, 1_700_000_000_000, ACK)


def answer(status: int, body: dict[str, object] | None = None,
           retry_after: float | None = None) -> HttpAnswer:
    return HttpAnswer(status, body, "", retry_after)


# --- parsing ---------------------------------------------------------------------------------
@pytest.mark.parametrize("chat", [123456789, -1001234567890, "@reminder_bot_chan"])
def test_a_telegram_channel_round_trips(chat: int | str) -> None:
    raw = {"type": "telegram", "chatId": chat, "text": "Standup *now*", "parseMode": "HTML"}
    (spec,) = parse_channels([raw])
    assert spec == TelegramSpec(chat, "Standup *now*", "HTML")
    assert spec_to_json(spec) == raw
    assert parse_channels([spec_to_json(spec)]) == (spec,)


@pytest.mark.parametrize(("raw", "field"), [
    ({"chatId": 0, "text": "x"}, "chatId"),
    ({"chatId": True, "text": "x"}, "chatId"),
    ({"chatId": "not-a-name", "text": "x"}, "chatId"),
    ({"chatId": 2**53, "text": "x"}, "chatId"),
    ({"chatId": 1, "text": ""}, "text"),
    ({"chatId": 1, "text": "x" * 4097}, "text"),
    ({"chatId": 1, "text": "x", "parseMode": "markdown"}, "parseMode"),
    ({"chatId": 1, "text": "x", "token": "t"}, "token"),
])
def test_a_bad_telegram_channel_names_its_field(raw: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidRequest, match=rf"channels\[0\]\.{field}"):
        parse_channels([{"type": "telegram", **raw}])


def test_a_recipients_telegram_channel_may_leave_the_chat_out() -> None:
    (spec,) = parse_channels([{"type": "telegram"}], addressless=True,
                             message={"title": "t", "text": "Pills"})
    assert spec == TelegramSpec("", "Pills")
    assert spec_to_json(spec) == {"type": "telegram", "text": "Pills"}


# --- the message -----------------------------------------------------------------------------
def test_the_ack_link_is_appended_as_literal_text_for_each_parse_mode() -> None:
    plain = telegram_message(TelegramSpec(42, "Pills"), OCC)
    assert plain == {"chat_id": 42, "text": f"Pills\n\nAcknowledge: {ACK}"}
    html = telegram_message(TelegramSpec(42, "<b>Pills</b>", "HTML"), OCC)
    assert html["parse_mode"] == "HTML"
    assert html["text"] == f"<b>Pills</b>\n\nAcknowledge: {ACK.replace('&', '&amp;')}"
    md = telegram_message(TelegramSpec(42, "*Pills*", "MarkdownV2"), OCC)["text"]
    assert md.startswith("*Pills*\n\nAcknowledge: https://r\\.example/ack/t1\\.1?sig\\=a\\_b")
    legacy = telegram_message(TelegramSpec(42, "Pills", "Markdown"), OCC)["text"]
    assert legacy.endswith("sig=a\\_b&exp=9")
    no_ack = OccurrenceNotice("01JT", "01JT.3", "dev", 2, 0)
    assert telegram_message(TelegramSpec("@chan_name", "Pills"), no_ack)["text"] == "Pills"


# --- answers ---------------------------------------------------------------------------------
def test_a_sent_message_is_named_by_chat_and_message_id() -> None:
    out = telegram_outcome(answer(200, {"ok": True, "result": {"message_id": 7}}), -100)
    assert out == ChannelOutcome(True, provider_code="200", provider_message_id="-100:7")


@pytest.mark.parametrize(("status", "body", "permanent", "wait_s"), [
    (429, {"ok": False, "error_code": 429, "description": "Too Many Requests: retry after 7",
           "parameters": {"retry_after": 7}}, False, 7.0),
    (502, {"ok": False, "error_code": 502, "description": "Bad Gateway"}, False, None),
    (400, {"ok": False, "error_code": 400, "description": "Bad Request: chat not found"},
     True, None),
    (403, {"ok": False, "error_code": 403,
           "description": "Forbidden: bot was blocked by the user"}, True, None),
    (401, {"ok": False, "error_code": 401, "description": "Unauthorized"}, True, None),
    (404, None, True, None),
    (500, None, False, None),
])
def test_telegram_answers_are_classified(status: int, body: dict[str, object] | None,
                                         permanent: bool, wait_s: float | None) -> None:
    out = telegram_outcome(answer(status, body), 42)
    assert not out.ok and out.permanent is permanent
    assert out.provider_code == str(status) and out.retry_after_s == wait_s
    if body is not None:
        assert str(body["description"]) in (out.error or "")


@pytest.mark.parametrize(("status", "code", "permanent", "wait_s"), [
    (200, 429, False, 3.0),  # the body's error_code says transient
    (503, 400, False, 3.0),  # the HTTP status says transient
    (400, 500, False, 3.0),
    (200, 400, True, None),  # neither: permanent, and no wait even when one was given
])
def test_telegram_is_transient_when_either_status_says_so(status: int, code: int,
                                                          permanent: bool,
                                                          wait_s: float | None) -> None:
    body = {"ok": False, "error_code": code, "description": "x" * 600}
    out = telegram_outcome(answer(status, body, retry_after=3), 42)
    assert not out.ok and out.permanent is permanent and out.retry_after_s == wait_s
    assert out.provider_code == str(code) and out.error == f"HTTP {code}: {'x' * 600}"[:500]


def test_a_migrated_group_names_its_new_chat() -> None:
    body = {"ok": False, "error_code": 400, "description": "Bad Request: group chat was "
            "upgraded to a supergroup chat", "parameters": {"migrate_to_chat_id": -1009}}
    out = telegram_outcome(answer(400, body), -5)
    assert out.permanent and "-1009" in (out.error or "")


async def test_the_bot_token_never_reaches_an_outcome_or_a_repr() -> None:
    token = "987654:very-secret-token"
    # An unparseable port: aiohttp's error quotes the whole URL, token included.
    notifier = TelegramNotifier(TelegramSettings(base_url="http://127.0.0.1:99999",
                                                 bot_token=token, timeout_s=2))
    await notifier.open()
    try:
        out = await notifier.send(TelegramSpec(42, "hi"), OCC)
    finally:
        await notifier.close()
    assert not out.ok and not out.permanent
    assert token not in (out.error or "") and token not in repr(notifier)
    assert token not in repr(TelegramSettings(bot_token=token))
    assert f"/bot{REDACTED}/sendMessage" in (out.error or "")


@pytest.mark.parametrize(("code", "status", "permanent"), [
    ("Throttling", 400, False), ("ServiceUnavailable", 503, False),
    ("InternalFailure", 500, False), ("SomethingNew", 502, False),
    ("MessageRejected", 400, True), ("InvalidParameterValue", 400, True),
    ("MailFromDomainNotVerifiedException", 400, True),
    ("AccountSendingPausedException", 400, True), ("SignatureDoesNotMatch", 403, True),
])
def test_ses_errors_are_classified(code: str, status: int, permanent: bool) -> None:
    out = ses_error_outcome(code, "why", status, "<m@x>")
    assert not out.ok and out.permanent is permanent and out.provider_code == code
    assert out.error == f"SES {code}: why" and out.provider_message_id == "<m@x>"


async def test_both_email_notifiers_refuse_a_message_they_cannot_make_for_good() -> None:
    settings = Settings.from_env({"TRIGGER_EMAIL_TRANSPORT": "ses"})
    bad = EmailSpec(("a@x.example",), "s", "t", reply_to="a@x.example\nBcc: b@y.example")
    for notifier in (EmailNotifier(settings.smtp),
                     SesEmailNotifier(settings.email, settings.smtp.from_address)):
        out = await notifier.send(bad, OCC)
        assert not out.ok and out.permanent and out.error is not None
        assert out.error.startswith("bad message: Header values may not contain linefeed")
        out = await notifier.send(TelegramSpec(42, "hi"), OCC)
        assert not out.ok and out.permanent and out.error == "not an email channel: telegram"


# --- settings --------------------------------------------------------------------------------
def test_the_email_transport_chooses_the_email_notifier() -> None:
    ses = Settings.from_env({"TRIGGER_EMAIL_TRANSPORT": "ses",
                             "TRIGGER_EMAIL_SES_ENDPOINT_URL": "http://127.0.0.1:4599/",
                             "TRIGGER_EMAIL_SES_SECRET_ACCESS_KEY": "hidden-secret"})
    assert ses.email.ses_endpoint_url == "http://127.0.0.1:4599"
    assert "hidden-secret" not in repr(ses)
    router = NotifierRouter.from_settings(ses)
    assert isinstance(router._by_type[ChannelType.EMAIL], SesEmailNotifier)
    with pytest.raises(ConfigError, match="TRIGGER_EMAIL_TRANSPORT"):
        Settings.from_env({"TRIGGER_EMAIL_TRANSPORT": "sendmail"})
    assert Settings.from_env({"TRIGGER_EMAIL_SES_ENDPOINT_URL": ""}).email.ses_endpoint_url == ""


def test_a_missing_service_account_file_stops_start_up() -> None:
    with pytest.raises(ConfigError, match="TRIGGER_PUSH_CREDENTIALS_FILE"):
        Settings.from_env({"TRIGGER_PUSH_CREDENTIALS_FILE": "/nonexistent/sa.json"})


async def test_without_a_bot_token_a_telegram_channel_fails_for_good() -> None:
    notifiers = NotifierRouter.from_settings(Settings.from_env({}))
    out = await notifiers.send(TelegramSpec(42, "hi"), OCC)
    assert not out.ok and out.permanent and out.error == "telegram not configured"
    configured = NotifierRouter.from_settings(Settings.from_env({
        "TRIGGER_TELEGRAM_BOT_TOKEN": "42:" + "b" * 35}))
    assert isinstance(configured._by_type[ChannelType.TELEGRAM], TelegramNotifier)
