"""The provider adapters against the simulators of ``tests/providers.py`` and a real SMTP
server (aiosmtpd), all on loopback ports: no Cassandra, SQS or Redis needed."""

from __future__ import annotations

import asyncio
import base64
import socket
from collections.abc import AsyncIterator
from dataclasses import replace

import pytest

from dispatcher.channels.email import EmailNotifier
from dispatcher.channels.notifiers import NotifierRouter
from dispatcher.channels.push import PushNotifier
from dispatcher.channels.sms import SmsNotifier
from tests.providers import (
    PushSimulator,
    Reply,
    SmsSimulator,
    SmtpSink,
    fcm_error,
    slow,
    twilio_error,
)
from trigger_service.config.providers import PushSettings, SmsSettings, SmtpSettings
from trigger_service.core.notify.channels import (
    EmailSpec,
    InboxSpec,
    OccurrenceNotice,
    PushSpec,
    SmsSpec,
)

pytestmark = pytest.mark.integration

ACK = "https://reminders.example/ack/t1.1?sig=abc&exp=99"
OCC = OccurrenceNotice("01JTRIGGER", "01JTRIGGER.1", "dev", 0, 1_700_000_000_000, ACK)
PHONE = "+4915112345678"
TOKEN = "device-token-1"


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
async def sms_sim() -> AsyncIterator[SmsSimulator]:
    sim = SmsSimulator()
    await sim.start()
    yield sim
    await sim.stop()


@pytest.fixture
async def sms(sms_sim: SmsSimulator) -> AsyncIterator[SmsNotifier]:
    notifier = SmsNotifier(SmsSettings(base_url=sms_sim.base_url))
    await notifier.open()
    yield notifier
    await notifier.close()


@pytest.fixture
async def push_sim() -> AsyncIterator[PushSimulator]:
    sim = PushSimulator()
    await sim.start()
    yield sim
    await sim.stop()


@pytest.fixture
async def push(push_sim: PushSimulator) -> AsyncIterator[PushNotifier]:
    notifier = PushNotifier(PushSettings(base_url=push_sim.base_url))
    await notifier.open()
    yield notifier
    await notifier.close()


@pytest.fixture
async def sink() -> AsyncIterator[SmtpSink]:
    server = SmtpSink(users={"mailer": "s3cret"})
    await server.start()
    yield server
    await server.stop()


def smtp_settings(sink: SmtpSink, user: str = "", password: str = "",
                  from_address: str = "reminders@localhost") -> SmtpSettings:
    return SmtpSettings(host="127.0.0.1", port=sink.port, user=user, password=password,
                        from_address=from_address, timeout_s=5)


# --- SMS ---------------------------------------------------------------------------------
async def test_sms_delivered_with_basic_auth_sid_and_ack_link(
        sms: SmsNotifier, sms_sim: SmsSimulator) -> None:
    out = await sms.send(SmsSpec(PHONE, "Take your pills"), OCC)
    assert out.ok and out.provider_message_id == sms_sim.messages[0]["sid"]
    assert out.provider_message_id.startswith("SM")
    sent = sms_sim.messages[0]
    assert sent["To"] == PHONE and sent["From"] == SmsSettings().from_number
    assert sent["Body"] == f"Take your pills Ack: {ACK}"
    basic = base64.b64encode(f"{SmsSettings().account_sid}:dev-sms-token".encode()).decode()
    assert sms_sim.requests[0].headers["Authorization"] == f"Basic {basic}"


async def test_sms_invalid_number_is_permanent_with_twilios_code(
        sms: SmsNotifier, sms_sim: SmsSimulator) -> None:
    sms_sim.script(PHONE, twilio_error(400, 21211, "The 'To' number is not valid."))
    out = await sms.send(SmsSpec(PHONE, "hi"), OCC)
    assert not out.ok and out.permanent and out.provider_code == "21211"
    assert "not valid" in (out.error or "") and not sms_sim.messages


