"""Callers: who may use the API, with which token, and where their callbacks may point.

The callers file (``TRIGGER_API_CALLERS_FILE``) is TOML with one table per caller::

    [callers.orders]
    token_sha256 = "<hex sha-256 of the bearer token>"   # or a list: both valid (rotation)
    callback_prefixes = ["https://orders.internal/", "http://127.0.0.1:9000/"]
                                 # or ["https://"]: any public host (see below)
    max_concurrency = 100        # optional: the caller's delivery bulkhead
    weight = 2                   # optional: its fair share in a dispatcher (default 1)
    signing_secrets = ["whsec_…"]  # optional: Standard Webhooks secrets, the current first
    max_attempts = 5             # optional, else TRIGGER_DISPATCH_MAX_ATTEMPTS
    retry_backoff_s = [1, 5, 30] # optional, else TRIGGER_DISPATCH_RETRY_BACKOFF_S
    max_age_s = 3600             # optional: give up this long after the fire time
    rate_per_s = 50              # optional: requests per second (a token bucket shared by
    burst = 100                  #   every API process; burst defaults to ceil(rate_per_s))
    max_pending = 100000         # optional: triggers counted at once (docs/operations/limits.md)
    email_domains = ["example.com", "*.example.org"]  # email channel recipients (else none)
    sms_country_codes = ["1", "44"]  # SMS channel numbers (else none); "*": any, in both
    trusted = false              # optional: true sends HTML email bodies unsanitised
    daily_budget = { email = 1000, sms = 200 }  # optional: sends per UTC day and channel
    disable_after_s = 86400      # optional: endpoint health (config/endpoint_health.py)
    on_disabled = "hold"         # or "dead_letter"
    flow_control = [{origin = "https://orders.internal", rate_per_second = 50,
                     parallelism = 5}]  # optional: defaults per origin (``flow_defaults``)

The recipient controls (the last four) are ``config/recipient_controls.py``'s: without
``email_domains`` a caller may not use the email channel, without ``sms_country_codes`` not
the SMS channel.

Operators and viewers of the ops console have tables of their own; they act on every
caller's dead letters (viewers only read) and cannot create triggers::

    [ops.alice]
    token_sha256 = "<hex sha-256>"
    role = "operator"            # or "viewer"

A callback URL is allowed when scheme, host and port equal a prefix's and its path starts
with the prefix's path on a segment boundary, all compared on the normalised URL
(``core/urls.py``), which is also the form stored and sent — so
``http://127.0.0.1:9000.evil.example/``, ``http://user@127.0.0.1:9000/`` and
``/hooks/..%2Fadmin`` do not pass.

A prefix may be broad: ``"https://"`` (the scheme alone) admits any host on the scheme's
default port. Through a broad prefix a callback may only reach public addresses: IP literals
and names that are loopback, private, link-local and the like (``core/notify/addresses.py``) are
refused unless a prefix that admits the URL names its host (the SSRF guard).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import math
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from trigger_service.config.endpoint_health import (
    DEFAULT_ENDPOINT_POLICY,
    EndpointPolicy,
    parse_endpoint_policy,
)
from trigger_service.config.flow_defaults import FlowDefault, parse_flow_defaults
from trigger_service.config.recipient_controls import (
    NO_RECIPIENTS,
    RecipientPolicy,
    parse_recipients,
)
from trigger_service.core.errors import ConfigError
from trigger_service.core.notify.addresses import forbidden_address, forbidden_name
from trigger_service.core.urls import (
    DEFAULT_PORTS,
    CallbackUrl,
    UrlError,
    normalise_callback_url,
)

_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_HEX64_RE = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True, slots=True)
class CallbackPrefix:
    scheme: str
    host: str  # "" for a broad prefix (any host)
    port: int
    path: str

    @classmethod
    def parse(cls, text: str) -> CallbackPrefix:
        """``scheme://host[:port][/path]``, or ``scheme://`` alone (broad); raises
        ``ValueError``."""
        scheme = text.lower().removesuffix("//").removesuffix(":")
        if text.lower() == f"{scheme}://" and scheme in DEFAULT_PORTS:
            return cls(scheme, "", DEFAULT_PORTS[scheme], "/")
        try:
            url = normalise_callback_url(text)
        except UrlError as e:
            raise ValueError(f"{text!r}: {e}") from e
        if url.query:
            raise ValueError(f"{text!r}: a prefix has no query")
        return cls(url.scheme, url.host, url.port, url.path)

    def allows(self, url: CallbackUrl) -> bool:
        """Scheme, host (unless broad) and port equal, the path under the prefix's."""
        if (url.scheme, url.port) != (self.scheme, self.port):
            return False
        if self.host and url.host != self.host:
            return False
        if self.path.endswith("/"):
            return url.path.startswith(self.path) or url.path + "/" == self.path
        return url.path == self.path or url.path.startswith(self.path + "/")

    def names(self, url: CallbackUrl) -> bool:
        """Does this prefix admit ``url`` naming its host (not just through breadth)?"""
        return bool(self.host) and self.allows(url)


