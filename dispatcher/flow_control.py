"""Flow control at delivery: the deliveries that share a key are started at most
``ratePerSecond`` per second, at most ``parallelism`` open at once, over every dispatcher
(``core.flow``; the limiter is shared through Redis).

Where it acts, and why there:

1. ``reserve`` when the message is in hand near its due time, before the claim: the rate
   slot (a herd is laid end to end from its due time, never refused). A slot far ahead
   (beyond what the dispatcher holds in memory) sends the message back to SQS until shortly
   before it (``Dispatcher.handle``); it comes back to the same slot (a reservation is
   idempotent per occurrence and attempt). The claim is then taken ahead of the slot, not of
   the due time, and its ``claimed_at_ms`` is the slot: a delivery spread far never holds a
   claim that goes stale while it waits.
2. ``admitted`` at the slot, before the caller's bulkhead: a lease on the key's semaphore and
   the start counted in the rate's window (a start that a full parallelism delayed past its
   slot never bunches with the ones on time). Released when the send has answered; a dead
   dispatcher's lease ends by itself. Each delivery asks once at its slot (a herd on
   schedule is admitted at once); those refused queue per key within a process and only the
   first ``ASKERS`` of them (at most the key's parallelism) ask again, each at once when a
   send of the key ends in this process, after ``POLL_MS`` while the key is full elsewhere,
   or when its window's oldest start leaves it. Their asks share Redis round trips (the
   limiter pipelines them), so a backlog drains up to ``ASKERS`` admissions per round trip,
   not one (one at a time fell behind 100 a second on a busy loop, and the claims of those
   waiting went stale), while a full key costs a few Redis calls per poll, not one per
   waiter. A long wait keeps the caller's claim fresh (``keep``).

Every key is its trigger's caller's (``core.flow.FlowScope``): the limiter, this process's
queues of waiters and its stats are all by (caller, key), so a key another caller writes
(a caller's default ``<caller>|<origin>`` included) shares nothing with this caller's.

Fails open: a Redis error delivers without flow control (``flow_control_fail_open_total``).
The delay flow control adds (start minus due time) is
``flow_control_delay_seconds{caller,key}``: only the first ``LABELLED_KEYS`` keys a process
meets get their own label, the rest share ``_other`` (a key is the caller's to choose:
unbounded). The ops page's "Flow control" panel reads the views ``publish`` puts on the
``FlowBoard``.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

from dispatcher.ranked import RankedSlots
from trigger_service.config.flow_defaults import default_flow
from trigger_service.config.live_callers import Callers
from trigger_service.core.errors import AdapterError
from trigger_service.core.flow import FlowControl, FlowScope, rate_window
from trigger_service.core.model import Status, Trigger
from trigger_service.core.ports import Clock, Metrics
from trigger_service.core.ports.flow import Admission, FlowBoard, FlowLimiter, FlowView

log = structlog.get_logger("dispatcher")

POLL_MS = 10  # how often a key's askers ask again while its parallelism is full elsewhere
ASKERS = 16  # at most this many of a key's queued waiters in a process ask at once
KEEP_EVERY_MS = 1_000  # how often a waiter's ``keep`` is called while it waits
LABELLED_KEYS = 20
KEPT_KEYS = 500  # keys whose recent delays a process keeps (least recently used dropped)
RECENT_S = 60  # the ops page's delays are over this window
VIEW_TTL_S = 30


class _Waiter:
    """Awaits what a waiter waits for while calling its ``keep`` every ``KEEP_EVERY_MS``
    (the clock's time)."""

    def __init__(self, clock: Clock, keep: Callable[[], Awaitable[None]] | None) -> None:
        self._clock = clock
        self._keep = keep
        self._next_keep_ms = clock.now_ms() + KEEP_EVERY_MS

    async def until(self, what: Awaitable[Any], timeout_ms: int | None = None
                    ) -> bool:
        """True once ``what`` is done; False after ``timeout_ms`` (``what`` cancelled)."""
        if self._keep is None and timeout_ms is None:
            await what
            return True
        end_ms = None if timeout_ms is None else self._clock.now_ms() + timeout_ms
        task = asyncio.ensure_future(what)
        try:
            while not task.done():
                limits = [x for x in (end_ms, self._next_keep_ms if self._keep else None)
                          if x is not None]
                timer = asyncio.ensure_future(self._clock.sleep_until_ms(min(limits)))
                try:
                    await asyncio.wait([task, timer], return_when=asyncio.FIRST_COMPLETED)
                finally:
                    timer.cancel()
                if task.done():
                    break
                if self._keep is not None and self._clock.now_ms() >= self._next_keep_ms:
                    await self._keep()
                    self._next_keep_ms = self._clock.now_ms() + KEEP_EVERY_MS
                if end_ms is not None and self._clock.now_ms() >= end_ms and not task.done():
                    return False
            task.result()
            return True
        finally:
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task


class _Queue:
    """A key's waiters in this process: ``askers`` bounds those asking Redis at once (a
    caller's high-priority ones first: ``ranked``); those of them refused for a full
    parallelism sleep in ``sleepers``, one woken per send of the key ending here."""

    def __init__(self, askers: int) -> None:
        self.askers = RankedSlots(askers)
        self.sleepers: deque[asyncio.Future[None]] = deque()
        self.users = 0

    def wake(self) -> None:
        while self.sleepers:
            sleeper = self.sleepers.popleft()
            if not sleeper.done():
                sleeper.set_result(None)
                return

    async def sleep(self, waiter: _Waiter) -> None:
        """Until woken, or a poll (one per ``POLL_MS`` over all sleepers: a place freed
        by another process is found as soon as by one head asking alone)."""
        sleeper: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.sleepers.append(sleeper)
        try:
            await waiter.until(sleeper, POLL_MS * len(self.sleepers))
        finally:
            if sleeper in self.sleepers:
                self.sleepers.remove(sleeper)


@dataclass
class _KeyStats:
    flow: FlowControl
    open: int = 0
    recent: deque[tuple[int, float]] = field(default_factory=lambda: deque(maxlen=1000))


class FlowGate:
    def __init__(self, limiter: FlowLimiter, callers: Callers, clock: Clock, metrics: Metrics,
                 *, lease_ms: int, board: FlowBoard | None = None, source: str = "") -> None:
        """``lease_ms``: how long an admitted delivery holds its place if its dispatcher
        dies (a callback timeout and a margin)."""
        self._limiter = limiter
        self._callers = callers
        self._clock = clock
        self._metrics = metrics
        self._lease_ms = lease_ms
        self._board = board
        self.source = source
        self._queues: dict[FlowScope, _Queue] = {}
        self._stats: OrderedDict[FlowScope, _KeyStats] = OrderedDict()
        self._labelled: set[FlowScope] = set()

    def policy(self, t: Trigger) -> FlowControl | None:
        """``t``'s own flow control, else its caller's default for its callback's origin."""
        scoped = self.scoped(t)
        return None if scoped is None else scoped[1]

    def scoped(self, t: Trigger) -> tuple[FlowScope, FlowControl] | None:
        """``policy(t)`` and where its bounds are kept: in ``t``'s caller's namespace, the
        caller's default apart from any key written (a trigger stored before keys were
        scoped is scoped here, by its caller, like any other)."""
        if t.flow_control is not None:
            return FlowScope(t.caller, t.flow_control.key), t.flow_control
        caller = self._callers.by_name(t.caller)
        if caller is None:
            return None
        fc = default_flow(t.caller, caller.flow_defaults, t.callback_url)
        return None if fc is None else (FlowScope(t.caller, fc.key, default=True), fc)

    async def reserve(self, t: Trigger) -> int:
        """When ``t``'s delivery may start: its due time, or the rate slot reserved for it
        (never earlier). Safe to repeat for one attempt (the same slot)."""
        due_ms = t.due_at_ms()
        scoped = self.scoped(t)
        # Only a PENDING one gets a slot: a message seen again while its trigger is IN_FLIGHT
        # (a duplicate, a claim being taken over) must not spend one at the herd's tail; the
        # admission still bounds a takeover's start.
        if scoped is None or not scoped[1].rate_per_second or t.status is not Status.PENDING:
            return due_ms
        scope, fc = scoped
        member = f"{t.trigger_id}:{t.fire_at_ms}:{t.attempts}"
        try:
            return await self._limiter.reserve(scope, member, due_ms, fc.interval_ms,
                                               self._clock.now_ms())
        except AdapterError as e:
            self._fail_open("reserve", scope, e)
            return due_ms

    @contextlib.asynccontextmanager
    async def admitted(self, t: Trigger, holder: str,
                       keep: Callable[[], Awaitable[None]] | None = None
                       ) -> AsyncIterator[None]:
        """Wait until ``t``'s delivery may start under its key's bounds, hold its place for
        the block (the send), then give it back. Without flow control: at once. ``keep``
        is awaited about every ``KEEP_EVERY_MS`` while the wait lasts (the caller keeps
        its claim fresh: a send that starts long after its claim's time must not be taken
        over); never once admitted."""
        scoped = self.scoped(t)
        if scoped is None:
            yield
            return
        scope, fc = scoped
        held, started_ms = await self._admit(scope, fc, holder, keep, t.priority.rank)
        stats = self._observe(scope, fc, started_ms, max(0, started_ms - t.due_at_ms()))
        stats.open += 1
        try:
            yield
        finally:
            stats.open -= 1
            queue = self._queues.get(scope)
            if held:
                try:
                    await self._limiter.release(scope, holder)
                except AdapterError:
                    pass  # its lease ends by itself (``lease_ms``)
            if queue is not None:
                queue.wake()  # a place is free: this process's waiters ask at once

    async def _admit(self, scope: FlowScope, fc: FlowControl, holder: str,
                     keep: Callable[[], Awaitable[None]] | None, rank: int
                     ) -> tuple[bool, int]:
        """(True, the start the limiter counted) once admitted; (False, now) if Redis
        failed (delivered anyway: fail open). The
        first ask is made at once (a herd on schedule is admitted without waiting for one
        another); one refused waits in the key's local queue, of which up to ``ASKERS``
        ask again at once."""
        window = rate_window(fc.rate_per_second) if fc.rate_per_second else None

        asked_ms = [0]  # the time the last ask gave the limiter: the start it counts

        async def ask() -> tuple[Admission, int]:
            asked_ms[0] = self._clock.now_ms()
            return await self._limiter.admit(scope, holder, asked_ms[0],
                                             self._lease_ms, fc.parallelism, window)

        queue = self._queues.get(scope)
        if queue is None:
            queue = self._queues[scope] = _Queue(min(ASKERS, fc.parallelism or ASKERS))
        queue.users += 1
        waiter = _Waiter(self._clock, keep)
        try:
            if (await ask())[0] is Admission.ADMITTED:
                return True, asked_ms[0]
            self._metrics.inc("flow_control_waits_total")
            await waiter.until(queue.askers.acquire(rank))
            try:
                while True:
                    verdict, wait_ms = await ask()
                    if verdict is Admission.ADMITTED:
                        return True, asked_ms[0]
                    if verdict is Admission.FULL:
                        # Woken by a send ending here, else asks again after a poll.
                        await queue.sleep(waiter)
                    else:  # the window: when its oldest start leaves it
                        await waiter.until(self._clock.sleep_ms(wait_ms))
            finally:
                queue.askers.release()
        except AdapterError as e:
            self._fail_open("admit", scope, e)
            return False, self._clock.now_ms()
        finally:
            queue.users -= 1
            if not queue.users and self._queues.get(scope) is queue:
                del self._queues[scope]

    def _fail_open(self, what: str, scope: FlowScope, e: Exception) -> None:
        self._metrics.inc("flow_control_fail_open_total")
        log.warning("flow_control_fail_open", step=what, caller=scope.caller, key=scope.key,
                    error=str(e))

    def _observe(self, scope: FlowScope, fc: FlowControl, started_ms: int,
                 delay_ms: int) -> _KeyStats:
        if scope in self._labelled or len(self._labelled) < LABELLED_KEYS:
            self._labelled.add(scope)
            label = scope.key
        else:
            label = "_other"
        self._metrics.observe("flow_control_delay_seconds", delay_ms / 1000,
                              caller=scope.caller, key=label)
        stats = self._stats.pop(scope, None) or _KeyStats(fc)
        stats.flow = fc
        stats.recent.append((started_ms, delay_ms / 1000))
        self._stats[scope] = stats  # the most recently used last
        if len(self._stats) > KEPT_KEYS:
            for key, old in list(self._stats.items())[:len(self._stats) - KEPT_KEYS]:
                if not old.open:
                    del self._stats[key]
        return stats

    def starts_ms(self, scope: FlowScope) -> list[int]:
        """The starts of ``scope``'s deliveries this process made lately (at most the last
        1,000), as the limiter counted them."""
        stats = self._stats.get(scope)
        return [at_ms for at_ms, _ in stats.recent] if stats is not None else []

    def views(self) -> list[FlowView]:
        """Each key started in the last ``RECENT_S`` or open now, with its recent delays."""
        since_ms = self._clock.now_ms() - RECENT_S * 1000
        out = []
        for scope, s in self._stats.items():
            delays = [d for at_ms, d in s.recent if at_ms >= since_ms]
            if delays or s.open:
                out.append(FlowView(scope.key, s.flow.rate_per_second, s.flow.parallelism,
                                    s.open, statistics.median(delays) if delays else 0.0,
                                    max(delays, default=0.0), len(delays), self.source,
                                    scope.caller, scope.default))
        return out

    async def publish(self) -> None:
        """One round of the ops page's views (the dispatcher's ``OpsReporter`` calls it
        with its own round). Raises ``CacheError``."""
        if self._board is None:
            return
        views = self.views()
        if views:
            await self._board.publish_flow(self.source, views, self._clock.now_ms(),
                                           VIEW_TTL_S)
