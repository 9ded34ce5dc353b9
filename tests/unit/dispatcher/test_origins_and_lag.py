"""Circuits per (caller, callback origin), the fire lag a delivery observes, and what
the ``OpsReporter`` publishes for the ops page."""

from __future__ import annotations

import asyncio
import contextlib

from tests.unit.dispatcher.fakes import (
    CALLER,
    ORIGIN,
    START_MS,
    Env,
    breaker_of,
    failed,
    settle,
)
from trigger_service.adapters.memory.board import MemoryOpsBoard
from trigger_service.core.errors import CacheError
from trigger_service.core.model import Status
from trigger_service.core.time.lag import window_slots
from trigger_service.core.urls import callback_origin


def test_an_origin_is_scheme_host_and_port() -> None:
    assert callback_origin("https://Orders.internal/cb?x=1") == "https://orders.internal:443"
    assert callback_origin("http://127.0.0.1:9000/a/b") == "http://127.0.0.1:9000"
    assert callback_origin("http://[::1]:81/") == "http://[::1]:81"


async def test_a_failing_origin_does_not_defer_another_origin_of_the_same_caller(
    env: Env,
) -> None:
    # Retries due past the hold, back on the queue: each handle() ends.
    env.with_dispatch(breaker_fail_max=2, breaker_reset_s=60, retry_backoff_s=(60,))
    env.channel.results = [failed(), failed()]
    d = env.dispatcher()
    for _ in range(2):
        await d.handle(await env.receive_one(await env.add(0)))
    deferred = await env.add(0)
    await d.handle(await env.receive_one(deferred))
    assert env.row(deferred) == deferred and env.count("circuit_open_deferrals_total") == 1
    other = await env.add(0, callback_url="https://other.internal:8443/cb")
    await d.handle(await env.receive_one(other))
    assert env.row(other).status is Status.FIRED and other.caller == CALLER
    assert [key for key, _ in d.delivery.breakers.items()] == [
        (CALLER, ORIGIN), (CALLER, "https://other.internal:8443")]


async def test_the_first_attempt_observes_its_lag_behind_the_fire_time(env: Env) -> None:
    env.with_dispatch(max_attempts=3, retry_backoff_s=(1,))
    env.channel.results = [failed()]
    d = env.dispatcher()
    t = await env.add(-250)  # due 250 ms ago
    task = asyncio.create_task(d.handle(await env.receive_one(t)))
    await settle()
    assert env.metrics.observed("fire_lag_seconds") == [0.25]
    assert env.count("delivery_attempts_total") == 1
    env.clock.advance_ms(5_000)
    await task  # the retry, held for its time: an attempt, no lag
    assert env.row(t).status is Status.FIRED
    assert env.metrics.observed("fire_lag_seconds") == [0.25]
    assert env.count("delivery_attempts_total") == 2
    assert env.count('deliveries_total{outcome="fired"}') == 1  # durable: no caller label


async def test_a_cancelled_delivery_counts_nothing_against_its_origin(env: Env) -> None:
    env.with_dispatch(breaker_fail_max=1)
    env.channel.gate = asyncio.Event()
    d = env.dispatcher()
    task = asyncio.create_task(d.handle(await env.receive_one(await env.add(0))))
    await asyncio.sleep(0.01)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert breaker_of(d.delivery).try_acquire() == 0


async def test_the_reporter_publishes_breakers_gauges_and_lag(env: Env) -> None:
    env.with_dispatch(breaker_fail_max=1, breaker_reset_s=30, retry_backoff_s=(60,))
    board = MemoryOpsBoard()
    env.channel.results = [failed()]
    d = env.dispatcher_with(board=board)
    assert d.reporter is not None
    await d.handle(await env.receive_one(await env.add(-40)))
    await d.reporter.publish()
    [view] = await board.read_breakers(env.clock.now_ms())
    assert (view.origin, view.state, view.changed_at_ms) == (ORIGIN, "open", START_MS)
    assert view.caller == CALLER
    assert env.metrics.gauges[f'breaker_state{{caller="{CALLER}",origin="{ORIGIN}"}}'] == 2
    assert sum(await board.read_lag(window_slots(env.clock.now_ms()))) == 1
    assert d.delivery.lag.take() == {}  # published once
    env.clock.advance_ms(30_000)
    await d.reporter.publish()
    [view] = await board.read_breakers(env.clock.now_ms())
    assert (view.state, view.changed_at_ms) == ("half_open", START_MS + 30_000)
    assert await board.read_breakers(env.clock.now_ms() + 31_000) == []  # expired


async def test_a_failed_publication_keeps_the_lag_for_the_next_round(env: Env) -> None:
    class DownBoard(MemoryOpsBoard):
        async def add_lag(self, slots: dict[int, list[int]]) -> None:
            raise CacheError("redis away")

    d = env.dispatcher_with(board=DownBoard())
    assert d.reporter is not None
    await d.handle(await env.receive_one(await env.add(0)))
    with contextlib.suppress(CacheError):
        await d.reporter.publish()
    assert sum(sum(c) for c in d.delivery.lag.take().values()) == 1
