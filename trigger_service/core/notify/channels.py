"""Notification channels of a trigger: what each one is asked to send, parsed and
checked once at registration, stored with the trigger as JSON, and the outcome a provider
adapter reports. Pure: no I/O.

A trigger has ``callbackUrl`` (the HTTP channel) and/or ``channels``: 1 to 8 of::

    {"type": "email", "to": "a@b.example" | [...], "subject", "text", "html"?, "replyTo"?}
    {"type": "sms",   "to": "+4915112345678", "text"}
    {"type": "push",  "token", "title", "body", "data"?, "ttlSeconds"?}
    {"type": "inbox", "recipient", "title", "body", "data"?}
    {"type": "telegram", "chatId": 123456789 | "@channel", "text", "parseMode"?}

Each is delivered once per occurrence with its own state, retries and outcome.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from trigger_service.core.errors import InvalidRequest

MAX_CHANNELS = 8
MAX_RECIPIENTS = 50
MAX_SUBJECT = 998  # RFC 5322's line limit
MAX_EMAIL_TEXT = 100_000
MAX_SMS_TEXT = 1_600  # Twilio's limit for one message body
MAX_PUSH_TITLE = 200
MAX_PUSH_BODY = 4_000  # FCM's whole message is at most 4 KiB
MAX_PUSH_DATA = 4_096
MAX_TOKEN = 4_096
MAX_INBOX_TITLE = 500
MAX_INBOX_BODY = 10_000
MAX_RECIPIENT = 200
MAX_TELEGRAM_TEXT = 4_096  # the Bot API's sendMessage limit (after entity parsing)
TELEGRAM_PARSE_MODES = ("HTML", "MarkdownV2", "Markdown")

# A practical address check (what providers accept), not RFC 5322's grammar: one @, a local
# part without spaces or angle brackets, a dotted domain.
_EMAIL_RE = re.compile(r"^[^@\s<>()\[\],;:\"]{1,64}@[A-Za-z0-9](?:[A-Za-z0-9-]{0,62}"
                       r"[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,62}[A-Za-z0-9])?)+$")
_E164_RE = re.compile(r"^\+[1-9][0-9]{6,14}$")
_RECIPIENT_RE = re.compile(r"^[A-Za-z0-9_.:@+-]{1,200}$")
# A Telegram chat: its numeric id (negative for groups and channels; at most 52 bits) as a
# number, or a public channel's @username (5 to 32 characters).
_TELEGRAM_USERNAME_RE = re.compile(r"^@[A-Za-z][A-Za-z0-9_]{4,31}$")
_MAX_CHAT_ID = 2**52


class ChannelType(StrEnum):
    EMAIL = "email"
    SMS = "sms"
    PUSH = "push"
    INBOX = "inbox"
    TELEGRAM = "telegram"


@dataclass(frozen=True, slots=True)
class EmailSpec:
    to: tuple[str, ...]
    subject: str
    text: str
    html: str | None = None
    reply_to: str | None = None
    type: ChannelType = ChannelType.EMAIL


@dataclass(frozen=True, slots=True)
class SmsSpec:
    to: str
    text: str
    type: ChannelType = ChannelType.SMS


@dataclass(frozen=True, slots=True)
class PushSpec:
    token: str
    title: str
    body: str
    data: tuple[tuple[str, str], ...] = ()  # FCM data values are strings
    ttl_seconds: int | None = None
    type: ChannelType = ChannelType.PUSH


@dataclass(frozen=True, slots=True)
class InboxSpec:
    recipient: str
    title: str
    body: str
    data_json: str | None = None  # any JSON, serialized once
    type: ChannelType = ChannelType.INBOX


@dataclass(frozen=True, slots=True)
class TelegramSpec:
    chat_id: int | str  # a numeric chat id, or "@channelusername"; "" when a recipient's
    text: str
    parse_mode: str | None = None  # one of TELEGRAM_PARSE_MODES; None: plain text
    type: ChannelType = ChannelType.TELEGRAM


ChannelSpec = EmailSpec | SmsSpec | PushSpec | InboxSpec | TelegramSpec


@dataclass(frozen=True, slots=True)
class OccurrenceNotice:
    """What every channel's message is about: one occurrence of one trigger."""

    trigger_id: str
    occurrence_id: str
    caller: str
    channel_index: int
    fire_at_ms: int
    ack_url: str | None = None  # a signed link that acknowledges the occurrence


