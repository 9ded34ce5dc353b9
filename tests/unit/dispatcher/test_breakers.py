"""Circuits per (caller, callback origin): one caller's failures never open another's circuit
for the same origin; a cap per caller drops the least recently used closed circuit (never an
open one), its gauge and what the ops board shows for it."""

from __future__ import annotations

from dispatcher.breaker import BreakerState
from dispatcher.breakers import BreakerKey, Breakers
from tests.unit.dispatcher.fakes import (
    CALLER,
    ORIGIN,
    OTHER_CALLER,
    START_MS,
    Env,
    breaker_of,
    failed,
)
from trigger_service.adapters.memory.board import MemoryOpsBoard
from trigger_service.config.callers import CallerRegistry
from trigger_service.core.model import Status
from trigger_service.core.time.clock import ManualClock
from trigger_service.platform.metrics import InMemoryMetrics


def breakers(cap: int, clock: ManualClock | None = None,
             metrics: InMemoryMetrics | None = None) -> Breakers:
    return Breakers(clock or ManualClock(START_MS), metrics or InMemoryMetrics(), fail_max=1,
                    reset_s=30, max_per_caller=cap)


def shared_origin_callers() -> CallerRegistry:
    """Both callers may call back ORIGIN (e.g. one receiver serving two tenants)."""
    prefixes = ["https://orders.internal/"]
    return CallerRegistry.from_mapping({"callers": {
        CALLER: {"token_sha256": "a" * 64, "callback_prefixes": prefixes},
        OTHER_CALLER: {"token_sha256": "b" * 64, "callback_prefixes": prefixes}}})


async def test_one_callers_failures_leave_anothers_circuit_to_the_same_origin_closed() -> None:
    env = Env(callers=shared_origin_callers())
    # Retries due past the hold, back on the queue: each handle() ends.
    env.with_dispatch(breaker_fail_max=2, breaker_reset_s=60, retry_backoff_s=(60,))
    env.channel.results = [failed(), failed()]
    d = env.dispatcher()
    for _ in range(2):
        await d.handle(await env.receive_one(await env.add(0)))
    assert breaker_of(d.delivery).state is BreakerState.OPEN
    deferred = await env.add(0)
    await d.handle(await env.receive_one(deferred))
    assert env.row(deferred).status is Status.PENDING  # orders' circuit is open
    theirs = await env.add(0, caller=OTHER_CALLER, callback_url="https://orders.internal/b")
    await d.handle(await env.receive_one(theirs))
    assert env.row(theirs).status is Status.FIRED  # billing's is not
    assert breaker_of(d.delivery, OTHER_CALLER).state is BreakerState.CLOSED
    assert env.count("circuit_open_deferrals_total") == 1


def test_over_the_cap_the_least_recently_used_closed_circuit_goes() -> None:
    metrics = InMemoryMetrics()
    b = breakers(2, metrics=metrics)
    for origin in ("http://a:80", "http://b:80"):
        circuit = b.get(CALLER, origin)
        assert circuit is not None
        metrics.set("breaker_state", 0, caller=CALLER, origin=origin)
    b.get(CALLER, "http://a:80")  # a is now the most recently used
    assert b.get(OTHER_CALLER, "http://x:80") is not None  # another caller's own cap
    assert b.get(CALLER, "http://c:80") is not None
    assert [key for key, _ in b.items()] == [
        (CALLER, "http://a:80"), (CALLER, "http://c:80"), (OTHER_CALLER, "http://x:80")]
    assert b.take_dropped() == [BreakerKey(CALLER, "http://b:80")]
    assert b.take_dropped() == []
    assert f'breaker_state{{caller="{CALLER}",origin="http://b:80"}}' not in metrics.gauges
    assert f'breaker_state{{caller="{CALLER}",origin="http://a:80"}}' in metrics.gauges
    assert "trigger_breaker_state{" in metrics.exposition().decode()
    assert 'origin="http://b:80"' not in metrics.exposition().decode()
    assert metrics.snapshot()["breakers_evicted_total"] == 1


def test_an_open_circuit_is_never_dropped_for_a_new_origin() -> None:
    clock = ManualClock(START_MS)
    b = breakers(2, clock)
    for origin in ("http://a:80", "http://b:80"):
        circuit = b.get(CALLER, origin)
        assert circuit is not None
        circuit.record_failure()  # open (fail_max=1)
    assert b.get(CALLER, "http://c:80") is None  # no room: treated as an open circuit
    assert len(b) == 2 and b.take_dropped() == []
    clock.advance_ms(30_000)  # half-open: still in trouble, still kept
    assert b.get(CALLER, "http://c:80") is None
    circuit = dict(b.items())[BreakerKey(CALLER, "http://a:80")]  # (get would touch its place)
    circuit.record_success()  # closed again: now it may go
    assert b.get(CALLER, "http://c:80") is not None
    assert b.take_dropped() == [BreakerKey(CALLER, "http://a:80")]


async def test_a_caller_at_its_cap_of_open_circuits_defers_a_new_origin(env: Env) -> None:
    env.with_dispatch(breaker_fail_max=1, breaker_reset_s=60, breaker_max_origins=1,
                      retry_backoff_s=(60,))
    env.channel.results = [failed()]
    d = env.dispatcher()
    await d.handle(await env.receive_one(await env.add(0)))  # ORIGIN's circuit opens
    other = await env.add(0, callback_url="https://other.internal:8443/cb")
    await d.handle(await env.receive_one(other))
    assert env.row(other).status is Status.PENDING and env.channel.ids()[1:] == []
    assert env.queued(other) == [START_MS + 60_000]  # back when a circuit may close
    assert env.count("circuit_open_deferrals_total") == 1


async def test_dropped_circuits_leave_the_board_and_idle_ones_are_forgotten(env: Env) -> None:
    env.with_dispatch(breaker_max_origins=1)
    board = MemoryOpsBoard()
    d = env.dispatcher_with(board=board)
    assert d.reporter is not None
    await d.handle(await env.receive_one(await env.add(0)))
    await d.reporter.publish()
    assert [(v.caller, v.origin) for v in await board.read_breakers(START_MS)] == [
        (CALLER, ORIGIN)]
    other = await env.add(0, callback_url="https://other.internal:8443/cb")
    await d.handle(await env.receive_one(other))  # ORIGIN's closed circuit makes room
    await d.reporter.publish()
    now_ms = env.clock.now_ms()
    assert [(v.caller, v.origin) for v in await board.read_breakers(now_ms)] == [
        (CALLER, "https://other.internal:8443")]
    assert f'breaker_state{{caller="{CALLER}",origin="{ORIGIN}"}}' not in env.metrics.gauges
    env.clock.advance_ms(600_001)  # unused and closed: forgotten
    await d.reporter.publish()
    assert len(d.delivery.breakers) == 0
    assert await board.read_breakers(env.clock.now_ms()) == []
    assert env.metrics.gauges == {}
