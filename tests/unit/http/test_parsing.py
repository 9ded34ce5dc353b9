from __future__ import annotations

import json
from typing import Any

import pytest

from trigger_service.app.registration import timed_request
from trigger_service.config.callers import Caller, CallerRegistry, hash_token, parse_callback_url
from trigger_service.config.settings import ApiSettings
from trigger_service.core.errors import (
    ApiError,
    CallbackNotAllowed,
    ConfigError,
    FireAtOutOfRange,
    InvalidRequest,
    PayloadTooLarge,
)
from trigger_service.http.parsing import (
    decode_cursor,
    encode_cursor,
    parse_idempotency_key,
    parse_json_body,
    parse_list_query,
    parse_register,
    request_hash,
)

NOW = 1_800_000_000_000
REG = CallerRegistry.from_mapping({"callers": {"orders": {
    "token_sha256": hash_token("tok"),
    "callback_prefixes": ["https://orders.internal/", "http://127.0.0.1:9000/hooks"],
}}})
_orders = REG.by_name("orders")
assert _orders is not None
ORDERS: Caller = _orders


def reg(body: Any) -> Any:
    """What the API makes of a body: parsed here (shapes), timed by the use case."""
    parsed = parse_register(body, caller=ORDERS, now_ms=NOW, payload_max_bytes=4096)
    return timed_request(parsed, ApiSettings(max_fire_ahead_days=366))


def err(body: Any) -> ApiError:
    with pytest.raises(ApiError) as e:
        reg(body)
    return e.value


def test_delay_seconds_and_fire_at() -> None:
    r = reg({"callbackUrl": "https://orders.internal/x", "payload": {"a": 1}, "delaySeconds": 1.5})
    assert r.fire_at_ms == NOW + 1500 and json.loads(r.payload_json) == {"a": 1}
    r = reg({"callbackUrl": "https://orders.internal/x", "fireAt": "2027-02-01T01:00:00+01:00"})
    assert r.fire_at_ms == 1801440000000
    r = reg({"callbackUrl": "https://orders.internal/", "fireAt": "2000-01-01T00:00:00Z"})
    assert r.fire_at_ms == NOW  # a past fire time fires now
    no_payload = reg({"callbackUrl": "https://orders.internal/", "delaySeconds": 0})
    assert no_payload.payload_json == "null"


@pytest.mark.parametrize(
    ("body", "cls", "field"),
    [
        ([], InvalidRequest, "body"),
        ({"payload": 1, "delaySeconds": 1}, InvalidRequest, "callbackUrl"),
        ({"callbackUrl": 5, "delaySeconds": 1}, InvalidRequest, "callbackUrl"),
        ({"callbackUrl": "https://orders.internal/"}, InvalidRequest, "delaySeconds/fireAt"),
        ({"callbackUrl": "https://orders.internal/", "delaySeconds": 1,
          "fireAt": "2030-01-01T00:00:00Z"}, InvalidRequest, "delaySeconds/fireAt"),
        ({"callbackUrl": "https://orders.internal/", "delaySeconds": "5"}, InvalidRequest,
         "delaySeconds"),
        ({"callbackUrl": "https://orders.internal/", "delaySeconds": True}, InvalidRequest,
         "delaySeconds"),
        ({"callbackUrl": "https://orders.internal/", "delaySeconds": -1}, InvalidRequest,
         "delaySeconds"),
        ({"callbackUrl": "https://orders.internal/", "fireAt": 123}, InvalidRequest, "fireAt"),
        ({"callbackUrl": "https://orders.internal/", "fireAt": "2030-01-01T00:00:00"},
         InvalidRequest, "fireAt"),
        ({"callbackUrl": "https://orders.internal/", "delaySeconds": 1, "delay": 2},
         InvalidRequest, "delay"),
        ({"callbackUrl": "https://orders.internal/", "delaySeconds": 367 * 86400},
         FireAtOutOfRange, "delaySeconds"),
        ({"callbackUrl": "https://orders.internal/", "fireAt": "2099-01-01T00:00:00Z"},
         FireAtOutOfRange, "fireAt"),
        ({"callbackUrl": "https://orders.internal/", "delaySeconds": 1, "payload": "x" * 4095},
         PayloadTooLarge, "payload"),
        ({"callbackUrl": "ftp://orders.internal/", "delaySeconds": 1}, InvalidRequest,
         "callbackUrl"),
        ({"callbackUrl": "https://evil.example/", "delaySeconds": 1}, CallbackNotAllowed,
         "callbackUrl"),
    ],
)
def test_register_errors_name_the_field(body: Any, cls: type[ApiError], field: str) -> None:
    e = err(body)
    assert type(e) is cls
    assert e.message.startswith(field), e.message


