"""Recipient profiles: a person a caller sends reminders to, with a home zone,
quiet hours, channel addresses, an ordered channel preference and a locale. Pure: no I/O.

``PUT /v1/recipients/{id}`` body (every field but ``timeZone`` optional)::

    {"timeZone": "America/New_York",
     "quietHours": {"start": "22:00", "end": "07:00"},   # timeZone optional: the profile's
     "email": "a@b.example" | [...], "phone": "+15551234567",
     "pushTokens": ["tok1", ...], "inbox": "user-42",      # inbox: the id itself if absent
     "telegram": 123456789,                                  # a Telegram chat id
     "channels": ["push", "sms", "email"],                   # the ordered preference
     "locale": "en-US"}

A trigger that names ``"recipient"`` gives channels by type alone; ``resolve_spec`` fills a
channel's address from the profile at SEND time (so a changed number reaches every pending
reminder); ``"channels": "preferred"`` is one channel whose type is the first of the
profile's preference that has an address, chosen at send time too.

The locale is the date order a trigger's ``when`` for the person is read with ("3/4" is
March 4 for ``en-US``, 3 April for ``en-GB``); ``when`` reads English words only.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from datetime import time
from typing import Any

from trigger_service.core.errors import InvalidRequest
from trigger_service.core.notify.channels import (
    _E164_RE,
    _EMAIL_RE,
    _RECIPIENT_RE,
    MAX_RECIPIENT,
    MAX_RECIPIENTS,
    MAX_TOKEN,
    ChannelSpec,
    ChannelType,
    EmailSpec,
    InboxSpec,
    PushSpec,
    SmsSpec,
    TelegramSpec,
    is_telegram_chat,
)
from trigger_service.core.notify.plan import QuietHours, parse_quiet_hours
from trigger_service.core.time.zones import load_zone

PROFILE_FIELDS = frozenset({"timeZone", "quietHours", "email", "phone", "pushTokens", "inbox",
                            "channels", "locale", "telegram"})
MAX_PUSH_TOKENS = 10
_LOCALE_RE = re.compile(r"^[A-Za-z]{2,3}(-[A-Za-z0-9]{2,8}){0,3}$")
# The sentinel of a trigger's ``timeZone`` that floats with its recipient.
RECIPIENT_ZONE = "recipient"
# What ``resolve_spec`` says when a profile lacks the address a channel needs.
NO_ADDRESS = "recipient_no_address"
# The dead-letter reason and error prefix of a reminder whose recipient was deleted.
RECIPIENT_DELETED = "recipient_deleted"


def deleted_error(recipient_id: str) -> str:
    """A failed reminder's ``lastError`` (its prefix: the dead-letter reason)."""
    return f"{RECIPIENT_DELETED}: recipient {recipient_id} was deleted"


def is_recipient_id(value: object) -> bool:
    """The inbox recipient id rules (``core.notify.channels``): 1 to 200 of letters, digits,
    _.:@+-"""
    return isinstance(value, str) and bool(_RECIPIENT_RE.match(value))


@dataclass(frozen=True, slots=True)
class RecipientProfile:
    recipient_id: str
    time_zone: str
    quiet_hours: QuietHours | None = None  # time_zone "": the profile's own zone
    email: tuple[str, ...] = ()
    phone: str | None = None
    push_tokens: tuple[str, ...] = ()
    inbox: str | None = None
    preference: tuple[ChannelType, ...] = ()
    locale: str | None = None
    updated_at_ms: int = 0
    telegram: int | str | None = None  # a chat id (or a channel's @username)

    def effective_quiet_hours(self) -> QuietHours | None:
        """The quiet hours in their zone (the profile's own zone if they name none)."""
        qh = self.quiet_hours
        if qh is None or qh.time_zone:
            return qh
        return replace(qh, time_zone=self.time_zone)

    def has(self, kind: ChannelType) -> bool:
        """Has the profile an address for ``kind``? (An inbox always: the id.)"""
        return {ChannelType.EMAIL: bool(self.email), ChannelType.SMS: self.phone is not None,
                ChannelType.PUSH: bool(self.push_tokens), ChannelType.INBOX: True,
                ChannelType.TELEGRAM: self.telegram is not None}[kind]

    def preferred(self) -> ChannelType | None:
        """The first type of the preference the profile has an address for."""
        return next((k for k in self.preference if self.has(k)), None)


# --- parsing ---------------------------------------------------------------------------------
def _bad(field: str, message: str) -> InvalidRequest:
    return InvalidRequest(f"{field}: {message}", field=field)


