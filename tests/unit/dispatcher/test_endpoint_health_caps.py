"""Endpoint health is bounded per caller: a caller's records are at most ``max_per_caller``
(a new failing origin past that is not tracked, and costs no store write per failure), and a
record expires ``record_ttl_s`` after its last write (each write renews it)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from dispatcher.endpoint_health import EndpointWatch, Records
from tests.unit.dispatcher.fakes import CALLER, OTHER_CALLER, Env, failed
from trigger_service.adapters.memory.endpoint_health import MemoryEndpointHealth, MemoryOpsEvents
from trigger_service.core.endpoint_health import first_failure

pytestmark = pytest.mark.timeout(10)
CAP = 5
TTL_S = 3_600


def _watch(env: Env, store: MemoryEndpointHealth) -> EndpointWatch:
    settings = replace(env.settings.endpoint_health, max_per_caller=CAP, record_ttl_s=TTL_S,
                       write_every_s=10, refresh_s=2)
    return EndpointWatch(store, MemoryOpsEvents(), env.callers, settings, env.clock,
                         env.metrics)


async def test_a_caller_failing_on_many_origins_keeps_at_most_its_cap(env: Env) -> None:
    store = MemoryEndpointHealth(env.clock, ttl_s=TTL_S)
    w = _watch(env, store)
    for n in range(50):
        t = await env.add(0, callback_url=f"https://o{n}.orders.internal/cb")
        await w.observe(t, failed())
    assert len(await store.endpoint_health(CALLER)) == CAP
    writes = store.writes
    for n in range(50):  # the untracked origins fail again: no store call for them
        t = await env.add(0, callback_url=f"https://o{n + 50}.orders.internal/cb")
        await w.observe(t, failed())
    assert store.writes == writes
    other = await env.add(0, caller=OTHER_CALLER)  # another caller's cap is its own
    await w.observe(other, failed())
    assert len(await store.endpoint_health(OTHER_CALLER)) == 1


async def test_the_store_refuses_a_record_past_the_cap_another_process_made(env: Env) -> None:
    store = MemoryEndpointHealth(env.clock, ttl_s=TTL_S)
    now = env.clock.now_ms()
    for n in range(CAP):  # made by other dispatchers: this one has not read them yet
        assert await store.note_first_failure(
            first_failure(CALLER, f"https://o{n}.x:443", now, None), CAP) is not None
    w = _watch(env, store)
    t = await env.add(0, callback_url="https://new.orders.internal/cb")
    await w.observe(t, failed())
    assert len(await store.endpoint_health(CALLER)) == CAP
    assert not await w.disabled(CALLER, "https://new.orders.internal:443")


async def test_a_record_expires_its_ttl_after_its_last_write(env: Env) -> None:
    store = MemoryEndpointHealth(env.clock, ttl_s=TTL_S)
    w = _watch(env, store)
    t = await env.add(0)
    await w.observe(t, failed())
    env.clock.advance_ms(TTL_S * 1000 - 1_000)
    await w.observe(t, failed())  # a rewrite (past write_every_s): renewed
    env.clock.advance_ms(2_000)
    assert len(await store.endpoint_health(CALLER)) == 1
    env.clock.advance_ms(TTL_S * 1000)
    assert await store.endpoint_health(CALLER) == []


def test_the_records_known_count_per_caller() -> None:
    """What ``_full`` asks at each failure of a new origin: one caller's count, not a scan."""
    known = Records()
    for n in range(3):
        known.put(first_failure(CALLER, f"https://o{n}.x:443", 0, None))
    known.put(first_failure(OTHER_CALLER, "https://o0.x:443", 0, None))
    known.put(first_failure(CALLER, "https://o0.x:443", 5, None))  # the same one again
    assert (known.count(CALLER), known.count(OTHER_CALLER), known.count("nobody")) == (3, 1, 0)
    known.pop((CALLER, "https://o1.x:443"))
    known.pop((OTHER_CALLER, "https://o0.x:443"))
    known.pop((OTHER_CALLER, "https://gone.x:443"))
    assert (known.count(CALLER), known.count(OTHER_CALLER)) == (2, 0)
    assert (CALLER, "https://o0.x:443") in known and (CALLER, "https://o1.x:443") not in known
    assert known.get((CALLER, "https://o0.x:443")) == first_failure(
        CALLER, "https://o0.x:443", 5, None)