def test_payload_limit_is_on_serialized_utf8_bytes() -> None:
    ok = {"callbackUrl": "https://orders.internal/", "delaySeconds": 1, "payload": "é" * 2046}
    assert len(reg(ok).payload_json.encode()) == 4094
    ok["payload"] = "é" * 2048
    assert isinstance(err(ok), PayloadTooLarge)


@pytest.mark.parametrize(
    ("url", "allowed"),
    [
        ("https://orders.internal/", True),
        ("https://orders.internal/a/b?x=1", True),
        ("https://ORDERS.internal:443/a", True),
        ("http://orders.internal/", False),
        ("https://orders.internal:8443/", False),
        ("https://orders.internal.evil.example/", False),
        ("http://127.0.0.1:9000/hooks", True),
        ("http://127.0.0.1:9000/hooks/x", True),
        ("http://127.0.0.1:9000/hooksevil", False),
        ("http://127.0.0.1:9000/other", False),
        ("http://127.0.0.1:9000/hooks/../admin", False),
        ("http://127.0.0.1:9000.evil.example/hooks", False),
        ("http://127.0.0.1:90001/hooks", False),
        ("http://user@127.0.0.1:9000/hooks", False),
        ("http://127.0.0.1:9000@evil.example/hooks", False),
    ],
)
def test_callback_prefix_compares_parsed_urls(url: str, allowed: bool) -> None:
    parsed = parse_callback_url(url)
    assert (parsed is not None and ORDERS.allows_callback(parsed)) is allowed


def test_malformed_json_and_nan() -> None:
    with pytest.raises(InvalidRequest):
        parse_json_body(b"{not json")
    with pytest.raises(InvalidRequest):
        parse_json_body(b'{"delaySeconds": NaN}')
    with pytest.raises(InvalidRequest):
        parse_json_body(b"\xff\xfe")


def test_request_hash_ignores_key_order_and_whitespace() -> None:
    assert request_hash(parse_json_body(b'{"a":1,"b":[1,2]}')) == request_hash(
        parse_json_body(b'{ "b": [1, 2], "a": 1 }'))
    assert request_hash({"a": 1}) != request_hash({"a": 2})


def test_idempotency_key_rules() -> None:
    assert parse_idempotency_key(None) is None
    assert parse_idempotency_key("k" * 255) == "k" * 255
    for bad in ("", "k" * 256, "tab\there", "é"):
        with pytest.raises(InvalidRequest):
            parse_idempotency_key(bad)


def test_list_query_and_cursor() -> None:
    assert parse_list_query({}) == (None, 50, None)
    c = (202611, 123, "trg_01HF7YAT00BC3TNC0HDKZHHZNX")
    assert decode_cursor(encode_cursor(c)) == c
    status, limit, cursor = parse_list_query({"status": "pending", "limit": "5",
                                              "cursor": encode_cursor(c)})
    assert (status and status.value, limit, cursor) == ("PENDING", 5, c)
    for bad in ({"status": "DONE"}, {"limit": "0"}, {"limit": "x"}, {"cursor": "!!"},
                {"sort": "x"}):
        with pytest.raises(InvalidRequest):
            parse_list_query(bad)


@pytest.mark.parametrize(
    "table",
    [
        {},
        {"callers": {"a": {"token_sha256": "abc", "callback_prefixes": ["http://x/"]}}},
        {"callers": {"a": {"token_sha256": "a" * 64, "callback_prefixes": []}}},
        {"callers": {"a": {"token_sha256": "a" * 64, "callback_prefixes": ["ftp://x/"]}}},
        {"callers": {"a": {"token_sha256": "a" * 64, "callback_prefixes": ["http://x/"],
                           "max_concurrency": 0}}},
        {"callers": {"a": {"token_sha256": "a" * 64, "callback_prefixes": ["http://x/"]},
                     "b": {"token_sha256": "a" * 64, "callback_prefixes": ["http://x/"]}}},
    ],
)
def test_bad_callers_files_fail_naming_the_key(table: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        CallerRegistry.from_mapping(table)


def test_dev_callers_file_loads() -> None:
    from trigger_service.config.settings import ApiSettings

    reg_ = CallerRegistry.load(ApiSettings().callers_file)
    assert reg_.by_token("dev-token") is not None and reg_.by_token("nope") is None
