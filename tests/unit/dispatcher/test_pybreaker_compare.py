"""Why ``dispatcher/breaker.py`` and not pybreaker (docs/delivery.md "Circuit breaking"): pybreaker
1.4.1 guarding an awaited call the way it documents (``with breaker.calling(): await ...``),
next to ours guarding the same call as ``Delivery`` does. Each test asserts what pybreaker
really does, so it fails (and the decision is looked at again) when pybreaker changes."""

from __future__ import annotations

import asyncio
import contextlib

import pybreaker
import pytest

from dispatcher.breaker import BreakerState, CircuitBreaker
from trigger_service.core.time.clock import ManualClock

CONCURRENT = 5


async def test_half_open_admits_every_coroutine_in_pybreaker_and_one_trial_in_ours() -> None:
    pb = pybreaker.CircuitBreaker(fail_max=1, reset_timeout=60)
    pb.half_open()  # as after reset_timeout (its clock cannot be driven: datetime.now)
    gate = asyncio.Event()
    inside: list[int] = []

    async def guarded(i: int) -> None:
        with pb.calling():
            inside.append(i)
            await gate.wait()

    tasks = [asyncio.create_task(guarded(i)) for i in range(CONCURRENT)]
    await asyncio.sleep(0)
    assert pb.current_state == "half-open"
    assert len(inside) == CONCURRENT  # every message of a recovering origin at once
    gate.set()
    await asyncio.gather(*tasks)
    assert pb.current_state == "closed"

    clock = ManualClock()
    ours = CircuitBreaker(clock, fail_max=1, reset_s=60)
    ours.record_failure()
    clock.advance_ms(60_000)
    assert ours.state is BreakerState.HALF_OPEN
    admitted = [ours.try_acquire() == 0 for _ in range(CONCURRENT)]
    assert admitted == [True] + [False] * (CONCURRENT - 1)  # one trial, the rest defer


async def test_a_cancelled_call_is_a_failure_in_pybreaker_and_nothing_in_ours() -> None:
    pb = pybreaker.CircuitBreaker(fail_max=2, reset_timeout=60)

    async def guarded() -> None:
        with pb.calling():
            await asyncio.sleep(3600)

    for expected in (asyncio.CancelledError, pybreaker.CircuitBreakerError):
        task = asyncio.create_task(guarded())
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(expected):
            await task
    # Two shutdowns' worth of cancellations opened it, and the second one came back as
    # CircuitBreakerError instead of the cancellation.
    assert pb.fail_counter == 2 and pb.current_state == "open"

    clock = ManualClock()
    ours = CircuitBreaker(clock, fail_max=1, reset_s=60)

    async def ours_guarded() -> None:
        assert ours.try_acquire() == 0
        with ours.slot() as slot:
            await asyncio.sleep(3600)
            slot.succeeded()

    task = asyncio.create_task(ours_guarded())
    await asyncio.sleep(0)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert task.cancelled() and ours.state is BreakerState.CLOSED


async def test_a_cancelled_half_open_trial_gives_its_slot_back_in_ours() -> None:
    clock = ManualClock()
    ours = CircuitBreaker(clock, fail_max=1, reset_s=10)
    ours.record_failure()
    clock.advance_ms(10_000)
    assert ours.try_acquire() == 0

    async def trial() -> None:
        with ours.slot():
            await asyncio.sleep(3600)

    task = asyncio.create_task(trial())
    await asyncio.sleep(0)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert ours.state is BreakerState.HALF_OPEN and ours.try_acquire() == 0  # a new trial