async def test_sms_503_twice_then_201_and_retry_after(
        sms: SmsNotifier, sms_sim: SmsSimulator) -> None:
    sms_sim.script(PHONE, twilio_error(503), twilio_error(429, 20429, retry_after=7))
    first = await sms.send(SmsSpec(PHONE, "hi"), OCC)
    second = await sms.send(SmsSpec(PHONE, "hi"), OCC)
    third = await sms.send(SmsSpec(PHONE, "hi"), OCC)
    assert not first.ok and not first.permanent and first.provider_code == "503"
    assert not second.ok and not second.permanent and second.retry_after_s == 7.0
    assert third.ok and [r.status for r in sms_sim.requests] == [503, 429, 201]
    assert len(sms_sim.messages) == 1


async def test_sms_wrong_credentials_are_refused_like_twilio(sms_sim: SmsSimulator) -> None:
    for settings in (SmsSettings(base_url=sms_sim.base_url, auth_token="wrong"),
                     SmsSettings(base_url=sms_sim.base_url, account_sid="AC" + "1" * 32)):
        notifier = SmsNotifier(settings)
        await notifier.open()
        out = await notifier.send(SmsSpec(PHONE, "hi"), OCC)
        await notifier.close()
        assert not out.ok and out.permanent and out.provider_code == "20003"
    assert [r.status for r in sms_sim.requests] == [401, 401] and not sms_sim.messages


async def test_sms_connection_refused_is_transient() -> None:
    notifier = SmsNotifier(SmsSettings(base_url=f"http://127.0.0.1:{closed_port()}"))
    await notifier.open()
    out = await notifier.send(SmsSpec(PHONE, "hi"), OCC)
    await notifier.close()
    assert not out.ok and not out.permanent and out.error


async def test_sms_timeout_is_transient(sms_sim: SmsSimulator) -> None:
    sms_sim.script(PHONE, slow(twilio_error(503), 1.0))
    notifier = SmsNotifier(SmsSettings(base_url=sms_sim.base_url, timeout_s=0.3))
    await notifier.open()
    out = await notifier.send(SmsSpec(PHONE, "hi"), OCC)
    await notifier.close()
    assert not out.ok and not out.permanent and "timeout" in (out.error or "")


# --- push --------------------------------------------------------------------------------
async def test_push_delivered_in_fcm_format_with_bearer(
        push: PushNotifier, push_sim: PushSimulator) -> None:
    spec = PushSpec(TOKEN, "Standup", "in 5 minutes", (("room", "4"),), ttl_seconds=60)
    out = await push.send(spec, OCC)
    assert out.ok and out.provider_message_id == push_sim.messages[0]["name"]
    sent = push_sim.messages[0]
    assert sent["token"] == TOKEN
    assert sent["notification"] == {"title": "Standup", "body": "in 5 minutes"}
    assert sent["data"] == {"room": "4", "triggerId": OCC.trigger_id,
                            "occurrenceId": OCC.occurrence_id, "ackUrl": ACK}
    assert sent["android"] == {"ttl": "60s"}
    request = push_sim.requests[0]
    assert request.path == "/v1/projects/trigger-dev/messages:send"
    assert request.headers["Authorization"] == "Bearer dev-push-token"


@pytest.mark.parametrize("reply, code", [
    (fcm_error(404, "NOT_FOUND", "UNREGISTERED"), "UNREGISTERED"),
    (fcm_error(400, "INVALID_ARGUMENT", "INVALID_ARGUMENT"), "INVALID_ARGUMENT"),
    (fcm_error(403, "PERMISSION_DENIED", "SENDER_ID_MISMATCH"), "SENDER_ID_MISMATCH"),
])
async def test_push_permanent_errors(push: PushNotifier, push_sim: PushSimulator,
                                     reply: Reply, code: str) -> None:
    push_sim.script(TOKEN, reply)
    out = await push.send(PushSpec(TOKEN, "t", "b"), OCC)
    assert not out.ok and out.permanent and out.provider_code == code


