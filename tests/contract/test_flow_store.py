"""A trigger's ``flowControl`` in the store (migration 020): it round-trips on both
stores, a bound left out stays out, and an edit can change or remove it."""

from __future__ import annotations

import random
from dataclasses import replace

from tests.contract.support import INDEX_TTL_S, Store, make_trigger, unique, utc_ms
from trigger_service.core.flow import FlowControl


async def test_flow_control_round_trips_and_can_be_changed_and_removed(store: Store) -> None:
    t = replace(make_trigger(unique("caller-"), utc_ms(2031, 5, 6, 7),
                             shard=random.randrange(1_000, 2**31 - 1)),
                flow_control=FlowControl("partner-a", 0.5, None))
    await store.create(t, INDEX_TTL_S)
    assert await store.get(t.trigger_id) == t
    changed = replace(t, flow_control=FlowControl("partner-b", None, 3), revision=1)
    assert await store.compare_and_set(t, changed)
    assert await store.get(t.trigger_id) == changed
    plain = replace(changed, flow_control=None, revision=2)
    assert await store.compare_and_set(changed, plain)
    assert await store.get(t.trigger_id) == plain  # the cell is gone
