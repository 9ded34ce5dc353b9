from __future__ import annotations

import re

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