async def test_push_transient_errors_and_retry_after(
        push: PushNotifier, push_sim: PushSimulator) -> None:
    push_sim.script(TOKEN, fcm_error(429, "RESOURCE_EXHAUSTED", "QUOTA_EXCEEDED", retry_after=7),
                    fcm_error(503, "UNAVAILABLE", "UNAVAILABLE"),
                    fcm_error(500, "INTERNAL", "INTERNAL"))
    outs = [await push.send(PushSpec(TOKEN, "t", "b"), OCC) for _ in range(4)]
    assert [o.provider_code for o in outs[:3]] == ["QUOTA_EXCEEDED", "UNAVAILABLE", "INTERNAL"]
    assert all(not o.ok and not o.permanent for o in outs[:3])
    assert outs[0].retry_after_s == 7.0 and outs[3].ok


async def test_push_wrong_bearer_is_refused(push_sim: PushSimulator) -> None:
    notifier = PushNotifier(PushSettings(base_url=push_sim.base_url, bearer="nope"))
    await notifier.open()
    out = await notifier.send(PushSpec(TOKEN, "t", "b"), OCC)
    await notifier.close()
    assert not out.ok and out.permanent and out.provider_code == "UNAUTHENTICATED"


# --- email -------------------------------------------------------------------------------
EMAIL = EmailSpec(("ann@example.com", "bob@example.com"), "Dentist at 10:00",
                  "Bring the form.", "<html><body><p>Bring the form.</p></body></html>",
                  "desk@example.com")


async def test_email_delivered_with_headers_ack_link_and_auth(sink: SmtpSink) -> None:
    notifier = EmailNotifier(smtp_settings(sink, user="mailer", password="s3cret",
                                           from_address="Reminders <reminders@rem.example>"))
    out = await notifier.send(EMAIL, OCC)
    assert out.ok and out.provider_code == "250" and out.error is None
    assert sink.logins == [("mailer", True)]
    [mail] = sink.messages
    assert mail.mail_from == "reminders@rem.example"
    assert mail.rcpt_tos == ["ann@example.com", "bob@example.com"]
    msg = mail.message
    assert msg["To"] == "ann@example.com, bob@example.com"
    assert msg["From"] == "Reminders <reminders@rem.example>"
    assert msg["Reply-To"] == "desk@example.com" and msg["Subject"] == "Dentist at 10:00"
    assert msg["Date"] is not None
    assert msg["Message-ID"] == out.provider_message_id == "<01JTRIGGER.1.0@rem.example>"
    text = msg.get_body(("plain",))
    page = msg.get_body(("html",))
    assert text is not None and page is not None
    assert f"Acknowledge: {ACK}" in text.get_content()
    assert 'href="https://reminders.example/ack/t1.1?sig=abc&amp;exp=99"' in page.get_content()


async def test_email_message_id_is_stable_across_sends_of_one_channel(sink: SmtpSink) -> None:
    notifier = EmailNotifier(smtp_settings(sink))
    other_channel = replace(OCC, channel_index=1)
    a = await notifier.send(EMAIL, OCC)
    b = await notifier.send(EMAIL, OCC)
    c = await notifier.send(EMAIL, other_channel)
    ids = [m.message["Message-ID"] for m in sink.messages]
    assert a.provider_message_id == b.provider_message_id == ids[0] == ids[1]
    assert c.provider_message_id == ids[2] != ids[0]


@pytest.mark.parametrize("reply, permanent", [("550 5.1.1 No such user", True),
                                              ("451 4.3.0 Try again later", False)])
async def test_email_rcpt_refusals(sink: SmtpSink, reply: str, permanent: bool) -> None:
    for address in EMAIL.to:
        sink.refuse(address, reply)
    out = await EmailNotifier(smtp_settings(sink)).send(EMAIL, OCC)
    assert not out.ok and out.permanent is permanent and out.provider_code == reply[:3]
    assert out.provider_message_id and not sink.messages


