"""Email through SMTP with ``aiosmtplib``: one session per message (connect, STARTTLS when
``TRIGGER_SMTP_STARTTLS``, AUTH when ``TRIGGER_SMTP_USER`` is set, MAIL/RCPT/DATA, QUIT), at
most ``TRIGGER_SMTP_MAX_CONNECTIONS`` at once.

Every message has a ``Message-ID`` made from the occurrence id and the channel index, the same
on every attempt: an SMTP answer lost after DATA leaves the message possibly delivered, and a
retry then sends a copy a mail system can recognise (RFC 5322 s. 3.6.4).

Answers: the SMTP reply code is the provider code. 5xx is permanent (no such mailbox, a
refused sender, bad credentials: retrying cannot help, and a dead letter can be replayed once
it is fixed), and so is a non-ASCII address when the server lacks SMTPUTF8; 4xx, timeouts
and lost connections are transient. When some recipients are refused and others accepted the
message went out, so the channel is delivered and ``error`` lists the refused ones (a retry
would send the others a second copy).
"""

from __future__ import annotations

import asyncio
import html
import re
from datetime import UTC, datetime
from email.message import EmailMessage
from email.utils import format_datetime, parseaddr

import aiosmtplib

from dispatcher.channels.provider_http import MAX_ERROR_LEN, clock_now
from trigger_service.config.providers import SmtpSettings
from trigger_service.core.notify.channels import (
    ChannelOutcome,
    ChannelSpec,
    EmailSpec,
    OccurrenceNotice,
)
from trigger_service.core.ports import Clock
from trigger_service.core.time.clock import SystemClock

# What a Message-ID's left part may hold (RFC 5322's atext and dots); anything else in an id
# becomes "_" so the header stays valid and the same id always gives the same Message-ID.
_NOT_ATEXT = re.compile(r"[^A-Za-z0-9!#$%&'*+/=?^_`{|}~.-]")
_BODY_END = re.compile(r"</body\s*>", re.IGNORECASE)


def message_id(occ: OccurrenceNotice, from_address: str) -> str:
    """``<{occurrence_id}.{channel_index}@{domain of From}>``: stable across retries."""
    domain = parseaddr(from_address)[1].rpartition("@")[2] or "localhost"
    return f"<{_NOT_ATEXT.sub('_', occ.occurrence_id)}.{occ.channel_index}@{domain}>"


def _with_ack_link(page: str, url: str) -> str:
    link = f'<p><a href="{html.escape(url, quote=True)}">Acknowledge</a></p>'
    ends = list(_BODY_END.finditer(page))
    if not ends:
        return page + link
    at = ends[-1].start()
    return page[:at] + link + page[at:]


def build_email(spec: EmailSpec, occ: OccurrenceNotice, *, from_address: str,
                now: datetime) -> EmailMessage:
    """The message: text, and an HTML alternative when the channel has one; the ack link
    (when the occurrence has one) at the end of both."""
    msg = EmailMessage()
    msg["From"] = from_address
    msg["To"] = ", ".join(spec.to)
    if spec.reply_to:
        msg["Reply-To"] = spec.reply_to
    # A header cannot hold a line break; a subject's are only layout, so they become spaces.
    msg["Subject"] = " ".join(spec.subject.split())
    msg["Date"] = format_datetime(now.astimezone(UTC))
    msg["Message-ID"] = message_id(occ, from_address)
    # RFC 3834: a reminder is machine-sent, so vacation responders stay quiet.
    msg["Auto-Submitted"] = "auto-generated"
    msg["X-Trigger-Id"] = occ.trigger_id
    msg["X-Trigger-OccurrenceNotice-Id"] = occ.occurrence_id
    text = spec.text
    if occ.ack_url:
        text = f"{text.rstrip()}\n\nAcknowledge: {occ.ack_url}\n"
    msg.set_content(text)
    if spec.html is not None:
        page = _with_ack_link(spec.html, occ.ack_url) if occ.ack_url else spec.html
        msg.add_alternative(page, subtype="html")
    return msg


def bad_message(e: ValueError) -> ChannelOutcome:
    """The email package refused a header: permanent, no retry changes it."""
    return ChannelOutcome(False, permanent=True, error=f"bad message: {e}"[:MAX_ERROR_LEN])


