from __future__ import annotations

from dispatcher.breaker import BreakerState, CircuitBreaker
from trigger_service.core.time.clock import ManualClock


def test_breaker_opens_after_consecutive_failures_and_half_opens() -> None:
    clock = ManualClock()
    b = CircuitBreaker(clock, fail_max=3, reset_s=10)
    for _ in range(2):
        assert b.try_acquire() == 0
        b.record_failure()
    b.record_success()  # a success resets the run of failures
    for _ in range(3):
        assert b.try_acquire() == 0
        b.record_failure()
    assert b.state is BreakerState.OPEN
    assert b.try_acquire() == 10_000
    clock.advance_ms(4_000)
    assert b.try_acquire() == 6_000
    clock.advance_ms(6_000)
    assert BreakerState(b.state) is BreakerState.HALF_OPEN
    assert b.try_acquire() == 0  # one trial
    assert b.try_acquire() > 0  # a second caller waits for the trial
    b.record_failure()  # the trial failed: open again for a full period
    assert b.state is BreakerState.OPEN and b.try_acquire() == 10_000
    clock.advance_ms(10_000)
    assert b.try_acquire() == 0
    b.record_success()
    state: BreakerState = b.state  # re-read: mypy would keep the OPEN narrowed above
    assert state is BreakerState.CLOSED and b.try_acquire() == 0


def test_breaker_release_gives_back_the_trial() -> None:
    clock = ManualClock()
    b = CircuitBreaker(clock, fail_max=1, reset_s=1)
    b.record_failure()
    clock.advance_ms(1000)
    assert b.try_acquire() == 0
    b.release()
    assert b.try_acquire() == 0
