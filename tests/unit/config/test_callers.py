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


def test_ops_users_have_roles_and_unique_tokens() -> None:
    from trigger_service.config.callers import Role
    base = {"callers": {"a": {"token_sha256": hash_token("a"),
                              "callback_prefixes": ["http://127.0.0.1:9000/"]}}}
    reg = CallerRegistry.from_mapping(base | {"ops": {
        "op": {"token_sha256": hash_token("o"), "role": "operator"},
        "v": {"token_sha256": hash_token("v"), "role": "viewer"}}})
    op, viewer, caller = reg.principal("o"), reg.principal("v"), reg.principal("a")
    assert op is not None and op.role is Role.OPERATOR and op.is_ops and op.caller is None
    assert viewer is not None and viewer.role is Role.VIEWER
    assert caller is not None and caller.caller is not None and not caller.is_ops
    assert reg.principal("nope") is None and reg.by_token("o") is None
    with pytest.raises(ConfigError, match="role"):
        CallerRegistry.from_mapping(base | {"ops": {"x": {"token_sha256": hash_token("x"),
                                                          "role": "admin"}}})
    with pytest.raises(ConfigError, match="shared"):
        CallerRegistry.from_mapping(base | {"ops": {"x": {"token_sha256": hash_token("a"),
                                                          "role": "viewer"}}})


def test_a_callers_weight_defaults_to_one_and_is_read() -> None:
    reg = CallerRegistry.from_mapping(table(token_sha256=hash_token("t")))
    heavy = CallerRegistry.from_mapping(table(token_sha256=hash_token("t"), weight=3))
    assert [r.by_name("orders").weight for r in (reg, heavy)] == [1, 3]  # type: ignore[union-attr]


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2", True])
def test_a_bad_weight_names_the_key(bad: object) -> None:
    with pytest.raises(ConfigError, match=r"callers\.orders\.weight"):
        CallerRegistry.from_mapping(table(token_sha256=hash_token("t"), weight=bad))