@dataclass(frozen=True, slots=True)
class ChannelOutcome:
    """What a provider said about one send. ``permanent``: retrying cannot help (SMTP 5xx,
    Twilio 4xx, FCM UNREGISTERED/INVALID_ARGUMENT); otherwise a failure is retried on the
    trigger's backoff (or after ``retry_after_s`` when the provider said so)."""

    ok: bool
    permanent: bool = False
    provider_code: str | None = None
    provider_message_id: str | None = None
    error: str | None = None
    retry_after_s: float | None = None


# --- parsing ---------------------------------------------------------------------------------
def _text(d: dict[str, Any], key: str, where: str, max_len: int, *,
          required: bool = True) -> str | None:
    value = d.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value.strip():
        raise InvalidRequest(f"{where}.{key}: a non-empty string")
    if len(value) > max_len:
        raise InvalidRequest(f"{where}.{key}: at most {max_len} characters")
    return value


def _address(value: object, where: str) -> str:
    if not isinstance(value, str) or len(value) > 254 or not _EMAIL_RE.match(value):
        raise InvalidRequest(f"{where}: not an email address")
    return value


def _email(d: dict[str, Any], where: str) -> EmailSpec:
    raw = d.get("to")
    if raw is None:
        raise InvalidRequest(f"{where}.to: an address or a list of them")
    items = raw if isinstance(raw, list) else [raw]
    if not items or len(items) > MAX_RECIPIENTS:
        raise InvalidRequest(f"{where}.to: 1 to {MAX_RECIPIENTS} addresses")
    to = tuple(_address(a, f"{where}.to") for a in items)
    reply_to = _address(d["replyTo"], f"{where}.replyTo") if d.get("replyTo") else None
    return EmailSpec(to, _text(d, "subject", where, MAX_SUBJECT) or "",
                     _text(d, "text", where, MAX_EMAIL_TEXT) or "",
                     _text(d, "html", where, MAX_EMAIL_TEXT, required=False), reply_to)


def _sms(d: dict[str, Any], where: str) -> SmsSpec:
    to = d.get("to")
    if not isinstance(to, str) or not _E164_RE.match(to):
        raise InvalidRequest(f"{where}.to: an E.164 number such as +4915112345678")
    return SmsSpec(to, _text(d, "text", where, MAX_SMS_TEXT) or "")


def _push(d: dict[str, Any], where: str) -> PushSpec:
    token = _text(d, "token", where, MAX_TOKEN) or ""
    data = d.get("data") or {}
    if not isinstance(data, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in data.items()):
        raise InvalidRequest(f"{where}.data: an object of string values (FCM's data)")
    if sum(len(k) + len(v) for k, v in data.items()) > MAX_PUSH_DATA:
        raise InvalidRequest(f"{where}.data: at most {MAX_PUSH_DATA} characters")
    ttl = d.get("ttlSeconds")
    if ttl is not None and (type(ttl) is not int or not 0 <= ttl <= 2_419_200):
        raise InvalidRequest(f"{where}.ttlSeconds: 0 to 2419200 (28 days)")
    return PushSpec(token, _text(d, "title", where, MAX_PUSH_TITLE) or "",
                    _text(d, "body", where, MAX_PUSH_BODY) or "",
                    tuple(sorted(data.items())), ttl)


