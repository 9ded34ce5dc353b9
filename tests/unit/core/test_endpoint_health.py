"""The pure rules of endpoint health (``core.endpoint_health``)."""

from __future__ import annotations

import json

from standardwebhooks.webhooks import Webhook

from trigger_service.core.endpoint_health import (
    OpsEventType,
    disable_due,
    disabled_event,
    enabled_event,
    failed_again,
    first_failure,
    origin_prefix,
    parse_origin,
    write_due,
)
from trigger_service.core.urls import callback_origin

T0 = 1_700_000_000_000
DAY = 86_400_000


def test_the_origin_always_writes_the_port_and_brackets_ipv6() -> None:
    assert callback_origin("https://Hooks.Example.com/a?b=1") == "https://hooks.example.com:443"
    assert callback_origin("http://127.0.0.1:9000/cb") == "http://127.0.0.1:9000"
    assert callback_origin("http://[::1]:81/x") == "http://[::1]:81"
    assert callback_origin("http://h/") == "http://h:80"


def test_an_origin_given_by_a_person_is_read_or_refused() -> None:
    assert parse_origin("https://hooks.example.com") == "https://hooks.example.com:443"
    assert parse_origin("http://127.0.0.1:9000/") == "http://127.0.0.1:9000"
    # The form records have (stored URLs are normalised): IDNA, a trailing dot, IPv6.
    assert parse_origin("https://Hooks.Example.com.") == "https://hooks.example.com:443"
    assert parse_origin("https://Bücher.example") == "https://xn--bcher-kva.example:443"
    assert parse_origin("https://[2001:DB8::0:1]:8443") == "https://[2001:db8::1]:8443"
    for bad in ("hooks.example.com", "ftp://h", "https://h/path", "https://h:99999",
                "https://u@h", "https://h?x=1", ""):
        assert parse_origin(bad) is None, bad


def test_the_prefix_of_an_origin_matches_stored_urls_which_drop_a_default_port() -> None:
    assert origin_prefix("https://h.example:443") == "https://h.example/"
    assert origin_prefix("http://127.0.0.1:9000") == "http://127.0.0.1:9000/"


def test_failures_count_from_the_first_and_keep_the_last_error() -> None:
    h = first_failure("orders", "https://h:443", T0, "HTTP 503")
    assert (h.failures, h.first_failure_at_ms, h.last_failure_at_ms) == (1, T0, T0)
    h2 = failed_again(h, T0 + 5, None)
    assert (h2.failures, h2.last_failure_at_ms, h2.last_error) == (2, T0 + 5, "HTTP 503")
    assert failed_again(h2, T0 + 9, "x" * 9_999).last_error == "x" * 500  # bounded


def test_a_record_is_rewritten_only_after_the_write_period() -> None:
    assert not write_due(T0, T0 + 29_999, 30_000)
    assert write_due(T0, T0 + 30_000, 30_000)


def test_the_endpoint_is_disabled_after_disable_after_of_continuous_failure_once() -> None:
    h = first_failure("orders", "https://h:443", T0, "timeout")
    assert not disable_due(h, T0 + 5 * DAY - 1, 5 * DAY)
    assert disable_due(h, T0 + 5 * DAY, 5 * DAY)
    from dataclasses import replace
    assert not disable_due(replace(h, disabled_at_ms=T0 + 5 * DAY), T0 + 6 * DAY, 5 * DAY)


def test_the_events_carry_the_record_and_a_stable_id_and_verify_as_signed() -> None:
    h = failed_again(first_failure("orders", "https://h:443", T0, "HTTP 500"), T0 + 1, "HTTP 502")
    e = disabled_event(h, T0 + DAY)
    assert e.type is OpsEventType.DISABLED and e.event_id == disabled_event(h, T0 + DAY).event_id
    body = e.body()
    assert body["type"] == "endpoint.disabled"
    assert body["data"] == {"caller": "orders", "origin": "https://h:443",
                            "since": "2023-11-14T22:13:20.000Z", "failures": 2,
                            "lastError": "HTTP 502", "by": None}
    on = enabled_event(h, "orders", "https://h:443", T0 + 2 * DAY, "operator:alice")
    assert on.body()["data"]["by"] == "operator:alice" and on.event_id != e.event_id
    secret = "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    wh = Webhook(secret)
    from datetime import UTC, datetime
    now = datetime.now(UTC).replace(microsecond=0)
    text = json.dumps(body)
    headers = {"webhook-id": e.event_id, "webhook-timestamp": str(int(now.timestamp())),
               "webhook-signature": wh.sign(e.event_id, now, text)}
    assert wh.verify(text, headers) == body