def _emails(raw: object) -> tuple[str, ...]:
    items = raw if isinstance(raw, list) else [raw]
    if not 1 <= len(items) <= MAX_RECIPIENTS:
        raise _bad("email", f"an address or a list of 1 to {MAX_RECIPIENTS}")
    for a in items:
        if not isinstance(a, str) or len(a) > 254 or not _EMAIL_RE.match(a):
            raise _bad("email", "not an email address")
    return tuple(items)


def _tokens(raw: object) -> tuple[str, ...]:
    if not isinstance(raw, list) or not 1 <= len(raw) <= MAX_PUSH_TOKENS or not all(
            isinstance(t, str) and 1 <= len(t) <= MAX_TOKEN and t.strip() for t in raw):
        raise _bad("pushTokens", f"a list of 1 to {MAX_PUSH_TOKENS} device tokens (the "
                   "first is used)")
    return tuple(raw)


def _preference(raw: object) -> tuple[ChannelType, ...]:
    names = ", ".join(t.value for t in ChannelType)
    if not isinstance(raw, list) or not 1 <= len(raw) <= len(ChannelType):
        raise _bad("channels", f"an ordered list of channel types ({names}), each once")
    try:
        kinds = tuple(ChannelType(str(k)) for k in raw)
    except ValueError as e:
        raise _bad("channels", f"each one of {names}") from e
    if len(set(kinds)) != len(kinds):
        raise _bad("channels", "each type once")
    return kinds


def parse_profile(recipient_id: str, body: Any, now_ms: int) -> RecipientProfile:
    """A ``PUT /v1/recipients/{id}`` body; ``InvalidRequest`` naming the field."""
    if not is_recipient_id(recipient_id):
        raise _bad("recipientId", f"1 to {MAX_RECIPIENT} characters of letters, digits and "
                   "_.:@+-")
    if not isinstance(body, dict):
        raise InvalidRequest("body: must be a JSON object")
    extra = sorted(set(body) - PROFILE_FIELDS)
    if extra:
        raise _bad(extra[0], "unknown field")
    if "timeZone" not in body:
        raise _bad("timeZone", "required: the person's IANA zone, e.g. 'Europe/Berlin'")
    load_zone(body["timeZone"])
    qh = None
    if body.get("quietHours") is not None:
        raw = body["quietHours"]
        given_zone = isinstance(raw, dict) and "timeZone" in raw
        filled = {**raw, "timeZone": body["timeZone"]} if isinstance(raw, dict) \
            and not given_zone else raw
        qh = parse_quiet_hours(filled, "quietHours")
        qh = qh if given_zone else replace(qh, time_zone="")
    phone = body.get("phone")
    if phone is not None and (not isinstance(phone, str) or not _E164_RE.match(phone)):
        raise _bad("phone", "an E.164 number such as +4915112345678")
    inbox = body.get("inbox")
    if inbox is not None and not is_recipient_id(inbox):
        raise _bad("inbox", f"1 to {MAX_RECIPIENT} characters of letters, digits and _.:@+-")
    telegram = body.get("telegram")
    if telegram is not None and not is_telegram_chat(telegram):
        raise _bad("telegram", "a numeric Telegram chat id or a channel's @username")
    locale = body.get("locale")
    if locale is not None and (not isinstance(locale, str) or not _LOCALE_RE.match(locale)):
        raise _bad("locale", "a BCP 47 language tag such as 'en-US'")
    return RecipientProfile(
        recipient_id, body["timeZone"], qh,
        _emails(body["email"]) if body.get("email") is not None else (), phone,
        _tokens(body["pushTokens"]) if body.get("pushTokens") is not None else (), inbox,
        _preference(body["channels"]) if body.get("channels") is not None else (),
        locale, now_ms, telegram)


def address_specs(p: RecipientProfile) -> tuple[tuple[str, ChannelSpec], ...]:
    """A spec per address of ``p`` (content empty) with the profile's field that holds it:
    what the caller's recipient controls check
    (``config.recipient_controls.RecipientPolicy.spec_refusal``)."""
    out: list[tuple[str, ChannelSpec]] = []
    if p.email:
        out.append(("email", EmailSpec(p.email, "", "")))
    if p.phone is not None:
        out.append(("phone", SmsSpec(p.phone, "")))
    out.extend(("pushTokens", PushSpec(token, "", "")) for token in p.push_tokens)
    if p.telegram is not None:
        out.append(("telegram", TelegramSpec(p.telegram, "")))
    return tuple(out)


