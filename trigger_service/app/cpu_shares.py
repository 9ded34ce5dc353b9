"""Each caller's share of an API process's CPU for the work whose cost depends on what the
caller sent: reading time fields (``when`` phrases, RRULEs, crons) and planning or previewing
their occurrences.

Every such input is bounded on its own (``core/time/rule_walk.py``: tens of milliseconds at
most), but a batch holds 1,000 of them and a caller may send many batches at once: bounded
items still add up to seconds of one event loop. So each caller has a bucket of CPU
milliseconds per process, refilled at ``rate_ms_per_s`` up to ``burst_ms``. The work is
measured as it runs (the thread's CPU time around synchronous code only, so no other task's
work is charged, less the garbage collections that ran meanwhile: ``app/work_time.py``) and
charged after; a caller whose bucket is empty is refused before any more of its work starts
(``CpuShareExceeded``, 429 with Retry-After), while other callers' buckets are untouched. A
healthy registration costs well under a millisecond: only a caller that spends many tenths of
a core on parsing meets the bound.

Where the work runs (:func:`costly`): a cheap caller's on the event loop, where it costs
less than a trip elsewhere would. A costly caller's (a section of ``COSTLY_MS`` lately) in
a worker process at a lower OS priority (``app/costly_pool.py``), one section at a time:
in a thread it would still share the API process's GIL with the loop, and at the API's
priority it would take CPU from the service's own work (the API, Cassandra) on the same
cores; there it gets only what they leave idle. The worker measures each section whole
and the caller is charged here, as :func:`metered` charges in place.

The account in force is a context variable the HTTP layer sets per request
(:func:`charging`); outside a request (the dispatcher, the sweeper, tests) :func:`metered`
measures nothing and refuses nothing, and :func:`costly` runs its work in place; so does a
worker, which gets no account (a context variable stays in its process).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import ParamSpec, TypeVar, cast

from trigger_service.app import costly_pool
from trigger_service.app.work_time import work_time_s
from trigger_service.core.errors import RateLimited

T = TypeVar("T")
P = ParamSpec("P")
# Callers are named in the callers file; the bound keeps a process's map small all the same.
MAX_ACCOUNTS = 10_000
# A caller whose work once cost this much (a metered section in place, a section whole in
# the worker) takes turns (:func:`costly`) for the next ``COSTLY_FOR_S``; a healthy
# registration's costs a tenth of a millisecond. Sticky, so a caller mixing cheap and
# costly inputs cannot bring each costly one back onto the loop behind a cheap one.
COSTLY_MS = 2.0
COSTLY_FOR_S = 10.0


class CpuShareExceeded(RateLimited):
    """The caller's CPU share of this process is spent for now."""


@dataclass(slots=True)
class _Bucket:
    balance_ms: float
    at_s: float
    costly_until_s: float = -math.inf
    turns: asyncio.Lock | None = None