def prepare(spec: ChannelSpec, occ: OccurrenceNotice, from_address: str,
            now: datetime) -> EmailMessage | ChannelOutcome:
    """The message to send for an email channel, or the permanent outcome when ``spec`` is
    not one or the message cannot be made (what the SMTP and SES notifiers share)."""
    if not isinstance(spec, EmailSpec):
        return ChannelOutcome(False, permanent=True, error=f"not an email channel: {spec.type}")
    try:
        return build_email(spec, occ, from_address=from_address, now=now)
    except ValueError as e:
        return bad_message(e)


def _response_outcome(code: int, message: str, mid: str) -> ChannelOutcome:
    return ChannelOutcome(False, permanent=500 <= code < 600, provider_code=str(code),
                          provider_message_id=mid,
                          error=f"SMTP {code}: {message}"[:MAX_ERROR_LEN])


def _refused_outcome(refused: list[aiosmtplib.SMTPRecipientRefused],
                     mid: str) -> ChannelOutcome:
    """Every recipient refused: transient when any refusal was (a retry may reach them)."""
    transient = [r for r in refused if not 500 <= r.code < 600]
    first = (transient or refused)[0]
    detail = "; ".join(f"{r.recipient}: {r.code} {r.message}" for r in refused)
    return ChannelOutcome(False, permanent=not transient, provider_code=str(first.code),
                          provider_message_id=mid,
                          error=f"recipients refused: {detail}"[:MAX_ERROR_LEN])


class EmailNotifier:
    """The ``Notifier`` of email channels."""

    def __init__(self, settings: SmtpSettings, *, clock: Clock | None = None) -> None:
        self._settings = settings
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._envelope_from = parseaddr(settings.from_address)[1]
        self._slots = asyncio.Semaphore(settings.max_connections)

    async def open(self) -> None:
        """Nothing to open: each message has its own SMTP session."""

    async def close(self) -> None:
        """Nothing to close."""

    def _client(self) -> aiosmtplib.SMTP:
        s = self._settings
        # None, not False, when STARTTLS is not required: aiosmtplib then upgrades whenever
        # the server offers it (False would turn even that opportunistic TLS off).
        return aiosmtplib.SMTP(hostname=s.host, port=s.port, timeout=s.timeout_s,
                               start_tls=True if s.starttls else None,
                               username=s.user or None,
                               password=(s.password or None) if s.user else None)

    async def send(self, spec: ChannelSpec, occ: OccurrenceNotice) -> ChannelOutcome:
        msg = prepare(spec, occ, self._settings.from_address, clock_now(self._clock))
        if isinstance(msg, ChannelOutcome):
            return msg
        assert isinstance(spec, EmailSpec)  # prepare made a message
        mid = str(msg["Message-ID"])
        try:
            async with self._slots, self._client() as smtp:
                refused, _ = await smtp.send_message(msg, sender=self._envelope_from,
                                                     recipients=list(spec.to))
        except aiosmtplib.SMTPRecipientsRefused as e:
            return _refused_outcome(e.recipients, mid)
        except aiosmtplib.SMTPResponseException as e:
            return _response_outcome(e.code, e.message, mid)
        except aiosmtplib.SMTPNotSupported as e:
            # A non-ASCII address and a server without SMTPUTF8: the same on every retry.
            return ChannelOutcome(False, permanent=True, provider_message_id=mid,
                                  error=str(e)[:MAX_ERROR_LEN])
        except TimeoutError:  # also aiosmtplib's SMTPTimeoutError
            return ChannelOutcome(False, provider_message_id=mid,
                                  error=f"SMTP timeout after {self._settings.timeout_s:g}s")
        # No reply code: a refused or lost connection, or a session that could not be set up
        # (STARTTLS not offered). Transient: nothing says the message is at fault.
        except (aiosmtplib.SMTPException, OSError) as e:
            return ChannelOutcome(False, provider_message_id=mid,
                                  error=f"{type(e).__name__}: {e}"[:MAX_ERROR_LEN])
        error = None
        if refused:
            error = "refused: " + "; ".join(f"{a}: {r.code} {r.message}"
                                            for a, r in sorted(refused.items()))
        return ChannelOutcome(True, provider_code="250", provider_message_id=mid,
                              error=error[:MAX_ERROR_LEN] if error else None)