@dataclass(frozen=True, slots=True)
class Caller:
    name: str
    token_sha256s: tuple[str, ...]  # every hash that authenticates as this caller
    callback_prefixes: tuple[CallbackPrefix, ...]
    max_concurrency: int | None = None
    signing_secrets: tuple[str, ...] = ()
    max_attempts: int | None = None
    retry_backoff_s: tuple[int, ...] | None = None
    max_age_s: int | None = None
    rate_per_s: float | None = None  # None: no request-rate limit
    burst: int | None = None
    max_pending: int | None = None  # None: no quota of pending triggers
    recipients: RecipientPolicy = NO_RECIPIENTS  # the default: no email, no SMS
    endpoints: EndpointPolicy = DEFAULT_ENDPOINT_POLICY  # when a failing endpoint is disabled
    # Its share of a dispatcher's in-flight cap and claim slots against other callers'
    # (``dispatcher.fair_share``).
    weight: int = 1
    flow_defaults: tuple[FlowDefault, ...] = ()  # per callback origin (``flow_defaults``)

    def allows_callback(self, url: CallbackUrl) -> bool:
        return self.callback_refusal(url) is None

    def names_callback_host(self, url: CallbackUrl) -> bool:
        """A prefix that admits ``url`` names its host: any address it has is allowed."""
        return any(p.names(url) for p in self.callback_prefixes)

    def callback_refusal(self, url: CallbackUrl) -> str | None:
        """Why ``url`` is not allowed for this caller (None: it is). Pure: a name's addresses
        are checked by whoever resolves it (``app/callbacks.py``, the dispatcher's
        resolver)."""
        if not any(p.allows(url) for p in self.callback_prefixes):
            return f"{url.text} is not under any callback prefix of caller {self.name}"
        if self.names_callback_host(url):
            return None
        ip = url.ip
        why = forbidden_address(ip) if ip is not None else forbidden_name(url.host)
        if why is None:
            return None
        return (f"{url.host} is {why}: only a callback prefix that names this host may "
                "point there")


