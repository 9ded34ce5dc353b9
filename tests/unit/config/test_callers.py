from __future__ import annotations

import pytest

from trigger_service.config.callers import CallerRegistry, hash_token
from trigger_service.core.errors import ConfigError


def table(**fields: object) -> dict[str, object]:
    return {"callers": {"orders": {"callback_prefixes": ["http://127.0.0.1:9000/"], **fields}}}


def test_a_list_of_token_hashes_lets_old_and_new_token_work_during_a_rotation() -> None:
    reg = CallerRegistry.from_mapping(table(token_sha256=[hash_token("new"), hash_token("old")]))
    new, old = reg.by_token("new"), reg.by_token("old")
    assert new is not None and old is not None and new.name == old.name == "orders"
    assert reg.by_token("other") is None


def test_a_single_hash_still_works_and_is_case_insensitive() -> None:
    reg = CallerRegistry.from_mapping(table(token_sha256=hash_token("t").upper()))
    found = reg.by_token("t")
    assert found is not None and found.token_sha256s == (hash_token("t"),)


@pytest.mark.parametrize("bad", [[], ["abc"], [hash_token("a"), hash_token("a")], 42])
def test_bad_token_hashes_name_the_key(bad: object) -> None:
    with pytest.raises(ConfigError, match=r"callers\.orders\.token_sha256"):
        CallerRegistry.from_mapping(table(token_sha256=bad))


def test_a_hash_shared_between_callers_is_refused() -> None:
    data = {"callers": {
        "a": {"token_sha256": [hash_token("x"), hash_token("y")],
              "callback_prefixes": ["http://x/"]},
        "b": {"token_sha256": hash_token("y"), "callback_prefixes": ["http://x/"]},
    }}
    with pytest.raises(ConfigError, match="shared with another caller"):
        CallerRegistry.from_mapping(data)
