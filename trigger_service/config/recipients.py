"""Where a caller's notification channels may send, and how much a day (issue 25): the
recipient controls of one ``[callers.NAME]`` table, so that a caller token is not an open
relay (phishing from the operator's mail domain, SMS pumping on the operator's bill)::

    email_domains = ["example.com", "*.example.org"]  # "*" alone: any domain
    sms_country_codes = ["1", "44"]                    # "*" alone: any number
    trusted = false              # true: the caller's HTML email bodies are sent as given
    [callers.NAME.daily_budget]  # optional: sends per UTC day, per channel type
    email = 1000
    sms = 200

Safe by default, in every environment alike: a caller without ``email_domains`` may not use
the email channel at all, one without ``sms_country_codes`` not the SMS channel; the
development callers file lists ``"*"`` for ``dev``. A domain matches case-insensitively and
exactly; ``*.example.org`` matches every subdomain of ``example.org`` (``a.example.org``,
``b.a.example.org``) but not ``example.org`` itself (list both for both). A country code is
1 to 3 digits matched at the start of the E.164 number (ITU codes are prefix-free, so ``1``
is the whole North American Numbering Plan, Caribbean included). Both ``to`` and
``replyTo`` are checked, at registration (``app/recipients.py``) and again before each send
(``dispatcher/channels/caller_policy.py``: the file may have changed, and triggers stored
before these controls existed were never checked).

An untrusted caller's HTML email body is sanitised with nh3 (Ammonia's allow-list) before it
is stored and again before it is sent.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace

import nh3

from trigger_service.core.errors import ConfigError
from trigger_service.core.notify.channels import ChannelSpec, ChannelType, EmailSpec, SmsSpec

ANY = "*"
_DOMAIN_RE = re.compile(r"^(\*\.)?[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}"
                        r"[a-z0-9])?)*$")
_CODE_RE = re.compile(r"^[1-9][0-9]{0,2}$")
_BUDGETED = (ChannelType.EMAIL, ChannelType.SMS, ChannelType.PUSH, ChannelType.INBOX,
             ChannelType.TELEGRAM)


@dataclass(frozen=True, slots=True)
class RecipientPolicy:
    """One caller's recipient controls; the default allows no email and no SMS at all."""

    email_domains: tuple[str, ...] = ()  # lower case; "*" any, "*.x" any subdomain of x
    sms_country_codes: tuple[str, ...] = ()  # digits; "*" any
    daily_budget: tuple[tuple[ChannelType, int], ...] = ()  # sends per UTC day
    trusted: bool = False  # HTML bodies sent as given (else sanitised)

    def email_refusal(self, address: str) -> str | None:
        """Why ``address`` may not be emailed by this caller (None: it may)."""
        if not self.email_domains:
            return "this caller may not send email (no email_domains in the callers file)"
        domain = address.rpartition("@")[2].lower().rstrip(".")
        for allowed in self.email_domains:
            if allowed == ANY or domain == allowed:
                return None
            if allowed.startswith("*.") and domain.endswith(allowed[1:]):
                return None
        return f"{domain} is not one of this caller's email domains"

    def sms_refusal(self, number: str) -> str | None:
        """Why the E.164 ``number`` may not be texted by this caller (None: it may)."""
        if not self.sms_country_codes:
            return "this caller may not send SMS (no sms_country_codes in the callers file)"
        digits = number.removeprefix("+")
        if any(c == ANY or digits.startswith(c) for c in self.sms_country_codes):
            return None
        return "the number's country code is not one of this caller's sms_country_codes"

    def spec_refusal(self, spec: ChannelSpec) -> tuple[str, str] | None:
        """The field of ``spec`` this caller may not send to (``to``, ``replyTo``) and why,
        or None when every recipient is allowed (channels other than email and SMS are)."""
        if isinstance(spec, SmsSpec):
            why = self.sms_refusal(spec.to)
            return None if why is None else ("to", f"{spec.to}: {why}")
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
        """Sends of ``kind`` per UTC day (None: no budget)."""
        return dict(self.daily_budget).get(kind)


def sanitise_html(html: str) -> str:
    """``html`` without anything that runs or hides (nh3's defaults: an allow-list of tags
    and attributes, ``<script>``/``<style>`` dropped with their content, ``on*`` handlers and
    ``javascript:`` URLs removed; links get ``rel="noopener noreferrer"``). Idempotent."""
    return nh3.clean(html)


NO_RECIPIENTS = RecipientPolicy()  # a caller without recipient controls: no email, no SMS


def _strings(table: Mapping[str, object], key: str, where: str) -> tuple[str, ...]:
    raw = table.get(key, [])
    if not isinstance(raw, list) or not all(isinstance(s, str) for s in raw):
        raise ConfigError(f"{where}.{key}: a list of strings")
    return tuple(str(s).lower().rstrip(".") for s in raw)


def parse_recipients(table: Mapping[str, object], where: str) -> RecipientPolicy:
    """``email_domains``, ``sms_country_codes``, ``trusted`` and ``daily_budget`` of one
    caller's table; raises ``ConfigError`` naming the bad key."""
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
            raise ConfigError(f"{where}.daily_budget.{kind}: a whole number of sends, 0 or more")
        budget.append((ChannelType(kind), value))
    return RecipientPolicy(domains, codes, tuple(budget), trusted)
