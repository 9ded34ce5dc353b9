"""Flow control's boundaries (``core.ports`` holds the others; the same rules apply): the
limiter every dispatcher shares, and the board where they publish what the ops page shows.

=================  ==========================================  ===============================
port               used by                                     implementations
=================  ==========================================  ===============================
``FlowLimiter``    dispatcher (``dispatcher.flow_control``)    adapters.redis.flow_control,
                                                               adapters.memory.flow
``FlowBoard``      dispatcher (publishes), API (ops page)      the same two
=================  ==========================================  ===============================

Both raise ``CacheError`` when their store fails; the dispatcher then delivers without flow
control (fails open, ``flow_control_fail_open_total``): a receiver's comfort is never a reason
to hold every delivery while Redis is down.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Protocol

from trigger_service.core.flow import FlowScope


class Admission(IntEnum):
    """``FlowLimiter.admit``'s verdict."""

    ADMITTED = 1
    FULL = 2  # ``parallelism`` leases open: ask again when one may have been released
    TOO_SOON = 3  # the rate's window is full: ask again after the wait given


@dataclass(frozen=True, slots=True)
class FlowView:
    """One dispatcher's view of one key (of ``caller``'s: ``core.flow.FlowScope``), as
    published for the ops page."""

    key: str
    rate_per_second: float | None
    parallelism: int | None
    open_now: int  # this dispatcher's deliveries of the key admitted and not yet answered
    delay_p50_s: float  # start minus due time, over the recent starts (``recent``)
    delay_max_s: float
    recent: int  # starts the two delays are over
    source: str = ""
    caller: str = ""
    default: bool = False  # the caller's default for an origin, not a key it wrote

    @property
    def scope(self) -> FlowScope:
        """The key in its caller's namespace: what views are told apart by."""
        return FlowScope(self.caller, self.key, self.default)


class FlowLimiter(Protocol):
    """Rate slots and a parallelism semaphore per scope (a key in its caller's namespace:
    ``core.flow.FlowScope``; two callers' equal keys share nothing), shared by every
    dispatcher (``core.flow`` has the arithmetic). Every call is atomic across processes."""

    async def reserve(self, scope: FlowScope, member: str, at_ms: int, width_ms: float,
                      now_ms: int) -> int:
        """Reserve the earliest slot ``width_ms`` wide at or after ``max(at_ms, now_ms)``
        that overlaps no other of ``scope``'s (``core.flow.earliest_gap``); its start, in
        whole ms (rounded up). Never refuses. Idempotent: the same ``member`` gets the slot
        it got before while that is remembered (10 minutes after its start)."""
        ...

    async def admit(self, scope: FlowScope, holder: str, now_ms: int, lease_ms: int,
                    parallelism: int | None, window: tuple[int, int] | None
                    ) -> tuple[Admission, int]:
        """Start ``holder`` now if fewer than ``parallelism`` leases of ``scope`` are open and
        fewer than ``window[0]`` starts were admitted in the last ``window[1]`` ms (None:
        that bound is not checked): a lease until ``now_ms + lease_ms`` (or ``release``) and
        a start recorded. Otherwise the verdict and how many ms to wait at least. A holder
        that holds a lease is admitted again (idempotent)."""
        ...

    async def release(self, scope: FlowScope, holder: str) -> None:
        """End ``holder``'s lease (nothing if it has none, or it expired)."""
        ...


class FlowBoard(Protocol):
    """Where dispatchers publish their flow-control views and the API reads them. A view
    is shown for ``ttl_s`` unless published again (a dead dispatcher's go)."""

    async def publish_flow(self, source: str, views: Sequence[FlowView], now_ms: int,
                           ttl_s: int) -> None: ...

    async def read_flow(self, now_ms: int) -> list[FlowView]: ...  # live entries