# --- storage ---------------------------------------------------------------------------------
def profile_to_json(p: RecipientProfile) -> str:
    """The stored (and sealed) form; ``profile_from_json`` reads it back."""
    qh = p.quiet_hours
    return json.dumps({
        "timeZone": p.time_zone,
        "quietHours": None if qh is None else {**qh.to_json(), "timeZone": qh.time_zone},
        "email": list(p.email), "phone": p.phone, "pushTokens": list(p.push_tokens),
        "inbox": p.inbox, "channels": [k.value for k in p.preference], "locale": p.locale,
        "updatedAtMs": p.updated_at_ms, "telegram": p.telegram}, separators=(",", ":"))


def profile_from_json(recipient_id: str, text: str) -> RecipientProfile:
    d = json.loads(text)
    qh = d.get("quietHours")
    quiet = None
    if qh is not None:
        quiet = QuietHours(time.fromisoformat(qh["start"]), time.fromisoformat(qh["end"]),
                           qh["timeZone"])
    return RecipientProfile(
        recipient_id, d["timeZone"], quiet, tuple(d.get("email") or ()), d.get("phone"),
        tuple(d.get("pushTokens") or ()), d.get("inbox"),
        tuple(ChannelType(k) for k in d.get("channels") or ()), d.get("locale"),
        d.get("updatedAtMs", 0), d.get("telegram"))


def profile_view(p: RecipientProfile) -> dict[str, Any]:
    """The public JSON shape (``GET /v1/recipients/{id}``)."""
    qh = p.quiet_hours
    quiet: dict[str, str] | None = None
    if qh is not None:
        quiet = {"start": qh.start.strftime("%H:%M"), "end": qh.end.strftime("%H:%M")}
        if qh.time_zone:
            quiet["timeZone"] = qh.time_zone
    return {"recipientId": p.recipient_id, "timeZone": p.time_zone, "quietHours": quiet,
            "email": list(p.email) or None, "phone": p.phone,
            "pushTokens": list(p.push_tokens) or None, "inbox": p.inbox,
            "channels": [k.value for k in p.preference], "locale": p.locale,
            "telegram": p.telegram}


# --- send time -------------------------------------------------------------------------------
def resolve_spec(p: RecipientProfile, spec: ChannelSpec, *, preferred: bool
                 ) -> ChannelSpec | str:
    """``spec`` with its address from ``p`` (an address the trigger gave itself is kept);
    with ``preferred`` the type is ``p``'s first preferred one that has an address. A
    string (``NO_ADDRESS: ...``) when ``p`` has no address for it."""
    kind = p.preferred() if preferred else spec.type
    if kind is None:
        return f"{NO_ADDRESS}: recipient {p.recipient_id} has no address for any channel " \
               "of its preference"
    title, text = _content(spec)
    if kind is ChannelType.EMAIL:
        own = spec.to if isinstance(spec, EmailSpec) and spec.to else p.email
        if not own:
            return f"{NO_ADDRESS}: recipient {p.recipient_id} has no email address"
        html = spec.html if isinstance(spec, EmailSpec) else None
        reply = spec.reply_to if isinstance(spec, EmailSpec) else None
        return EmailSpec(own, title or text[:80], text, html, reply)
    if kind is ChannelType.SMS:
        phone = spec.to if isinstance(spec, SmsSpec) and spec.to else p.phone
        if phone is None:
            return f"{NO_ADDRESS}: recipient {p.recipient_id} has no phone"
        return SmsSpec(phone, text)
    if kind is ChannelType.PUSH:
        token = spec.token if isinstance(spec, PushSpec) and spec.token else \
            (p.push_tokens[0] if p.push_tokens else "")
        if not token:
            return f"{NO_ADDRESS}: recipient {p.recipient_id} has no push token"
        if isinstance(spec, PushSpec):
            return replace(spec, token=token)
        return PushSpec(token, title or text[:80], text)
    if kind is ChannelType.TELEGRAM:
        chat = spec.chat_id if isinstance(spec, TelegramSpec) and spec.chat_id else p.telegram
        if chat is None:
            return f"{NO_ADDRESS}: recipient {p.recipient_id} has no Telegram chat"
        mode = spec.parse_mode if isinstance(spec, TelegramSpec) else None
        return TelegramSpec(chat, text, mode)
    inbox = spec.recipient if isinstance(spec, InboxSpec) and spec.recipient else \
        (p.inbox or p.recipient_id)
    if isinstance(spec, InboxSpec):
        return replace(spec, recipient=inbox)
    return InboxSpec(inbox, title or text[:80], text)


def _content(spec: ChannelSpec) -> tuple[str, str]:
    """(title, text) of a channel's message, whatever its type."""
    if isinstance(spec, EmailSpec):
        return spec.subject, spec.text
    if isinstance(spec, SmsSpec | TelegramSpec):
        return "", spec.text
    return spec.title, spec.body
