"""Callback URL normalisation: every known bypass of a prefix check, and the rule that
normalising is idempotent (what is checked is what is stored and sent)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trigger_service.core.urls import UrlError, normalise_callback_url, remove_dot_segments


@pytest.mark.parametrize(("raw", "normalised"), [
    # dot-segments, raw and encoded, and backslashes (a path separator to WHATWG parsers)
    ("http://h/hooks/../admin", "http://h/admin"),
    ("http://h/hooks/..\\admin", "http://h/admin"),
    ("http://h/hooks/%2e%2e/admin", "http://h/admin"),
    ("http://h/hooks/.%2E/admin", "http://h/admin"),
    ("http://h/hooks/./x/.", "http://h/hooks/x/"),
    ("http://h/a/b/..", "http://h/a/"),
    ("http://h/../../x", "http://h/x"),
    ("http://h\\hooks", "http://h/hooks"),
    ("http://h\\@evil.example/", "http://h/@evil.example/"),
    # escapes: unreserved decoded, others upper-cased, raw specials escaped
    ("http://h/%7euser/%41", "http://h/~user/A"),
    ("http://h/a%3fb", "http://h/a%3Fb"),
    ("http://h/ü", "http://h/%C3%BC"),
    ("http://h/a\"b<c>", "http://h/a%22b%3Cc%3E"),
    ("http://h/x?a=%2f&b=ü", "http://h/x?a=%2F&b=%C3%BC"),
    ("http://h/x?", "http://h/x"),
    ("http://h/x#frag", "http://h/x"),
    # scheme, host case, default ports, empty path
    ("HTTPS://Orders.Internal:443", "https://orders.internal/"),
    ("http://h:80/", "http://h/"),
    ("http://h:/", "http://h/"),
    ("http://h:8080/", "http://h:8080/"),
    ("http://localhost./", "http://localhost/"),
    ("http://a_b.internal/", "http://a_b.internal/"),
    # IDNA
    ("http://bücher.de/", "http://xn--bcher-kva.de/"),
    ("http://XN--BCHER-KVA.de/", "http://xn--bcher-kva.de/"),
    # fullwidth letters and an ideographic full stop (UTS 46 maps them)
    ("http://\uff45\uff58\uff41\uff4d\uff50\uff4c\uff45\u3002com/", "http://example.com/"),
    # IPv4 in every spelling WHATWG parsers accept
    ("http://2130706433/", "http://127.0.0.1/"),
    ("http://017700000001/", "http://127.0.0.1/"),
    ("http://0x7f000001/", "http://127.0.0.1/"),
    ("http://0x7F.0.0.1/", "http://127.0.0.1/"),
    ("http://0177.0.0.1/", "http://127.0.0.1/"),
    ("http://127.1/", "http://127.0.0.1/"),
    ("http://127.0.1/", "http://127.0.0.1/"),
    ("http://0/", "http://0.0.0.0/"),
    ("http://0x/", "http://0.0.0.0/"),
    ("http://169.254.169.254./latest", "http://169.254.169.254/latest"),
    # IPv6, compressed
    ("http://[::ffff:127.0.0.1]/", "http://[::ffff:7f00:1]/"),
    ("http://[0:0:0:0:0:0:0:1]:8080/", "http://[::1]:8080/"),
    ("http://[FD00::1]/", "http://[fd00::1]/"),
])
def test_normalised_form(raw: str, normalised: str) -> None:
    url = normalise_callback_url(raw)
    assert url.text == normalised
    assert normalise_callback_url(url.text) == url  # idempotent


@pytest.mark.parametrize(("raw", "why"), [
    ("http://h/hooks/..%2Fadmin", "escaped /"),
    ("http://h/hooks/..%2fadmin", "escaped /"),
    ("http://h/hooks/..%5Cadmin", "escaped /"),
    ("http://xn--a.com/", "internationalised"),
    ("http://xn--/", "internationalised"),
    ("http://u@h/", "credentials"),
    ("http://u:p@h/", "credentials"),
    ("http://127.0.0.1:9000@evil.example/", "credentials"),
    ("http://%31%32%37.0.0.1/", "escapes"),
    ("http://[::1%25eth0]/", "escapes"),
    ("http://h:0/", "port"),
    ("http://h:65536/", "port"),
    ("http://h:8o/", "port"),
    ("http://h:1:2/", "port"),
    ("http://256.0.0.1/", "IPv4"),
    ("http://1.2.3.4.5/", "IPv4"),
    ("http://0x100000000/", "IPv4"),
    ("http://4294967296/", "IPv4"),
    ("http://08.0.0.1/", "IPv4"),
    ("http://example.0x10/", "IPv4"),
    ("http://a.b.1/", "IPv4"),
    ("http://[::1/", "closing"),
    ("http://[::g]/", "IPv6"),
    ("http://[::1]x/", "after the IPv6"),
    ("http://h*st/", "host name"),
    ("http://-h/", "host name"),
    ("http://a..b/", "host name"),
    ("http://" + "a" * 64 + ".com/", "host name"),
    ("http://" + ".".join(["a" * 60] * 5) + "/", "longer"),
    ("http:///x", "host"),
    ("http://", "host"),
    ("ftp://h/", "absolute http"),
    ("javascript:alert(1)", "absolute http"),
    ("//h/x", "absolute http"),
    ("http:h/x", "absolute http"),
    ("/relative", "absolute http"),
    ("http://h/a b", "white space"),
    ("http://h/a\tb", "white space"),
    ("http://h/a\x00", "control"),
    ("http://h/%zz", "hex digits"),
    ("http://h/%4", "hex digits"),
    ("http://h/" + "a" * 2048, "2048"),
])
def test_refused(raw: str, why: str) -> None:
    with pytest.raises(UrlError, match=why):
        normalise_callback_url(raw)


def test_ip_and_netloc() -> None:
    url = normalise_callback_url("http://[::1]:9000/x")
    assert (str(url.ip), url.netloc, url.port) == ("::1", "[::1]:9000", 9000)
    assert normalise_callback_url("https://example.com/").ip is None


@pytest.mark.parametrize(("path", "out"), [
    ("/", "/"), ("/a/./b/../c", "/a/c"), ("/..", "/"), ("/a/..", "/"), ("/a//b", "/a//b"),
    ("/a/b/.", "/a/b/"), ("/.../x", "/.../x"),
])
def test_remove_dot_segments(path: str, out: str) -> None:
    assert remove_dot_segments(path) == out


_PIECES = st.sampled_from(["a", "B", "/", "..", ".", "%2e", "%2E", "%41", "%7e", "\\", "%",
                           "?", "#", "ü", ":", "@", "%3F", "~", "=", "&", "%20", "x-y"])


@given(st.lists(_PIECES, max_size=12).map("".join),
       st.sampled_from(["http://h", "https://Ex.com:443", "http://127.1:81", "http://[::1]"]))
def test_normalising_twice_changes_nothing(tail: str, base: str) -> None:
    try:
        url = normalise_callback_url(base + "/" + tail)
    except UrlError:
        return
    assert normalise_callback_url(url.text) == url
    assert "/../" not in url.path and "/./" not in url.path and "\\" not in url.text
