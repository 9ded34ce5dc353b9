"""Per-caller circuit breaker with an injected clock.

Written here rather than taken from pybreaker: pybreaker's asyncio path needs tornado, its
``calling()`` context manager records success before the block runs, and its timing reads
``datetime.now`` so tests could not drive it with a manual clock.

closed ──fail_max consecutive failures──> open ──reset_s elapsed──> half-open
half-open: one trial call at a time; success → closed, failure → open again.
"""

from __future__ import annotations

from enum import StrEnum

from trigger_service.core.ports import Clock


class BreakerState(StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


class CircuitBreaker:
    def __init__(self, clock: Clock, *, fail_max: int, reset_s: float) -> None:
        self._clock = clock
        self._fail_max = fail_max
        self._reset_ms = int(reset_s * 1000)
        self._failures = 0
        self._opened_at_ms: int | None = None
        self._trial_running = False

    @property
    def state(self) -> BreakerState:
        if self._opened_at_ms is None:
            return BreakerState.CLOSED
        if self._clock.now_ms() - self._opened_at_ms >= self._reset_ms:
            return BreakerState.HALF_OPEN
        return BreakerState.OPEN

    def try_acquire(self) -> int:
        """0 if a call may go ahead now; otherwise ms until the circuit may let one through.

        In half-open only one trial is let through; the caller must report its outcome
        with ``record_success`` or ``record_failure``.
        """
        state = self.state
        if state is BreakerState.CLOSED:
            return 0
        if state is BreakerState.HALF_OPEN and not self._trial_running:
            self._trial_running = True
            return 0
        assert self._opened_at_ms is not None
        return max(1, self._opened_at_ms + self._reset_ms - self._clock.now_ms())

    def release(self) -> None:
        """Give back a half-open trial slot without an outcome (the call was not made)."""
        self._trial_running = False

    def record_success(self) -> None:
        self._failures = 0
        self._opened_at_ms = None
        self._trial_running = False

    def record_failure(self) -> None:
        self._failures += 1
        if self._trial_running or self._failures >= self._fail_max:
            self._opened_at_ms = self._clock.now_ms()
        self._trial_running = False
