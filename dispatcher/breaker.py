"""Circuit breaker per callback origin (``scheme://host:port``), with an injected clock.

Ours rather than pybreaker 1.4.1's, for what ``tests/unit/dispatcher/test_pybreaker_compare.py``
shows when pybreaker guards an awaited call (``with breaker.calling(): await ...``): its
half-open state lets every concurrent coroutine through (here: every message of a recovering
origin at once, not one trial), and a cancelled call (``CancelledError``: a dispatcher
draining at shutdown) counts as a failure, and the one that trips the breaker is raised as
``CircuitBreakerError`` instead of the cancellation. Its time is ``datetime.now`` (tests could
not drive it with a manual clock) and its Redis storage is synchronous. The outcome that
counts is also not an exception here but ``DeliveryResult.origin_failed``.

closed ──fail_max consecutive failures──> open ──reset_s elapsed──> half-open
half-open: one trial call at a time; success → closed, failure → open again. A call that
does not finish (cancelled, or an error before its outcome) counts as neither (``TrialSlot``).
"""

from __future__ import annotations

from enum import StrEnum

from trigger_service.core.ports import Clock


class BreakerState(StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


# For the ``breaker_state`` gauge: higher is worse (multiprocess mode keeps the max).
STATE_CODES = {BreakerState.CLOSED: 0, BreakerState.HALF_OPEN: 1, BreakerState.OPEN: 2}


class CircuitBreaker:
    def __init__(self, clock: Clock, *, fail_max: int, reset_s: float) -> None:
        self._clock = clock
        self._fail_max = fail_max
        self._reset_ms = int(reset_s * 1000)
        self._failures = 0
        self._opened_at_ms: int | None = None
        self._closed_at_ms = clock.now_ms()
        self._trial_running = False
        self.used_at_ms = self._closed_at_ms  # the last try_acquire

    @property
    def state(self) -> BreakerState:
        if self._opened_at_ms is None:
            return BreakerState.CLOSED
        if self._clock.now_ms() - self._opened_at_ms >= self._reset_ms:
            return BreakerState.HALF_OPEN
        return BreakerState.OPEN

    @property
    def changed_at_ms(self) -> int:
        """When the circuit entered its current state."""
        if self._opened_at_ms is None:
            return self._closed_at_ms
        if self.state is BreakerState.HALF_OPEN:
            return self._opened_at_ms + self._reset_ms
        return self._opened_at_ms

    def try_acquire(self) -> int:
        """0 if a call may go ahead now; otherwise ms until the circuit may let one through.

        In half-open only one trial is let through; the caller must report its outcome
        with ``record_success`` or ``record_failure``, or give the slot back (``attempt``).
        """
        self.used_at_ms = self._clock.now_ms()
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

    def slot(self) -> TrialSlot:
        """The slot ``try_acquire`` just let through, as a context manager: it is given back
        on leaving the block (however it is left) unless an outcome was recorded on it."""
        return TrialSlot(self)

    def record_success(self) -> None:
        if self._opened_at_ms is not None:
            self._closed_at_ms = self._clock.now_ms()
        self._failures = 0
        self._opened_at_ms = None
        self._trial_running = False

    def record_failure(self) -> None:
        self._failures += 1
        if self._trial_running or self._failures >= self._fail_max:
            self._opened_at_ms = self._clock.now_ms()
        self._trial_running = False


class TrialSlot:
    """One call let through by ``CircuitBreaker.try_acquire``, held for a ``with`` block.

    Inside the block the call's outcome is recorded with ``succeeded`` or ``failed``; a block
    left without one (nothing was sent, the claim lost, a cancellation, an error) gives the
    half-open trial back and counts nothing. So the slot is released on every path once,
    by the block, not by each return.
    """

    __slots__ = ("_breaker", "_settled")

    def __init__(self, breaker: CircuitBreaker) -> None:
        self._breaker = breaker
        self._settled = False

    def __enter__(self) -> TrialSlot:
        return self

    def __exit__(self, *exc: object) -> None:
        if not self._settled:
            self._breaker.release()

    def succeeded(self) -> None:
        self._settled = True
        self._breaker.record_success()

    def failed(self) -> None:
        self._settled = True
        self._breaker.record_failure()

    def give_back(self) -> None:
        """Give the slot back now, with no outcome (what follows is not a call to the
        origin: the notification channels keep their own state)."""
        if not self._settled:
            self._settled = True
            self._breaker.release()