async def test_email_partly_refused_is_delivered_with_the_refusal_noted(sink: SmtpSink) -> None:
    sink.refuse("bob@example.com", "550 5.1.1 No such user")
    out = await EmailNotifier(smtp_settings(sink)).send(EMAIL, OCC)
    assert out.ok and "bob@example.com: 550" in (out.error or "")
    assert sink.messages[0].rcpt_tos == ["ann@example.com"]


@pytest.mark.parametrize("reply, permanent", [("554 5.6.0 Message rejected", True),
                                              ("452 4.3.1 Insufficient storage", False)])
async def test_email_data_refusals(sink: SmtpSink, reply: str, permanent: bool) -> None:
    sink.fail_data(reply)
    out = await EmailNotifier(smtp_settings(sink)).send(EMAIL, OCC)
    assert not out.ok and out.permanent is permanent and out.provider_code == reply[:3]


async def test_email_bad_password_is_permanent(sink: SmtpSink) -> None:
    out = await EmailNotifier(smtp_settings(sink, user="mailer", password="x")).send(EMAIL, OCC)
    assert not out.ok and out.permanent and out.provider_code == "535"
    # aiosmtplib tries each mechanism the server offers (PLAIN, then LOGIN).
    assert sink.logins and set(sink.logins) == {("mailer", False)} and not sink.messages


async def test_email_connection_refused_is_transient() -> None:
    notifier = EmailNotifier(SmtpSettings(port=closed_port(), timeout_s=2))
    out = await notifier.send(EMAIL, OCC)
    assert not out.ok and not out.permanent and out.provider_code is None and out.error


async def test_email_starttls_not_offered_is_transient(sink: SmtpSink) -> None:
    settings = replace(smtp_settings(sink), starttls=True)
    out = await EmailNotifier(settings).send(EMAIL, OCC)
    assert not out.ok and not out.permanent and "STARTTLS" in (out.error or "")


async def test_email_silent_server_times_out_as_transient() -> None:
    writers: list[asyncio.StreamWriter] = []

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)  # never greets

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        out = await EmailNotifier(SmtpSettings(port=port, timeout_s=0.3)).send(EMAIL, OCC)
    finally:
        for w in writers:
            w.close()
        server.close()
        await server.wait_closed()
    assert not out.ok and not out.permanent and "timeout" in (out.error or "").lower()


async def test_email_subject_line_breaks_become_spaces(sink: SmtpSink) -> None:
    out = await EmailNotifier(smtp_settings(sink)).send(replace(EMAIL, subject="a\r\nb"), OCC)
    assert out.ok and sink.messages[0].message["Subject"] == "a b"


async def test_email_non_ascii_address_without_smtputf8_is_permanent(sink: SmtpSink) -> None:
    spec = replace(EMAIL, to=("jörg@example.com",))
    out = await EmailNotifier(smtp_settings(sink)).send(spec, OCC)
    assert not out.ok and out.permanent and "SMTPUTF8" in (out.error or "")


# --- routing -----------------------------------------------------------------------------
async def test_notifiers_route_each_type_and_refuse_an_unconfigured_inbox(
        sink: SmtpSink, sms_sim: SmsSimulator, push_sim: PushSimulator) -> None:
    notifiers = NotifierRouter(EmailNotifier(smtp_settings(sink)),
                          SmsNotifier(SmsSettings(base_url=sms_sim.base_url)),
                          PushNotifier(PushSettings(base_url=push_sim.base_url)))
    await notifiers.open()
    try:
        outs = [await notifiers.send(spec, OCC) for spec in (
            EMAIL, SmsSpec(PHONE, "hi"), PushSpec(TOKEN, "t", "b"), InboxSpec("ann", "t", "b"))]
    finally:
        await notifiers.close()
    assert [o.ok for o in outs] == [True, True, True, False]
    assert outs[3].permanent and outs[3].error == "inbox not configured"
    assert len(sink.messages) == len(sms_sim.messages) == len(push_sim.messages) == 1
