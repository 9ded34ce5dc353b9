"""``rate_per_s``, ``burst`` and ``max_pending`` in the callers file."""

from __future__ import annotations

import pytest

from trigger_service.config.callers import Caller, CallerRegistry, hash_token
from trigger_service.core.errors import ConfigError


def caller(**fields: object) -> Caller:
    reg = CallerRegistry.from_mapping({"callers": {"orders": {
        "token_sha256": hash_token("t"), "callback_prefixes": ["http://127.0.0.1:9000/"],
        **fields}}})
    found = reg.by_name("orders")
    assert found is not None
    return found


def test_no_limit_unless_set() -> None:
    c = caller()
    assert (c.rate_per_s, c.burst, c.max_pending) == (None, None, None)


def test_limits_are_read_and_burst_defaults_to_the_rate_rounded_up() -> None:
    c = caller(rate_per_s=2.5, max_pending=10)
    assert (c.rate_per_s, c.burst, c.max_pending) == (2.5, 3, 10)
    c = caller(rate_per_s=0.2)
    assert c.burst == 1
    c = caller(rate_per_s=100, burst=500)
    assert (c.rate_per_s, c.burst) == (100.0, 500)


@pytest.mark.parametrize(("fields", "key"), [
    ({"rate_per_s": 0}, "rate_per_s"), ({"rate_per_s": -1}, "rate_per_s"),
    ({"rate_per_s": "10"}, "rate_per_s"), ({"rate_per_s": True}, "rate_per_s"),
    ({"rate_per_s": 1, "burst": 0}, "burst"), ({"rate_per_s": 1, "burst": 1.5}, "burst"),
    ({"burst": 5}, "burst"), ({"max_pending": 0}, "max_pending"),
    ({"max_pending": "many"}, "max_pending"),
])
def test_bad_limits_name_the_key(fields: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigError, match=rf"callers\.orders\.{key}"):
        caller(**fields)
