"""Callback URLs, normalised once: the form that is checked against a caller's prefixes is the
form that is stored and sent (an allow-list that compares the decoded path while the raw one is
sent lets ``/hooks/..%2Fadmin`` pass a ``/hooks/`` prefix).

``normalise_callback_url`` is pure and idempotent (normalising its own output changes
nothing). What it does, and why:

- scheme ``http`` or ``https`` only (lower-cased); no user info (``user@``): an ``@`` in the
  authority is refused, so ``http://127.0.0.1:9000@evil.example/`` cannot confuse parsers;
- no white space, control characters or ``%`` in the host; at most ``MAX_URL_LEN`` characters;
- host: IDNA (UTS 46 mapping, each non-ASCII or ``xn--`` label validated by ``idna``:
  ``http://xn--a.com/`` is refused, never a 500), lower case, one trailing dot dropped;
  ASCII labels are letters, digits, ``-`` and ``_``;
- IP literals in any spelling the WHATWG URL standard (so browsers, curl, ``inet_aton``)
  accepts become their canonical form: ``2130706433``, ``0x7f.1``, ``0177.0.0.1`` and
  ``127.1`` are all ``127.0.0.1``; IPv6 in brackets is compressed (``[::ffff:7f00:1]``);
  whoever classifies the address sees the address that would be dialled;
- the port: the scheme's default is dropped, 1 to 65535 otherwise;
- path: ``\\`` is ``/`` (as WHATWG parsers treat it for http), escapes of unreserved
  characters are decoded (``%2e`` is ``.``), other escapes upper-cased, characters that may
  not appear raw are escaped, then dot-segments are removed (RFC 3986 5.2.4), so
  ``/hooks/%2e%2e/admin`` and ``/hooks/..\\admin`` are ``/admin``; an escaped ``/`` or ``\\``
  (``%2F``, ``%5C``) is refused: a receiver that decodes before routing would see a
  different path than the one checked;
- query: kept, with the same escaping rules (``%2F`` is fine there); the fragment is dropped
  (it is never sent).
"""

from __future__ import annotations

import functools
import ipaddress
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

import idna

DEFAULT_PORTS = {"http": 80, "https": 443}
MAX_URL_LEN = 2048
MAX_HOST_LEN = 253

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_SUB_DELIMS = frozenset("!$&'()*+,;=")
_PATH_RAW = _UNRESERVED | _SUB_DELIMS | frozenset(":@/")
_QUERY_RAW = _PATH_RAW | frozenset("?")
_HEX = frozenset("0123456789abcdefABCDEF")
_ASCII_LABEL = re.compile(r"^[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?$")
_DEC, _OCT, _HEXNUM = (re.compile(r"^[0-9]+$"), re.compile(r"^[0-7]+$"),
                       re.compile(r"^[0-9a-f]*$"))


class UrlError(ValueError):
    """Not an acceptable callback URL; the message says why (for a 400)."""


