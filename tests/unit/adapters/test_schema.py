from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from trigger_service.adapters import schema


def hash_slot_part(key: str) -> str:
    """What Redis Cluster hashes: the first non-empty {...} of the key, else the whole key."""
    m = re.search(r"\{([^}]+)\}", key)
    return m.group(1) if m else key


def test_every_key_of_a_sweeper_group_shares_one_cluster_slot() -> None:
    keys = [schema.lease_key("main", s) for s in range(64)]
    keys += [schema.fence_key("main", s) for s in range(64)]
    keys.append(schema.sweeper_members_key("main"))
    assert {hash_slot_part(k) for k in keys} == {"main"}
    assert len(set(keys)) == len(keys)
    assert hash_slot_part(schema.lease_key("other", 0)) == "other"


_CALLERS = st.from_regex(r"[A-Za-z0-9_.-]{1,64}", fullmatch=True)
_KEYS = st.from_regex(r"[!-~]{1,200}", fullmatch=True)


@given(a=st.tuples(_CALLERS, _KEYS, st.booleans()), b=st.tuples(_CALLERS, _KEYS, st.booleans()))
def test_a_flow_key_is_its_callers_and_two_scopes_never_share_one(
        a: tuple[str, str, bool], b: tuple[str, str, bool]) -> None:
    """(caller, key, default) → Redis name is one-to-one: no key a caller writes names
    another caller's (nor its own default)."""
    assert (schema.flow_scope_name(*a) == schema.flow_scope_name(*b)) == (a == b)


def test_a_written_key_that_spells_a_default_or_another_caller_is_apart() -> None:
    names = {schema.flow_key(c, k, d, "leases") for c, k, d in [
        ("orders", "orders|https://hooks.orders.example:443", True),
        ("orders", "orders|https://hooks.orders.example:443", False),
        ("b", "orders|https://hooks.orders.example:443", False),
        ("a.1", "k", False), ("a", "1.k.k", False), ("a.1.k", "k", False)]}
    assert len(names) == 6
    for name in names:  # every part of one key's state in one cluster slot
        tag = hash_slot_part(name)
        assert {hash_slot_part(name.replace(":leases:", f":{p}:")) for p in (
            "runs", "ends", "reserved", "starts")} == {tag}
