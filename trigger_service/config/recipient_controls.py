"""Where a caller's notification channels may send, and how much a day: the recipient
controls of one ``[callers.NAME]`` table, so that a caller token is not an open relay
(phishing from the operator's mail domain, SMS pumping on the operator's bill, messages
through the operator's bot or FCM project to chats and devices not the caller's)::

    email_domains = ["example.com", "*.example.org"]  # "*" alone: any domain
    sms_country_codes = ["1", "44"]                    # "*" alone: any number
    telegram_chats = [123456789, -1001234567890, "@shop_news"]  # "*" alone: any chat
    push_tokens = ["fcm-registration-token"]           # "*" alone: any device
    trusted = false              # true: the caller's HTML email bodies are sent as given
    [callers.NAME.daily_budget]  # optional: recipients per UTC day, per channel type
    email = 1000
    sms = 200

Safe by default, in every environment alike: a caller without ``email_domains`` may not use
the email channel at all, one without ``sms_country_codes`` not the SMS channel, one without
``telegram_chats`` not the deployment's one Telegram bot, one without ``push_tokens`` not its
one FCM project (both are the operator's: a caller given them could message any chat the bot
is in, any device of the operator's apps). The development callers file lists ``"*"`` for
``dev``. A domain matches case-insensitively and exactly; ``*.example.org`` matches every
subdomain of ``example.org`` (``a.example.org``, ``b.a.example.org``) but not
``example.org`` itself (list both for both). A country code is 1 to 3 digits matched at the
start of the E.164 number (ITU codes are prefix-free, so ``1`` is the whole North American
Numbering Plan, Caribbean included). A Telegram chat is its numeric id (a whole number,
negative for groups and channels) or a public channel's ``@username`` (matched
case-insensitively); a push token matches exactly. Email ``to`` and ``replyTo``, SMS ``to``,
Telegram ``chatId`` and push ``token`` are checked at registration (``app/channel_gate.py``;
a recipient profile's addresses when it is put) and again before each send
(``dispatcher/channels/caller_policy.py``: the file may have changed, a profile's address is
resolved only then, and triggers stored before these controls existed were never checked).

A ``daily_budget`` counts recipients: an email to 50 addresses takes 50 from ``email``, every
other channel 1 (``recipient_count``). A trigger one occurrence of which needs more than a
whole day's budget of a type (its channels of that type together) can never be sent and is
refused at registration (``budget_refusal``); a budget of 0 turns the type off like a spent
budget.

An untrusted caller's HTML email body is sanitised with nh3 (Ammonia's allow-list) before it
is stored and again before it is sent.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace

import nh3

from trigger_service.core.errors import ConfigError
from trigger_service.core.notify.channels import (
    MAX_TOKEN,
    ChannelSpec,
    ChannelType,
    EmailSpec,
    PushSpec,
    SmsSpec,
    TelegramSpec,
    is_telegram_chat,
    recipient_count,
)

ANY = "*"
_DOMAIN_RE = re.compile(r"^(\*\.)?[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}"
                        r"[a-z0-9])?)*$")
_CODE_RE = re.compile(r"^[1-9][0-9]{0,2}$")
_BUDGETED = (ChannelType.EMAIL, ChannelType.SMS, ChannelType.PUSH, ChannelType.INBOX,
             ChannelType.TELEGRAM)


@dataclass(frozen=True, slots=True)
class RecipientPolicy:
    """One caller's recipient controls; the default allows no email, SMS, Telegram nor push
    at all."""

    email_domains: tuple[str, ...] = ()  # lower case; "*" any, "*.x" any subdomain of x
    sms_country_codes: tuple[str, ...] = ()  # digits; "*" any
    daily_budget: tuple[tuple[ChannelType, int], ...] = ()  # recipients per UTC day
    trusted: bool = False  # HTML bodies sent as given (else sanitised)
    telegram_chats: frozenset[str] = frozenset()  # chat_key()s; "*" any
    push_tokens: frozenset[str] = frozenset()  # exact tokens; "*" any

    def email_refusal(self, address: str) -> str | None:
        """Why ``address`` may not be emailed by this caller (None: it may)."""
        domain = address.rpartition("@")[2].lower().rstrip(".")
        listed = any(domain == d or (d.startswith("*.") and domain.endswith(d[1:]))
                     for d in self.email_domains)
        return _refusal(self.email_domains, "email_domains", "send email", listed,
                        f"{domain} is not one of this caller's email domains")

    def sms_refusal(self, number: str) -> str | None:
        """Why the E.164 ``number`` may not be texted by this caller (None: it may)."""
        digits = number.removeprefix("+")
        return _refusal(self.sms_country_codes, "sms_country_codes", "send SMS",
                        any(digits.startswith(c) for c in self.sms_country_codes),
                        "the number's country code is not one of this caller's "
                        "sms_country_codes")

    def telegram_refusal(self, chat: int | str) -> str | None:
        """Why the operator's bot may not message ``chat`` for this caller (None: it may)."""
        return _refusal(self.telegram_chats, "telegram_chats", "use the Telegram bot",
                        chat_key(chat) in self.telegram_chats,
                        f"chat {chat} is not one of this caller's telegram_chats")

    def push_refusal(self, token: str) -> str | None:
        """Why the operator's FCM project may not push to ``token`` for this caller (None:
        it may). The token is not quoted: it is long, and it addresses a device."""
        return _refusal(self.push_tokens, "push_tokens", "send push",
                        token in self.push_tokens,
                        "the token is not one of this caller's push_tokens")

    def spec_refusal(self, spec: ChannelSpec) -> tuple[str, str] | None:
        """The field of ``spec`` this caller may not send to (``to``, ``replyTo``,
        ``chatId``, ``token``) and why, or None when every recipient is allowed (an inbox's
        are: it is the caller's own)."""
        if isinstance(spec, SmsSpec):
            why = self.sms_refusal(spec.to)
            return None if why is None else ("to", f"{spec.to}: {why}")
        if isinstance(spec, TelegramSpec):
            why = self.telegram_refusal(spec.chat_id)
            return None if why is None else ("chatId", why)
        if isinstance(spec, PushSpec):
            why = self.push_refusal(spec.token)
            return None if why is None else ("token", why)
        if not isinstance(spec, EmailSpec):
            return None
        for field, address in [*(("to", a) for a in spec.to),
                               *([("replyTo", spec.reply_to)] if spec.reply_to else [])]:
            why = self.email_refusal(address)
            if why is not None:
                return field, why
        return None

    def prepared(self, spec: ChannelSpec) -> ChannelSpec:
        """``spec`` as it may be sent: an untrusted caller's HTML sanitised."""
        if isinstance(spec, EmailSpec) and spec.html is not None and not self.trusted:
            clean = sanitise_html(spec.html)
            return spec if clean == spec.html else replace(spec, html=clean)
        return spec

    def budget_of(self, kind: ChannelType) -> int | None:
        """Recipients of ``kind`` per UTC day (None: no budget)."""
        return dict(self.daily_budget).get(kind)

    def budget_refusal(self, specs: tuple[ChannelSpec, ...]) -> tuple[int, str] | None:
        """The index of a channel of the first type whose channels in ``specs`` (one
        occurrence's) together need more recipients than that type's whole daily budget, and
        why; None when each type fits in a day. A budget of 0 is not this: it turns the type
        off for now (a spent budget, ``QuotaExceeded`` at registration)."""
        need: dict[ChannelType, int] = {}
        for i, spec in enumerate(specs):
            need[spec.type] = need.get(spec.type, 0) + recipient_count(spec)
            limit = self.budget_of(spec.type)
            if limit and need[spec.type] > limit:
                return i, (f"{need[spec.type]} {spec.type.value} recipients per occurrence: "
                           f"more than this caller's daily_budget.{spec.type.value} of {limit}")
        return None