class Role(StrEnum):
    CALLER = "caller"      # its own triggers and dead letters
    OPERATOR = "operator"  # every caller's dead letters and the ops console, read and act
    VIEWER = "viewer"      # the same, read only


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a bearer token authenticates: a caller (``caller`` set) or an ops user."""

    name: str
    role: Role
    caller: Caller | None = None

    @property
    def is_ops(self) -> bool:
        return self.role is not Role.CALLER


def parse_callback_url(text: str) -> CallbackUrl | None:
    """The URL the dispatcher will POST to, normalised, or None if it is not acceptable as a
    callback (``normalise_callback_url`` says why)."""
    try:
        return normalise_callback_url(text)
    except UrlError:
        return None


def _token_hashes(raw: object, where: str, seen: set[str]) -> tuple[str, ...]:
    """One hash, or a list of them (a rotation: old and new both valid); each unique."""
    values = raw if isinstance(raw, list) else [raw]
    hashes = tuple(str(v or "").lower() for v in values)
    for h in hashes:
        if not _HEX64_RE.match(h):
            raise ConfigError(f"{where}.token_sha256: must be 64 hex digits (sha-256), "
                              "or a list of them")
        if h in seen:
            raise ConfigError(f"{where}.token_sha256: shared with another caller")
        seen.add(h)
    if not hashes:
        raise ConfigError(f"{where}.token_sha256: at least one hash")
    return hashes


def _secrets(table: Mapping[str, object], where: str) -> tuple[str, ...]:
    raw = table.get("signing_secrets", [])
    if not isinstance(raw, list) or not all(isinstance(s, str) for s in raw):
        raise ConfigError(f"{where}.signing_secrets: a list of 'whsec_...' strings")
    for secret in raw:
        try:
            if not secret.startswith("whsec_") or not base64.b64decode(secret[6:],
                                                                        validate=True):
                raise ValueError("empty")
        except (ValueError, binascii.Error) as e:
            raise ConfigError(f"{where}.signing_secrets: not a 'whsec_<base64>' secret") from e
    return tuple(raw)


def _delivery_policy(table: Mapping[str, object], where: str) -> tuple[
        int | None, tuple[int, ...] | None, int | None]:
    """max_attempts, retry_backoff_s, max_age_s (None: the settings' defaults)."""
    out: list[object] = []
    for key in ("max_attempts", "max_age_s"):
        value = table.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)
                                  or value < 1):
            raise ConfigError(f"{where}.{key}: a positive integer")
        out.append(value)
    backoff = table.get("retry_backoff_s")
    if backoff is not None and (not isinstance(backoff, list) or not backoff or not all(
            isinstance(b, int) and not isinstance(b, bool) and b >= 0 for b in backoff)):
        raise ConfigError(f"{where}.retry_backoff_s: a non-empty list of seconds")
    return (out[0], tuple(backoff) if backoff else None,  # type: ignore[return-value]
            out[1])


def _limits(table: Mapping[str, object], where: str) -> tuple[
        float | None, int | None, int | None]:
    """rate_per_s, burst and max_pending (None: no limit); burst needs rate_per_s and
    defaults to ceil(rate_per_s)."""
    rate = table.get("rate_per_s")
    if rate is not None and (not isinstance(rate, int | float) or isinstance(rate, bool)
                             or not 0 < rate < 1e9):
        raise ConfigError(f"{where}.rate_per_s: a positive number")
    ints: list[int | None] = []
    for key in ("burst", "max_pending"):
        value = table.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)
                                  or value < 1):
            raise ConfigError(f"{where}.{key}: a positive integer")
        ints.append(value)
    burst, max_pending = ints
    if rate is None:
        if burst is not None:
            raise ConfigError(f"{where}.burst: needs rate_per_s")
        return None, None, max_pending
    return float(rate), burst or max(1, math.ceil(rate)), max_pending


