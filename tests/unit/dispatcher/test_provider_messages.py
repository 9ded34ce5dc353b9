"""The provider adapters' pure parts: what each message looks like and what each answer
means (the adapters against real servers: tests/integration/test_providers.py)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from dispatcher.channels.email import EmailNotifier, build_email, message_id
from dispatcher.channels.provider_http import HttpAnswer, retry_after_s
from dispatcher.channels.push import push_message, push_outcome
from dispatcher.channels.sms import sms_body, sms_outcome
from trigger_service.config.providers import SmtpSettings
from trigger_service.core.notify.channels import EmailSpec, OccurrenceNotice, PushSpec, SmsSpec

ACK = "https://r.example/ack?t=1&sig=x"
OCC = OccurrenceNotice("01JT", "01JT.3", "dev", 2, 1_700_000_000_000, ACK)
NO_ACK = OccurrenceNotice("01JT", "01JT.3", "dev", 2, 1_700_000_000_000)
NOW = datetime(2026, 11, 23, 12, 0, 5, tzinfo=UTC)


def answer(status: int, body: dict[str, object] | None = None,
           retry_after: float | None = None) -> HttpAnswer:
    return HttpAnswer(status, body, "", retry_after)


# --- email -------------------------------------------------------------------------------
@pytest.mark.parametrize(("required", "start_tls"), [(True, True), (False, None)])
def test_starttls_is_required_when_set_and_used_when_offered_otherwise(
        required: bool, start_tls: bool | None) -> None:
    # aiosmtplib: False would never upgrade, even when the server offers STARTTLS.
    client = EmailNotifier(SmtpSettings(starttls=required))._client()
    assert client._start_tls_on_connect is start_tls


def test_message_id_is_the_occurrence_and_channel_at_the_from_domain() -> None:
    assert message_id(OCC, "reminders@rem.example") == "<01JT.3.2@rem.example>"
    assert message_id(OCC, "Reminders <r@x.example>") == "<01JT.3.2@x.example>"
    odd = OccurrenceNotice("t", "t:1 <a>", "dev", 0, 0)
    assert message_id(odd, "r@x.example") == "<t_1__a_.0@x.example>"
    assert message_id(OCC, "r@x.example") == message_id(NO_ACK, "r@x.example")


def test_email_has_every_header_and_the_ack_link_in_both_parts() -> None:
    spec = EmailSpec(("a@x.example", "b@x.example"), "Subj", "Hello.",
                     "<html><BODY><p>Hello.</p></BODY></html>", "desk@x.example")
    msg = build_email(spec, OCC, from_address="Rem <rem@x.example>", now=NOW)
    assert msg["To"] == "a@x.example, b@x.example" and msg["From"] == "Rem <rem@x.example>"
    assert msg["Reply-To"] == "desk@x.example" and msg["Subject"] == "Subj"
    assert msg["Date"] == "Mon, 23 Nov 2026 12:00:05 +0000"
    assert msg["Message-ID"] == "<01JT.3.2@x.example>"
    assert msg["Auto-Submitted"] == "auto-generated"
    text, page = msg.get_body(("plain",)), msg.get_body(("html",))
    assert text is not None and page is not None
    assert text.get_content() == f"Hello.\n\nAcknowledge: {ACK}\n"
    html = page.get_content()
    assert html.index('href="https://r.example/ack?t=1&amp;sig=x"') < html.index("</BODY>")


def test_email_without_html_or_ack_is_plain_text() -> None:
    msg = build_email(EmailSpec(("a@x.example",), "S", "Hi"), NO_ACK,
                      from_address="rem@x.example", now=NOW)
    assert msg.get_content_type() == "text/plain" and msg["Reply-To"] is None
    assert "Acknowledge" not in msg.get_content()


def test_ack_link_is_appended_to_html_without_a_body_tag() -> None:
    msg = build_email(EmailSpec(("a@x.example",), "S", "Hi", "<p>Hi</p>"), OCC,
                      from_address="rem@x.example", now=NOW)
    page = msg.get_body(("html",))
    assert page is not None and page.get_content().startswith("<p>Hi</p><p><a href=")


# --- SMS ---------------------------------------------------------------------------------
def test_sms_body_appends_the_ack_link() -> None:
    assert sms_body(SmsSpec("+4915112345678", "Pills"), OCC) == f"Pills Ack: {ACK}"
    assert sms_body(SmsSpec("+4915112345678", "Pills"), NO_ACK) == "Pills"


def test_sms_answers() -> None:
    ok = sms_outcome(answer(201, {"sid": "SMabc", "status": "queued"}))
    assert ok.ok and ok.provider_message_id == "SMabc" and ok.provider_code == "201"
    bad = sms_outcome(answer(400, {"code": 21211, "message": "not a valid number"}))
    assert not bad.ok and bad.permanent and bad.provider_code == "21211"
    assert bad.error == "HTTP 400: not a valid number"
    busy = sms_outcome(answer(429, {"code": 20429, "message": "Too many"}, retry_after=7))
    assert not busy.ok and not busy.permanent and busy.retry_after_s == 7
    down = sms_outcome(answer(503))  # an HTML page from a proxy: no JSON
    assert not down.permanent and down.provider_code == "503"
    assert sms_outcome(answer(404)).permanent


# --- push --------------------------------------------------------------------------------
def test_push_message_in_fcm_v1_format() -> None:
    spec = PushSpec("tok", "T", "B", (("occurrenceId", "spoof"), ("room", "4")), 3600)
    assert push_message(spec, OCC) == {"message": {
        "token": "tok", "notification": {"title": "T", "body": "B"},
        "data": {"room": "4", "triggerId": "01JT", "occurrenceId": "01JT.3", "ackUrl": ACK},
        "android": {"ttl": "3600s"}}}
    plain = push_message(PushSpec("tok", "T", "B"), NO_ACK)["message"]
    assert "android" not in plain and "ackUrl" not in plain["data"]


def fcm(status: int, grpc: str, code: str | None = None) -> dict[str, object]:
    error: dict[str, object] = {"code": status, "message": "m", "status": grpc}
    if code:
        error["details"] = [{"@type": "x", "errorCode": code}]
    return {"error": error}


@pytest.mark.parametrize("status, body, code, permanent", [
    (404, fcm(404, "NOT_FOUND", "UNREGISTERED"), "UNREGISTERED", True),
    (400, fcm(400, "INVALID_ARGUMENT", "INVALID_ARGUMENT"), "INVALID_ARGUMENT", True),
    (403, fcm(403, "PERMISSION_DENIED", "SENDER_ID_MISMATCH"), "SENDER_ID_MISMATCH", True),
    (404, fcm(404, "NOT_FOUND"), "NOT_FOUND", True),
    (429, fcm(429, "RESOURCE_EXHAUSTED", "QUOTA_EXCEEDED"), "QUOTA_EXCEEDED", False),
    (503, fcm(503, "UNAVAILABLE", "UNAVAILABLE"), "UNAVAILABLE", False),
    (500, fcm(500, "INTERNAL"), "INTERNAL", False),
    (502, None, "502", False),
    (418, None, "418", True),
])
def test_push_answers(status: int, body: dict[str, object] | None, code: str,
                      permanent: bool) -> None:
    out = push_outcome(answer(status, body, retry_after=5))
    assert not out.ok and out.permanent is permanent and out.provider_code == code
    assert out.retry_after_s == (None if permanent else 5)


def test_push_accepted() -> None:
    out = push_outcome(answer(200, {"name": "projects/p/messages/0:1"}))
    assert out.ok and out.provider_message_id == "projects/p/messages/0:1"


# --- Retry-After -------------------------------------------------------------------------
def test_retry_after_in_seconds_or_as_a_date() -> None:
    assert retry_after_s("7", NOW) == 7.0 and retry_after_s(" 1.5 ", NOW) == 1.5
    assert retry_after_s("Mon, 23 Nov 2026 12:01:05 GMT", NOW) == 60.0
    assert retry_after_s("Mon, 23 Nov 2026 11:00:00 GMT", NOW) == 0.0
    assert retry_after_s("-3", NOW) == 0.0
    assert retry_after_s("soon", NOW) is None and retry_after_s(None, NOW) is None
    assert retry_after_s("nan", NOW) is None and retry_after_s("inf", NOW) is None
