"""A caller's callback prefixes: the normalised URL is what is compared, a
broad prefix ("https://") reaches public hosts only, a prefix that names a host reaches it
whatever its address. Table-driven over the known bypasses."""

from __future__ import annotations

from typing import Any

import pytest

from trigger_service.config.callers import CallbackPrefix, Caller, CallerRegistry, hash_token
from trigger_service.core.errors import ApiError, CallbackNotAllowed, ConfigError, InvalidRequest
from trigger_service.core.urls import normalise_callback_url
from trigger_service.http.parsing import parse_callback

REG = CallerRegistry.from_mapping({"callers": {
    "broad": {"token_sha256": hash_token("b"),
              "callback_prefixes": ["https://", "http://", "http://127.0.0.1:9000/hooks/",
                                    "https://10.0.0.5/", "http://localhost:9100/"]},
    "narrow": {"token_sha256": hash_token("n"),
               "callback_prefixes": ["https://orders.internal/hooks/"]},
}})
BROAD, NARROW = REG.by_name("broad"), REG.by_name("narrow")
assert BROAD is not None and NARROW is not None


def check(caller: Caller, url: str) -> str | type[ApiError]:
    """The stored URL, or the error class a registration gets."""
    try:
        return parse_callback({"callbackUrl": url}, caller)
    except ApiError as e:
        assert e.message.startswith("callbackUrl: "), e.message
        return type(e)


@pytest.mark.parametrize(("url", "outcome"), [
    # public hosts through the broad prefix, normalised
    ("https://example.com/x", "https://example.com/x"),
    ("HTTPS://Example.COM:443/a/./b", "https://example.com/a/b"),
    ("http://bücher.de/", "http://xn--bcher-kva.de/"),
    ("https://8.8.8.8/", "https://8.8.8.8/"),
    # non-default ports are outside a broad prefix
    ("https://example.com:8443/", CallbackNotAllowed),
    ("http://example.com:8080/", CallbackNotAllowed),
    # literal IPs in any spelling, not named by a prefix
    ("http://127.0.0.1/", CallbackNotAllowed),
    ("http://2130706433/", CallbackNotAllowed),
    ("http://017700000001/", CallbackNotAllowed),
    ("http://0x7f000001/", CallbackNotAllowed),
    ("http://127.1/", CallbackNotAllowed),
    ("http://[::1]/", CallbackNotAllowed),
    ("http://[::ffff:127.0.0.1]/", CallbackNotAllowed),
    ("http://[::ffff:7f00:1]/", CallbackNotAllowed),
    ("http://169.254.169.254/latest/meta-data", CallbackNotAllowed),
    ("http://100.64.0.1/", CallbackNotAllowed),
    ("http://10.0.0.1/", CallbackNotAllowed),
    ("http://192.168.0.1/", CallbackNotAllowed),
    ("http://[fd00::1]/", CallbackNotAllowed),
    ("http://0.0.0.0/", CallbackNotAllowed),
    ("http://224.0.0.1/", CallbackNotAllowed),
    ("http://localhost/", CallbackNotAllowed),
    ("http://localhost./", CallbackNotAllowed),
    ("http://api.localhost/", CallbackNotAllowed),
    # named explicitly: allowed, and only under the named prefix's path and port
    ("http://127.0.0.1:9000/hooks/a", "http://127.0.0.1:9000/hooks/a"),
    ("http://2130706433:9000/hooks/a", "http://127.0.0.1:9000/hooks/a"),
    ("http://127.0.0.1:9000/hooks/../admin", CallbackNotAllowed),
    ("http://127.0.0.1:9000/hooks/..\\admin", CallbackNotAllowed),
    ("http://127.0.0.1:9000/hooks/%2e%2e/admin", CallbackNotAllowed),
    ("http://127.0.0.1:9000/hooks/..%2Fadmin", InvalidRequest),
    ("http://127.0.0.1:9000/hooks/..%5Cadmin", InvalidRequest),
    ("http://127.0.0.1:9001/hooks/a", CallbackNotAllowed),
    ("https://10.0.0.5/x", "https://10.0.0.5/x"),
    ("http://10.0.0.5/x", CallbackNotAllowed),
    ("http://localhost:9100/x", "http://localhost:9100/x"),
    # malformed: 400, never a 500
    ("http://xn--a.com/", InvalidRequest),
    ("http://user@example.com/", InvalidRequest),
    ("http://127.0.0.1:9000@evil.example/", InvalidRequest),
    ("ftp://example.com/", InvalidRequest),
    ("file:///etc/passwd", InvalidRequest),
    ("gopher://127.0.0.1:6379/_FLUSHALL", InvalidRequest),
])
def test_broad_caller(url: str, outcome: str | type[ApiError]) -> None:
    assert NARROW is not None and BROAD is not None
    assert check(BROAD, url) == outcome