def _ops_users(tables: object, source: str, seen: set[str]) -> list[tuple[Principal, str]]:
    """``[ops.NAME]`` tables: (principal, token hash) for each of their hashes."""
    if not isinstance(tables, dict):
        raise ConfigError(f"{source}: ops must be tables [ops.<name>]")
    out: list[tuple[Principal, str]] = []
    for name, table in tables.items():
        where = f"{source}: ops.{name}"
        if not _NAME_RE.match(name) or not isinstance(table, dict):
            raise ConfigError(f"{where}: bad name or not a table")
        role = table.get("role")
        if role not in (Role.OPERATOR, Role.VIEWER):
            raise ConfigError(f"{where}.role: 'operator' or 'viewer'")
        principal = Principal(name, Role(role))
        out += [(principal, h) for h in _token_hashes(table.get("token_sha256"), where, seen)]
    return out


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class CallerRegistry:
    """Callers by token hash; immutable after loading."""

    def __init__(self, callers: list[Caller],
                 ops: Sequence[tuple[Principal, str]] = ()) -> None:
        self._by_hash = {h: c for c in callers for h in c.token_sha256s}
        self._by_name = {c.name: c for c in callers}
        self._principals = {h: Principal(c.name, Role.CALLER, c)
                            for c in callers for h in c.token_sha256s}
        self._principals.update({h: p for p, h in ops})

    @classmethod
    def load(cls, path: Path) -> CallerRegistry:
        """Read and check the callers file; raises ``ConfigError`` naming the bad key."""
        try:
            data = tomllib.loads(Path(path).read_text())
        except (OSError, tomllib.TOMLDecodeError) as e:
            raise ConfigError(f"TRIGGER_API_CALLERS_FILE {path}: {e}") from e
        return cls.from_mapping(data, source=str(path))

    @classmethod
    def from_mapping(cls, data: Mapping[str, object], source: str = "callers") -> CallerRegistry:
        tables = data.get("callers")
        if not isinstance(tables, dict) or not tables:
            raise ConfigError(f"{source}: needs at least one [callers.<name>] table")
        callers: list[Caller] = []
        seen_hashes: set[str] = set()
        for name, table in tables.items():
            where = f"{source}: callers.{name}"
            if not _NAME_RE.match(name) or not isinstance(table, dict):
                raise ConfigError(f"{where}: bad caller name or not a table")
            hashes = _token_hashes(table.get("token_sha256"), where, seen_hashes)
            raw_prefixes = table.get("callback_prefixes")
            if not isinstance(raw_prefixes, list) or not raw_prefixes:
                raise ConfigError(f"{where}.callback_prefixes: a non-empty list of URLs")
            try:
                prefixes = tuple(CallbackPrefix.parse(str(p)) for p in raw_prefixes)
            except ValueError as e:
                raise ConfigError(f"{where}.callback_prefixes: {e}") from e
            conc = table.get("max_concurrency")
            if conc is not None and (not isinstance(conc, int) or conc < 1):
                raise ConfigError(f"{where}.max_concurrency: a positive integer")
            weight = table.get("weight", 1)
            if not isinstance(weight, int) or isinstance(weight, bool) or weight < 1:
                raise ConfigError(f"{where}.weight: a positive integer")
            callers.append(Caller(name, hashes, prefixes, conc, _secrets(table, where),
                                  *_delivery_policy(table, where), *_limits(table, where),
                                  recipients=parse_recipients(table, where),
                                  endpoints=parse_endpoint_policy(table, where),
                                  weight=weight, flow_defaults=parse_flow_defaults(
                                      table.get("flow_control"), where)))
        return cls(callers, _ops_users(data.get("ops", {}), source, seen_hashes))

    def by_token(self, token: str) -> Caller | None:
        """The caller this bearer token authenticates, if any."""
        return self._by_hash.get(hash_token(token))

    def principal(self, token: str) -> Principal | None:
        """The caller or ops user this bearer token authenticates, if any."""
        return self._principals.get(hash_token(token))

    def token_hashes(self) -> set[str]:
        """Every token hash that authenticates anyone (callers and ops users)."""
        return set(self._principals)

    def by_name(self, name: str) -> Caller | None:
        return self._by_name.get(name)

    def names_callback_host(self, name: str, url: CallbackUrl) -> bool:
        """Does a prefix of caller ``name`` that admits ``url`` name its host? Then the
        dispatcher connects to whatever address the host has (the operator chose it)."""
        caller = self._by_name.get(name)
        return caller is not None and caller.names_callback_host(url)

    def signing_secrets(self, name: str) -> tuple[str, ...]:
        """The caller's Standard Webhooks secrets, the current one first (none: unsigned)."""
        caller = self._by_name.get(name)
        return caller.signing_secrets if caller else ()
