"""``DebounceHeads`` (``MemoryStore``, ``CassandraStore``) against one contract: a head is
started once (a second start answers the first), replaced only from the head that is
there (a replace from a stale one answers the current one), and concurrent starts and
replaces agree on one head."""

from __future__ import annotations

import asyncio

from tests.contract.support import Store, unique
from trigger_service.core.debounce import DebounceHead

T0 = 1_700_000_000_000
TTL_S = 3_600


async def test_a_head_is_started_once_and_replaced_only_from_itself(store: Store) -> None:
    caller, key = unique("deb-"), "digest"
    assert await store.debounce_head(caller, key) is None
    first = DebounceHead(caller, key, T0, max_wait_s=30)
    assert await store.start_head(first, TTL_S) == first
    assert await store.start_head(DebounceHead(caller, key, T0 + 1), TTL_S) == first
    assert await store.debounce_head(caller, key) == first
    assert await store.debounce_head(caller, "other") is None

    second = DebounceHead(caller, key, T0 + 5_000)
    assert await store.replace_head(first, second, TTL_S) == second
    assert await store.debounce_head(caller, key) == second
    # From a stale head: nothing changes, the current one is answered.
    stale = await store.replace_head(first, DebounceHead(caller, key, T0 + 9_000), TTL_S)
    assert stale == second == await store.debounce_head(caller, key)
    # Renewing a head in place (its TTL) keeps it.
    assert await store.replace_head(second, second, TTL_S) == second


async def test_a_replace_with_no_head_there_starts_one(store: Store) -> None:
    caller = unique("deb-")
    gone = DebounceHead(caller, "k", T0)
    new = DebounceHead(caller, "k", T0 + 1)
    assert await store.replace_head(gone, new, TTL_S) == new
    assert await store.debounce_head(caller, "k") == new


async def test_concurrent_starts_and_replaces_agree_on_one_head(store: Store) -> None:
    caller = unique("deb-")
    starts = await asyncio.gather(*(store.start_head(DebounceHead(caller, "k", T0 + n), TTL_S)
                                    for n in range(8)))
    assert len(set(starts)) == 1
    head = starts[0]
    nexts = await asyncio.gather(*(
        store.replace_head(head, DebounceHead(caller, "k", T0 + 100 + n), TTL_S)
        for n in range(8)))
    assert len(set(nexts)) == 1 and nexts[0] != head
    assert await store.debounce_head(caller, "k") == nexts[0]


async def test_a_head_keeps_its_bound_and_expiry_as_written_and_as_answered(
        store: Store) -> None:
    caller = unique("deb-")
    first = DebounceHead(caller, "k", T0, max_wait_s=30, expires_at_ms=T0 + TTL_S * 1000)
    assert await store.start_head(first, TTL_S) == first
    assert await store.debounce_head(caller, "k") == first
    renewed = DebounceHead(caller, "k", T0, 30, expires_at_ms=T0 + 2 * TTL_S * 1000)
    assert await store.replace_head(first, renewed, 2 * TTL_S) == renewed
    assert await store.debounce_head(caller, "k") == renewed
    # A replace that lost answers the head there whole (its bound too), not just its start.
    stale = DebounceHead(caller, "k", T0 - 1)
    assert await store.replace_head(stale, DebounceHead(caller, "k", T0 + 1), TTL_S) == renewed
    assert await store.start_head(DebounceHead(caller, "k", T0 + 2), TTL_S) == renewed