@pytest.mark.parametrize(("url", "outcome"), [
    ("https://orders.internal/hooks/x", "https://orders.internal/hooks/x"),
    ("https://ORDERS.internal./hooks/x", "https://orders.internal/hooks/x"),
    ("https://orders.internal/hooks/../admin", CallbackNotAllowed),
    ("https://orders.internal/hooks/..\\admin", CallbackNotAllowed),
    ("https://orders.internal/hooks/..%2Fadmin", InvalidRequest),
    ("https://orders.internal/hooksevil", CallbackNotAllowed),
    ("https://example.com/hooks/", CallbackNotAllowed),
    ("https://orders.internal:8443/hooks/", CallbackNotAllowed),
])
def test_narrow_caller(url: str, outcome: str | type[ApiError]) -> None:
    assert NARROW is not None
    assert check(NARROW, url) == outcome


def test_refusals_say_why() -> None:
    assert BROAD is not None
    with pytest.raises(CallbackNotAllowed, match="loopback"):
        parse_callback({"callbackUrl": "http://2130706433/"}, BROAD)
    with pytest.raises(CallbackNotAllowed, match="link-local"):
        parse_callback({"callbackUrl": "http://169.254.169.254/"}, BROAD)
    with pytest.raises(CallbackNotAllowed, match="not under any callback prefix"):
        parse_callback({"callbackUrl": "https://example.com:8443/"}, BROAD)


def test_names_callback_host() -> None:
    def named(caller: str, url: str) -> bool:
        return REG.names_callback_host(caller, normalise_callback_url(url))
    assert named("broad", "http://127.0.0.1:9000/hooks/x")
    assert not named("broad", "http://127.0.0.1:9000/other")  # not admitted by that prefix
    assert not named("broad", "https://example.com/")  # admitted only through breadth
    assert named("narrow", "https://orders.internal/hooks/")
    assert not named("ghost", "https://orders.internal/hooks/")


@pytest.mark.parametrize(("text", "prefix"), [
    ("https://", CallbackPrefix("https", "", 443, "/")),
    ("HTTP://", CallbackPrefix("http", "", 80, "/")),
    ("http://127.0.0.1:9000", CallbackPrefix("http", "127.0.0.1", 9000, "/")),
    ("https://Orders.Internal/hooks", CallbackPrefix("https", "orders.internal", 443,
                                                     "/hooks")),
])
def test_prefix_forms(text: str, prefix: CallbackPrefix) -> None:
    assert CallbackPrefix.parse(text) == prefix


@pytest.mark.parametrize("bad", ["https:", "ftp://", "http://u@h/", "http://h/?q=1",
                                 "http://xn--a.com/", "https://:8443"])
def test_bad_prefixes_fail_at_load(bad: str) -> None:
    table: dict[str, Any] = {"callers": {"a": {"token_sha256": "a" * 64,
                                               "callback_prefixes": [bad]}}}
    with pytest.raises(ConfigError, match="callback_prefixes"):
        CallerRegistry.from_mapping(table)
