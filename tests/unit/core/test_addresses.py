"""Which addresses a callback may reach through a broad prefix (the SSRF guard)."""

from __future__ import annotations

import ipaddress

import pytest

from trigger_service.core.notify.addresses import forbidden_address, forbidden_name


@pytest.mark.parametrize(("address", "why"), [
    ("127.0.0.1", "loopback"),
    ("127.255.255.254", "loopback"),
    ("10.1.2.3", "private"),
    ("172.16.0.1", "private"),
    ("172.31.255.255", "private"),
    ("192.168.1.1", "private"),
    ("100.64.0.1", "CGNAT"),
    ("100.127.255.255", "CGNAT"),
    ("169.254.169.254", "link-local"),
    ("0.0.0.0", "unspecified"),
    ("0.1.2.3", "unspecified"),
    ("224.0.0.1", "multicast"),
    ("239.255.255.250", "multicast"),
    ("240.0.0.1", "reserved"),
    ("255.255.255.255", "reserved"),
    ("192.0.2.1", "documentation"),
    ("198.18.0.1", "benchmarking"),
    ("192.0.0.8", "IETF"),
    ("::", "unspecified"),
    ("::1", "loopback"),
    ("::ffff:127.0.0.1", "IPv4-mapped"),
    ("::ffff:8.8.8.8", "IPv4-mapped"),  # whatever it maps to: an OS may route it locally
    ("::127.0.0.1", "IPv4-compatible"),
    ("64:ff9b::7f00:1", "NAT64"),
    ("2002:7f00:1::", "6to4"),
    ("fd00::1", "unique-local"),
    ("fc00::1", "unique-local"),
    ("fe80::1", "link-local"),
    ("fec0::1", "site-local"),
    ("ff02::1", "multicast"),
    ("2001:db8::1", "documentation"),
    ("2001::1", "not globally routable"),  # Teredo
    ("100::1", "discard"),
])
def test_forbidden(address: str, why: str) -> None:
    reason = forbidden_address(ipaddress.ip_address(address))
    assert reason is not None and why in reason


@pytest.mark.parametrize("address", ["8.8.8.8", "1.1.1.1", "93.184.216.34", "100.63.255.255",
                                     "100.128.0.0", "172.32.0.1", "2606:4700::1111",
                                     "2a00:1450:4001:80b::200e"])
def test_public(address: str) -> None:
    assert forbidden_address(ipaddress.ip_address(address)) is None


@pytest.mark.parametrize(("host", "forbidden"), [
    ("localhost", True), ("api.localhost", True), ("localhost.example", False),
    ("mylocalhost", False), ("example.com", False),
])
def test_localhost_names(host: str, forbidden: bool) -> None:
    assert (forbidden_name(host) is not None) is forbidden