@dataclass(frozen=True, slots=True)
class CallbackUrl:
    """A normalised absolute http(s) URL. ``host``: lower-case ASCII (IDNA A-labels), or an
    IP literal in canonical form (IPv6 without brackets); ``port`` always set; ``path``
    starts with ``/``; ``query`` without its ``?`` ("" when none)."""

    scheme: str
    host: str
    port: int
    path: str = "/"
    query: str = ""

    @property
    def ip(self) -> IPAddress | None:
        """The host as an address, when it is an IP literal."""
        return _ip_literal(self.host)

    @property
    def netloc(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == DEFAULT_PORTS[self.scheme] else f"{host}:{self.port}"

    @property
    def origin(self) -> str:
        """``scheme://host:port``, the port always written (``callback_origin``'s form)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"

    @property
    def text(self) -> str:
        """The URL as stored and sent."""
        query = f"?{self.query}" if self.query else ""
        return f"{self.scheme}://{self.netloc}{self.path}{query}"

    def __str__(self) -> str:
        return self.text


@functools.lru_cache(maxsize=4096)
def callback_origin(url: str) -> str:
    """``scheme://host:port`` of a stored (normalised) callback URL, the port always
    written, an IPv6 host in brackets (``CallbackUrl.origin`` of its normalised form): the
    one form the breakers, endpoint health and flow-control defaults key on. Never raises
    but for a bad port (``ValueError``): a channel-only trigger's empty URL has an origin
    too. Cached: a herd shares its URL, and a delivery asks more than once."""
    u = urlsplit(url)
    host = (u.hostname or "").lower()
    if ":" in host:
        host = f"[{host}]"
    port = u.port or (443 if u.scheme == "https" else 80)
    return f"{u.scheme}://{host}:{port}"


@functools.lru_cache(maxsize=4096)
def normalise_callback_url(text: str) -> CallbackUrl:
    """``text`` as a ``CallbackUrl``; raises ``UrlError`` naming what is wrong. Cached
    (the value is frozen): a dispatcher checks, routes and sends the same few callback URLs
    over and over, and parses each once."""
    if not isinstance(text, str) or len(text) > MAX_URL_LEN:
        raise UrlError(f"an absolute http(s) URL of at most {MAX_URL_LEN} characters")
    if any(c.isspace() or ord(c) < 0x20 or ord(c) == 0x7F for c in text):
        raise UrlError("white space and control characters are not allowed")
    scheme, colon, rest = text.partition(":")
    scheme = scheme.lower()
    if not colon or scheme not in DEFAULT_PORTS or not rest.startswith("//"):
        raise UrlError("must be an absolute http(s) URL")
    rest = rest[2:]
    end = min((i for i in (rest.find(c) for c in "/?#\\") if i >= 0), default=len(rest))
    authority, rest = rest[:end], rest[end:]
    rest = rest.partition("#")[0]  # the fragment is never sent
    raw_path, _, raw_query = rest.partition("?")
    host, port = _authority(authority, scheme)
    return CallbackUrl(scheme, host, port, _path(raw_path), _escape(raw_query, _QUERY_RAW))


def _authority(authority: str, scheme: str) -> tuple[str, int]:
    if "@" in authority:
        raise UrlError("credentials (user@) are not allowed")
    if "%" in authority:
        raise UrlError("the host may not contain % escapes")
    if authority.startswith("["):
        inside, bracket, after = authority[1:].partition("]")
        if not bracket:
            raise UrlError("an IPv6 host needs its closing ]")
        try:
            host = ipaddress.IPv6Address(inside).compressed
        except ValueError as e:
            raise UrlError(f"not a valid IPv6 address: {inside}") from e
        port_text = after
        if port_text and not port_text.startswith(":"):
            raise UrlError("unexpected characters after the IPv6 host")
        port_text = port_text[1:]
    else:
        raw_host, _, port_text = authority.partition(":")
        host = normalise_host(raw_host)
    return host, _port(port_text, scheme)


def _port(text: str, scheme: str) -> int:
    if not text:
        return DEFAULT_PORTS[scheme]
    if not _DEC.match(text) or not 1 <= int(text) <= 65535:
        raise UrlError(f"not a valid port: {text}")
    return int(text)


def normalise_host(raw: str) -> str:
    """A host name or IPv4 literal in its canonical form (see the module's docstring)."""
    if not raw:
        raise UrlError("a host is required")
    try:
        host = idna.uts46_remap(raw, std3_rules=False, transitional=False)
    except (idna.IDNAError, UnicodeError, ValueError) as e:
        raise UrlError(f"not a valid host name: {raw}") from e
    if host.endswith("."):
        host = host[:-1]
    labels = host.split(".")
    if _ends_in_number(labels[-1]):
        return str(_whatwg_ipv4(labels, raw))
    out = [_label(label, raw) for label in labels]
    host = ".".join(out)
    if len(host) > MAX_HOST_LEN:
        raise UrlError(f"host name longer than {MAX_HOST_LEN} characters")
    return host


def _label(label: str, raw: str) -> str:
    if label.isascii() and not label.startswith("xn--"):
        if not _ASCII_LABEL.match(label):
            raise UrlError(f"not a valid host name: {raw}")
        return label
    try:
        # Validates punycode (``xn--``) labels by decoding them, and encodes the others.
        encoded = idna.encode(label).decode("ascii")
    except (idna.IDNAError, UnicodeError, ValueError) as e:
        raise UrlError(f"not a valid internationalised host name: {raw}") from e
    return encoded


@functools.lru_cache(maxsize=1024)
def _ip_literal(host: str) -> IPAddress | None:
    # Cached: every registration asks twice (the callers file's check, the SSRF vet), and
    # the stdlib's parser is a sizeable share of a batch item's CPU; addresses are immutable.
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def _ends_in_number(last: str) -> bool:
    """WHATWG "ends in a number": such a host is an IPv4 address or invalid, never a name."""
    return bool(_DEC.match(last)) or (last[:2] == "0x" and bool(_HEXNUM.match(last[2:])))


def _whatwg_ipv4(parts: list[str], raw: str) -> ipaddress.IPv4Address:
    """The WHATWG IPv4 parser: 1 to 4 parts, each decimal, octal (leading 0) or hex (0x);
    the last part fills the remaining bytes (``127.1``, ``2130706433``)."""
    bad = UrlError(f"not a valid IPv4 address: {raw}")
    if len(parts) > 4:
        raise bad
    numbers = []
    for part in parts:
        if part[:2] == "0x":
            digits, base, ok = part[2:], 16, _HEXNUM.match(part[2:])
        elif len(part) > 1 and part[0] == "0":
            digits, base, ok = part[1:], 8, _OCT.match(part[1:])
        else:
            digits, base, ok = part, 10, _DEC.match(part)
        if not part or not ok:
            raise bad
        numbers.append(int(digits or "0", base))
    if any(n > 255 for n in numbers[:-1]) or numbers[-1] >= 256 ** (5 - len(numbers)):
        raise bad
    value = numbers[-1] + sum(n << (8 * (3 - i)) for i, n in enumerate(numbers[:-1]))
    return ipaddress.IPv4Address(value)


def _escape(raw: str, allowed: frozenset[str], *, in_path: bool = False) -> str:
    """Escapes checked and upper-cased, unreserved ones decoded, other characters escaped
    (UTF-8). In a path an escaped ``/`` or ``\\`` is refused."""
    out: list[str] = []
    i = 0
    while i < len(raw):
        c = raw[i]
        if c == "%":
            pair = raw[i + 1:i + 3]
            if len(pair) != 2 or not set(pair) <= _HEX:
                raise UrlError("a % not followed by two hex digits")
            decoded = chr(int(pair, 16))
            if in_path and decoded in "/\\":
                raise UrlError("an escaped / or \\ (%2F, %5C) in the path is not allowed")
            out.append(decoded if decoded in _UNRESERVED else "%" + pair.upper())
            i += 3
            continue
        out.append(c if c in allowed else "".join(f"%{b:02X}" for b in c.encode()))
        i += 1
    return "".join(out)


def _path(raw: str) -> str:
    path = _escape(raw.replace("\\", "/"), _PATH_RAW, in_path=True)
    return remove_dot_segments(path or "/")


def remove_dot_segments(path: str) -> str:
    """RFC 3986 section 5.2.4 on an absolute path (``.`` and ``..`` segments)."""
    segments = path.split("/")[1:]
    out: list[str] = []
    for i, seg in enumerate(segments):
        last = i == len(segments) - 1
        if seg == "..":
            if out:
                out.pop()
            if last:
                out.append("")
        elif seg == ".":
            if last:
                out.append("")
        else:
            out.append(seg)
    return "/" + "/".join(out)