def _refusal(allowed: Collection[str], key: str, use: str, listed: bool,
             outside: str) -> str | None:
    """The one rule of every allow-list of the callers file (``key``): empty, the channel
    is not the caller's to ``use`` at all; ``"*"`` or an address ``listed`` passes (None);
    else ``outside``, why not."""
    if not allowed:
        return f"this caller may not {use} (no {key} in the callers file)"
    return None if listed or ANY in allowed else outside


def sanitise_html(html: str) -> str:
    """``html`` without anything that runs or hides (nh3's defaults: an allow-list of tags
    and attributes, ``<script>``/``<style>`` dropped with their content, ``on*`` handlers and
    ``javascript:`` URLs removed; links get ``rel="noopener noreferrer"``). Idempotent."""
    return nh3.clean(html)


NO_RECIPIENTS = RecipientPolicy()  # a caller without recipient controls: no email, SMS, ...


def chat_key(chat: int | str) -> str:
    """How a Telegram chat is compared: its id in decimal, a ``@username`` in lower case
    (Telegram's usernames are case-insensitive)."""
    return str(chat).lower()


def _strings(table: Mapping[str, object], key: str, where: str) -> tuple[str, ...]:
    raw = table.get(key, [])
    if not isinstance(raw, list) or not all(isinstance(s, str) for s in raw):
        raise ConfigError(f"{where}.{key}: a list of strings")
    return tuple(str(s).lower().rstrip(".") for s in raw)


