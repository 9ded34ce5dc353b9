"""``EndpointHealthStore`` (``MemoryEndpointHealth``, ``CassandraEndpointHealth``) against one
contract: the first failure is kept (a second first failure gets it back), rewrites and the
disable apply only to the same record, the disable applies once, a success deletes a failing
record but not a disabled one, an enable deletes either."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.contract.support import unique
from trigger_service.adapters.cassandra.endpoint_health import CassandraEndpointHealth
from trigger_service.adapters.cassandra.store import CassandraStore
from trigger_service.adapters.memory.endpoint_health import MemoryEndpointHealth
from trigger_service.core.endpoint_health import EndpointState, failed_again, first_failure
from trigger_service.core.ports.endpoint_health import EndpointHealthStore

T0 = 1_700_000_000_000
ORIGIN = "https://hooks.example.com:443"


@pytest.fixture(params=[pytest.param("memory"),
                        pytest.param("cassandra", marks=pytest.mark.integration)])
def health(request: pytest.FixtureRequest) -> EndpointHealthStore:
    if request.param == "memory":
        return MemoryEndpointHealth()
    real: CassandraStore = request.getfixturevalue("cassandra_store")
    return CassandraEndpointHealth.of(real)


async def test_the_first_failure_is_kept_and_given_back(health: EndpointHealthStore) -> None:
    caller = unique("eh-")
    h = first_failure(caller, ORIGIN, T0, "HTTP 503")
    assert await health.note_first_failure(h) == h
    later = first_failure(caller, ORIGIN, T0 + 50, "timeout")
    assert await health.note_first_failure(later) == h  # another process's transition
    assert await health.endpoint_health(caller) == [h]
    assert h in await health.endpoint_health()  # every caller's


async def test_rewrites_apply_only_to_the_same_record(health: EndpointHealthStore) -> None:
    caller = unique("eh-")
    h = await health.note_first_failure(first_failure(caller, ORIGIN, T0, "HTTP 503"))
    more = failed_again(h, T0 + 9, "HTTP 502", 40)
    assert await health.note_failures(more)
    assert await health.endpoint_health(caller) == [more]
    assert not await health.note_failures(replace(more, first_failure_at_ms=T0 + 1))
    assert await health.clear_failing(caller, ORIGIN)
    assert not await health.note_failures(more)  # reset meanwhile: not recreated
    assert await health.endpoint_health(caller) == []


async def test_the_disable_applies_once_and_survives_a_success(
        health: EndpointHealthStore) -> None:
    caller = unique("eh-")
    h = await health.note_first_failure(first_failure(caller, ORIGIN, T0, "HTTP 503"))
    assert not await health.mark_disabled(replace(h, first_failure_at_ms=T0 - 1), T0 + 5)
    assert await health.mark_disabled(h, T0 + 10)
    assert not await health.mark_disabled(h, T0 + 11)
    await health.mark_notified(h, T0 + 12)
    [got] = await health.endpoint_health(caller)
    assert (got.state, got.disabled_at_ms, got.notified_at_ms) == (
        EndpointState.DISABLED, T0 + 10, T0 + 12)
    assert not await health.clear_failing(caller, ORIGIN)  # kept: disabled
    assert await health.clear(caller, ORIGIN) == got
    assert await health.clear(caller, ORIGIN) is None
    assert await health.endpoint_health(caller) == []
    assert await health.clear_failing(caller, ORIGIN)  # nothing there: fine


async def test_records_are_per_caller_and_origin(health: EndpointHealthStore) -> None:
    a, b = unique("eh-a"), unique("eh-b")
    for caller, origin in ((a, ORIGIN), (a, "http://127.0.0.1:9000"), (b, ORIGIN)):
        await health.note_first_failure(first_failure(caller, origin, T0, None))
    assert [h.origin for h in await health.endpoint_health(a)] == sorted(
        [ORIGIN, "http://127.0.0.1:9000"])
    assert [h.caller for h in await health.endpoint_health(b)] == [b]