class CpuShares:
    """Per-caller buckets of CPU milliseconds (the module docstring). ``monotonic_s`` is
    the clock the buckets refill by (injected for tests)."""

    def __init__(self, rate_ms_per_s: float, burst_ms: float,
                 monotonic_s: Callable[[], float] = time.monotonic) -> None:
        self.rate_ms_per_s = rate_ms_per_s
        self.burst_ms = burst_ms
        self._now = monotonic_s
        self._buckets: OrderedDict[str, _Bucket] = OrderedDict()

    def balance_ms(self, caller: str) -> float:
        """What ``caller`` may still spend now (negative: in debt)."""
        return self._bucket(caller).balance_ms

    def admit(self, caller: str) -> None:
        """Raise ``CpuShareExceeded`` when ``caller``'s bucket is empty, with the seconds
        until it holds a millisecond again."""
        balance = self._bucket(caller).balance_ms
        if balance <= 0:
            wait_s = max(1, math.ceil((1 - balance) / self.rate_ms_per_s))
            raise CpuShareExceeded(
                f"this caller's requests used their share of the API's CPU (about "
                f"{self.rate_ms_per_s:g} CPU-ms per second, TRIGGER_LIMITS_CALLER_CPU_MS_PER_S):"
                " costly when/rrule/cron values are parsed at that pace", wait_s)

    def spend(self, caller: str, ms: float) -> None:
        bucket = self._bucket(caller)
        bucket.balance_ms -= ms
        if ms >= COSTLY_MS:
            bucket.costly_until_s = bucket.at_s + COSTLY_FOR_S

    def turns_of(self, caller: str) -> asyncio.Lock | None:
        """The lock ``caller``'s costly work takes turns by; None while its work is cheap
        (no section of it cost ``COSTLY_MS`` in the last ``COSTLY_FOR_S``)."""
        bucket = self._bucket(caller)
        if (bucket.at_s >= bucket.costly_until_s
                and (bucket.turns is None or not bucket.turns.locked())):
            return None
        if bucket.turns is None:
            bucket.turns = asyncio.Lock()
        return bucket.turns

    def _bucket(self, caller: str) -> _Bucket:
        now = self._now()
        bucket = self._buckets.get(caller)
        if bucket is None:
            bucket = self._buckets[caller] = _Bucket(self.burst_ms, now)
            while len(self._buckets) > MAX_ACCOUNTS:
                self._buckets.popitem(last=False)
        else:
            self._buckets.move_to_end(caller)
            bucket.balance_ms = min(self.burst_ms,
                                    bucket.balance_ms + (now - bucket.at_s) * self.rate_ms_per_s)
            bucket.at_s = now
        return bucket


_ACCOUNT: ContextVar[tuple[CpuShares, str] | None] = ContextVar("cpu_account", default=None)
_INSIDE: ContextVar[bool] = ContextVar("cpu_metered", default=False)  # charged once, outermost


@contextmanager
def charging(shares: CpuShares, caller: str) -> Iterator[None]:
    """Within it (and in tasks started within it), :func:`metered` work is ``caller``'s."""
    token = _ACCOUNT.set((shares, caller))
    try:
        yield
    finally:
        _ACCOUNT.reset(token)


async def costly(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """``fn(*args, **kwargs)`` for the request's caller: synchronous parsing or planning of
    time fields, :func:`metered` inside. A caller whose such work is cheap runs it here and
    now, the common case (``fn`` meters itself). One whose work cost ``COSTLY_MS`` or more
    in the last ``COSTLY_FOR_S`` is admitted here (``CpuShareExceeded``), then runs one
    section at a time in the niced worker process (``app/costly_pool.py``; ``fn`` a
    module-level function, the arguments and what it returns or raises picklable), is
    charged the CPU the worker measured, and lets the loop go round once: another
    caller's request waits neither behind its sections nor for the GIL while they run.
    Outside a request (no account) ``fn`` runs here. Raises what ``fn`` raises."""
    account = _ACCOUNT.get()
    lock = None if account is None else account[0].turns_of(account[1])
    if account is None or lock is None:
        return fn(*args, **kwargs)
    shares, caller = account
    async with lock:
        try:
            shares.admit(caller)
            # The worker measured the whole section: metered() has no account there (a
            # context variable stays in this process), so nothing is charged twice.
            ok, value, cpu_ms = await costly_pool.run(fn, args, kwargs)
            shares.spend(caller, cpu_ms)
            if not ok:
                raise value
            return cast(T, value)
        finally:  # a refusal too: the next section is in the next pass
            await asyncio.sleep(0)


@contextmanager
def metered() -> Iterator[None]:
    """Around synchronous work only (no ``await`` inside: the thread's CPU time is the
    measure): refuse it if the current caller's share is spent, else run it and charge its
    CPU, a refusal raised inside included."""
    account = _ACCOUNT.get()
    if account is None or _INSIDE.get():
        yield
        return
    shares, caller = account
    shares.admit(caller)
    inside = _INSIDE.set(True)
    started = work_time_s()
    try:
        yield
    finally:
        shares.spend(caller, (work_time_s() - started) * 1000)
        _INSIDE.reset(inside)