def _telegram_chats(table: Mapping[str, object], where: str) -> frozenset[str]:
    raw = table.get("telegram_chats", [])
    if not isinstance(raw, list):
        raise ConfigError(f"{where}.telegram_chats: a list of chat ids and @usernames")
    for chat in raw:
        if chat != ANY and not is_telegram_chat(chat):
            raise ConfigError(f"{where}.telegram_chats: {chat!r} is not a numeric chat id, "
                              "a channel's @username or '*'")
    return frozenset(chat_key(c) for c in raw)


def _push_tokens(table: Mapping[str, object], where: str) -> frozenset[str]:
    raw = table.get("push_tokens", [])
    if not isinstance(raw, list) or not all(
            isinstance(t, str) and t.strip() == t and 0 < len(t) <= MAX_TOKEN for t in raw):
        raise ConfigError(f"{where}.push_tokens: a list of FCM registration tokens or '*'")
    return frozenset(raw)


def parse_recipients(table: Mapping[str, object], where: str) -> RecipientPolicy:
    """``email_domains``, ``sms_country_codes``, ``telegram_chats``, ``push_tokens``,
    ``trusted`` and ``daily_budget`` of one caller's table; raises ``ConfigError`` naming the
    bad key."""
    domains = _strings(table, "email_domains", where)
    for d in domains:
        if d != ANY and not _DOMAIN_RE.match(d):
            raise ConfigError(f"{where}.email_domains: {d!r} is not a domain, '*.domain' "
                              "or '*'")
    codes = _strings(table, "sms_country_codes", where)
    for c in codes:
        if c != ANY and not _CODE_RE.match(c):
            raise ConfigError(f"{where}.sms_country_codes: {c!r} is not a country code "
                              "(1 to 3 digits, e.g. \"44\") or '*'")
    trusted = table.get("trusted", False)
    if not isinstance(trusted, bool):
        raise ConfigError(f"{where}.trusted: true or false")
    raw = table.get("daily_budget", {})
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}.daily_budget: a table such as {{email = 1000, sms = 200}}")
    budget: list[tuple[ChannelType, int]] = []
    for kind, value in raw.items():
        if kind not in _BUDGETED:
            raise ConfigError(f"{where}.daily_budget.{kind}: one of "
                              + ", ".join(k.value for k in _BUDGETED))
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ConfigError(f"{where}.daily_budget.{kind}: a whole number of recipients, "
                              "0 or more")
        budget.append((ChannelType(kind), value))
    return RecipientPolicy(domains, codes, tuple(budget), trusted,
                           _telegram_chats(table, where), _push_tokens(table, where))