def _inbox(d: dict[str, Any], where: str) -> InboxSpec:
    recipient = d.get("recipient")
    if not isinstance(recipient, str) or not _RECIPIENT_RE.match(recipient):
        raise InvalidRequest(f"{where}.recipient: 1 to {MAX_RECIPIENT} characters of "
                             "letters, digits and _.:@+-")
    data = d.get("data")
    data_json = None if data is None else json.dumps(data, separators=(",", ":"))
    if data_json is not None and len(data_json) > MAX_PUSH_DATA:
        raise InvalidRequest(f"{where}.data: at most {MAX_PUSH_DATA} characters of JSON")
    return InboxSpec(recipient, _text(d, "title", where, MAX_INBOX_TITLE) or "",
                     _text(d, "body", where, MAX_INBOX_BODY) or "", data_json)


def is_telegram_chat(value: object) -> bool:
    """A numeric chat id (not a bool) or a public ``@username``."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return value != 0 and abs(value) < _MAX_CHAT_ID
    return isinstance(value, str) and bool(_TELEGRAM_USERNAME_RE.match(value))


def _telegram(d: dict[str, Any], where: str) -> TelegramSpec:
    chat = d.get("chatId")
    if not is_telegram_chat(chat):
        raise InvalidRequest(f"{where}.chatId: a numeric chat id or a channel's @username")
    mode = d.get("parseMode")
    if mode is not None and mode not in TELEGRAM_PARSE_MODES:
        raise InvalidRequest(f"{where}.parseMode: one of " + ", ".join(TELEGRAM_PARSE_MODES))
    assert isinstance(chat, int | str)
    return TelegramSpec(chat, _text(d, "text", where, MAX_TELEGRAM_TEXT) or "", mode)


_Parser = Callable[[dict[str, Any], str], ChannelSpec]
_PARSERS: dict[ChannelType, tuple[_Parser, set[str]]] = {
            ChannelType.EMAIL: (_email, {"to", "subject", "text", "html", "replyTo"}),
            ChannelType.SMS: (_sms, {"to", "text"}),
            ChannelType.PUSH: (_push, {"token", "title", "body", "data", "ttlSeconds"}),
            ChannelType.INBOX: (_inbox, {"recipient", "title", "body", "data"}),
            ChannelType.TELEGRAM: (_telegram, {"chatId", "text", "parseMode"})}


# A channel of a trigger with a recipient may leave its address out (the profile's, resolved
# at send time): parsed with this stand-in, then stored without it.
_STAND_IN: dict[ChannelType, tuple[str, object]] = {
    ChannelType.EMAIL: ("to", "someone@recipient.invalid"), ChannelType.SMS: ("to", "+10000000000"),
    ChannelType.PUSH: ("token", "recipient"), ChannelType.INBOX: ("recipient", "recipient"),
    ChannelType.TELEGRAM: ("chatId", 1)}
_BLANK: dict[ChannelType, dict[str, object]] = {
    ChannelType.EMAIL: {"to": ()}, ChannelType.SMS: {"to": ""}, ChannelType.PUSH: {"token": ""},
    ChannelType.INBOX: {"recipient": ""}, ChannelType.TELEGRAM: {"chat_id": ""}}
# A message's content fields by channel type: what a channel given by type alone takes from
# the trigger's ``message`` ({"title", "text"}).
_CONTENT: dict[ChannelType, dict[str, str]] = {
    ChannelType.EMAIL: {"subject": "title", "text": "text"}, ChannelType.SMS: {"text": "text"},
    ChannelType.PUSH: {"title": "title", "body": "text"},
    ChannelType.INBOX: {"title": "title", "body": "text"},
    ChannelType.TELEGRAM: {"text": "text"}}


def has_address(spec: ChannelSpec) -> bool:
    """Does ``spec`` name its own address? (Without: its recipient's, at send time.)"""
    return bool(spec.to if isinstance(spec, EmailSpec | SmsSpec) else
                spec.token if isinstance(spec, PushSpec) else
                spec.chat_id if isinstance(spec, TelegramSpec) else spec.recipient)


def recipient_count(spec: ChannelSpec) -> int:
    """How many recipients one send of ``spec`` reaches (what a daily budget counts): an
    email's ``to`` addresses, one for any other channel, and one for a channel whose address
    is its recipient's until it is resolved."""
    return max(1, len(spec.to)) if isinstance(spec, EmailSpec) else 1


def _with_defaults(d: dict[str, Any], kind: ChannelType, message: dict[str, str] | None,
                   addressless: bool) -> tuple[dict[str, Any], bool]:
    """``d`` with the stand-in address (when it gives none and may not) and the message's
    content for the fields it leaves out; whether the address is a stand-in."""
    out = dict(d)
    for key, source in _CONTENT[kind].items():
        if key not in out and message is not None and message.get(source):
            out[key] = message[source]
    key, stand_in = _STAND_IN[kind]
    if addressless and key not in out:
        out[key] = stand_in
        return out, True
    return out, False


def parse_channels(raw: object, *, addressless: bool = False,
                   message: dict[str, str] | None = None) -> tuple[ChannelSpec, ...]:
    """The ``channels`` field of a request; ``InvalidRequest`` naming the field (e.g.
    ``channels[1].to``) for anything wrong. ``addressless`` (a trigger with a recipient): a
    channel may leave its address out; ``message``: the content of the fields a channel
    leaves out."""
    if not isinstance(raw, list) or not 1 <= len(raw) <= MAX_CHANNELS:
        raise InvalidRequest(f"channels: a list of 1 to {MAX_CHANNELS} channel objects")
    out: list[ChannelSpec] = []
    for i, d in enumerate(raw):
        where = f"channels[{i}]"
        if not isinstance(d, dict):
            raise InvalidRequest(f"{where}: a channel object")
        try:
            kind = ChannelType(str(d.get("type")))
        except ValueError as e:
            raise InvalidRequest(f"{where}.type: one of "
                                 + ", ".join(t.value for t in ChannelType)) from e
        parse, fields = _PARSERS[kind]
        extra = sorted(set(d) - fields - {"type"})
        if extra:
            raise InvalidRequest(f"{where}.{extra[0]}: unknown field for {kind.value}")
        filled, stand_in = _with_defaults(d, kind, message, addressless)
        spec = parse(filled, where)
        out.append(replace(spec, **_BLANK[kind]) if stand_in else spec)  # type: ignore[arg-type]
    return tuple(out)


# --- storage (JSON with the trigger) ---------------------------------------------------------
def spec_to_json(spec: ChannelSpec) -> dict[str, Any]:
    """The request's own shape (what ``parse_channels`` reads back)."""
    if isinstance(spec, EmailSpec):
        d: dict[str, Any] = {"type": "email", "subject": spec.subject, "text": spec.text}
        if spec.to:
            d["to"] = list(spec.to)
        if spec.html is not None:
            d["html"] = spec.html
        if spec.reply_to is not None:
            d["replyTo"] = spec.reply_to
        return d
    if isinstance(spec, SmsSpec):
        return {"type": "sms", "text": spec.text, **({"to": spec.to} if spec.to else {})}
    if isinstance(spec, PushSpec):
        d = {"type": "push", "title": spec.title, "body": spec.body,
             **({"token": spec.token} if spec.token else {})}
        if spec.data:
            d["data"] = dict(spec.data)
        if spec.ttl_seconds is not None:
            d["ttlSeconds"] = spec.ttl_seconds
        return d
    if isinstance(spec, TelegramSpec):
        d = {"type": "telegram", "text": spec.text,
             **({"chatId": spec.chat_id} if spec.chat_id else {})}
        if spec.parse_mode is not None:
            d["parseMode"] = spec.parse_mode
        return d
    d = {"type": "inbox", "title": spec.title, "body": spec.body,
         **({"recipient": spec.recipient} if spec.recipient else {})}
    if spec.data_json is not None:
        d["data"] = json.loads(spec.data_json)
    return d
