"""When each held message is claimed: ahead of its due time by a lead that grows with the
backlog, so that a herd due at one instant is claimed before that instant and only the POSTs
are left for it.

A lone message is claimed ``claim_lead_ms`` before it is due. Each message held with an
earlier or equal due time, not yet claimed, moves that earlier by the measured cost of one
claim (an LWT's latency divided by how many run at once), up to ``claim_lead_max_ms``: 5,000
messages due together are claimed one after the other over the seconds before the instant,
at the rate the store has shown it can take, rather than all at once at the last second.
At most ``claim_concurrency`` claims are in flight at once (the driver pipelines them); the
claims waiting for one of those slots are served by weighted round robin over their callers
(``fair_share.FairSlots``), so a herd's claims queued for the slots do not hold back another
caller's claims due with them.

Claims share Paxos rounds: the store writes the conditional writes of one partition that are
in flight together as one batch. So a message whose claim time comes takes with it the held
messages of its partition (``group``) due within ``min_lead_ms`` after it: a wave of one
(minute, shard) is claimed in one round rather than one LWT each, a little ahead of time.

The claim's LWT records the due time as the claim's start (``claimed_at_ms``), so an early
claim does not go stale earlier than a late one. The claim is also what decides a race with a
cancel: the API's cancel is an LWT conditioned on PENDING, the claim one conditioned on the
same row as read, so Paxos orders the two and exactly one applies, on any clocks
(``trigger_service.app.triggers.TriggerService.cancel``). After its claim, an occurrence is
sent without another read.
"""

from __future__ import annotations

import asyncio
import bisect
from collections.abc import AsyncIterator, Hashable, Iterator
from contextlib import asynccontextmanager, contextmanager

from dispatcher.fair_share import FairSlots, Weight, unit_weight
from trigger_service.core.ports import Clock

# Before anything is measured: a claim LWT on a busy 2-core machine (bench/results).
_INITIAL_LATENCY_MS = 100.0
_EWMA_WEIGHT = 0.05  # of each new latency sample
# A claim never counts as cheaper than this, however fast the store answers when idle.
MIN_CLAIM_COST_MS = 2.0


class ClaimGate:
    def __init__(self, clock: Clock, *, min_lead_ms: int, max_lead_ms: int,
                 concurrency: int, weight: Weight = unit_weight) -> None:
        """``weight``: a caller's weight in the claim slots' round robin."""
        self._clock = clock
        self._min_lead_ms = min_lead_ms
        self._max_lead_ms = max(min_lead_ms, max_lead_ms)
        self._concurrency = concurrency
        self._slots = FairSlots(concurrency, weight)
        # Due times of held messages not yet claimed, sorted, by priority rank.
        self._waiting: tuple[list[int], ...] = ([], [], [])
        self._latency_ms = _INITIAL_LATENCY_MS
        # Held messages by group (a partition): each one's due time and what wakes it when
        # a mate's claim time comes.
        self._groups: dict[Hashable, list[tuple[int, asyncio.Event]]] = {}
        self.woken_total = 0  # claims taken early with a mate (a wave)

    @property
    def claim_cost_ms(self) -> float:
        """What one more claim in the backlog costs in lead: the LWT's latency shared by the
        claims that run at once."""
        return max(MIN_CLAIM_COST_MS, self._latency_ms / self._concurrency)

    def lead_ms(self, ahead: int) -> int:
        """How long before its due time a message with ``ahead`` unclaimed messages due no
        later than it is claimed."""
        return min(self._max_lead_ms, self._min_lead_ms + int(ahead * self.claim_cost_ms))

    @asynccontextmanager
    async def turn(self, due_ms: int, wait: asyncio.Event | None = None,
                   group: Hashable | None = None, caller: str = "",
                   rank: int = 1) -> AsyncIterator[bool]:
        """Wait for this message's claim time (or less, if ``wait`` is set meanwhile: the
        dispatcher is stopping; or if a message of the same ``group`` due no more than
        ``min_lead_ms`` earlier has its turn), then hold one of the claim slots for the
        block, which runs the claim; ``caller``'s turn among the callers waiting for one,
        and ``rank``'s (``Priority.rank``) among the caller's. Yields False if ``wait`` was
        set (nothing to claim).

        The messages that set its lead are those due no later of its rank or a lower one:
        a high message due with a low herd is claimed before the herd (a lead as long as
        the herd's longest), while the store is not yet busy with the herd's claims; the
        herd's own leads do not count it."""
        waiting = self._waiting[rank]
        bisect.insort(waiting, due_ms)
        mates = None if group is None else self._groups.setdefault(group, [])
        me = (due_ms, asyncio.Event())
        if mates is not None:
            mates.append(me)
        try:
            ahead = sum(bisect.bisect_left(self._waiting[r], due_ms + 1)
                        for r in range(rank, len(self._waiting))) - 1
            claim_at_ms = due_ms - self.lead_ms(ahead)
            if not await sleep_until(self._clock, claim_at_ms, wait, me[1]):
                yield False
                return
            if me[1].is_set():
                self.woken_total += 1
            elif mates is not None:
                self._wake(mates, due_ms + self._min_lead_ms)
        finally:
            del waiting[bisect.bisect_left(waiting, due_ms)]
            if mates is not None:
                mates.remove(me)
                if not mates:
                    del self._groups[group]
        async with self._slots.slot(caller, rank):
            started_ms = self._clock.now_ms()
            try:
                yield True
            finally:
                self._observe(self._clock.now_ms() - started_ms)

    @staticmethod
    def _wake(mates: list[tuple[int, asyncio.Event]], until_ms: int) -> None:
        for due_ms, woken in mates:
            if due_ms <= until_ms:
                woken.set()

    def _observe(self, latency_ms: int) -> None:
        self._latency_ms += _EWMA_WEIGHT * (latency_ms - self._latency_ms)



async def sleep_until(clock: Clock, at_ms: int, wait: asyncio.Event | None,
                      woken: asyncio.Event | None = None) -> bool:
    """Sleep until ``at_ms``, or less if ``wait`` or ``woken`` is set meanwhile; False if
    ``wait`` was."""
    if wait is None and woken is None:
        await clock.sleep_until_ms(at_ms)
        return True
    if wait is not None and wait.is_set():
        return False
    sleep = asyncio.ensure_future(clock.sleep_until_ms(at_ms))
    events = [asyncio.ensure_future(e.wait()) for e in (wait, woken) if e is not None]
    try:
        await asyncio.wait([sleep, *events], return_when=asyncio.FIRST_COMPLETED)
    finally:
        sleep.cancel()
        for e in events:
            e.cancel()
    return wait is None or not wait.is_set()


class DueTimers:
    """One sleeper per distinct wake-up time: every send due at the same millisecond waits
    on one shared future. A herd of 5,000 is one chopped sleep, not 5,000 (each of which
    would wake every 0.5 s, and all at once at the instant, before the first POST)."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._timers: dict[tuple[int, int], asyncio.Future[bool]] = {}
        self._sleepers: set[asyncio.Task[None]] = set()

    async def wait_until(self, at_ms: int, stopping: asyncio.Event | None = None) -> bool:
        """``sleep_until``, shared with every other waiter for the same time and event: the
        first one sleeps (as ``sleep_until`` would), the others wait for its answer."""
        key = (at_ms, id(stopping))
        fut = self._timers.get(key)
        if fut is not None:
            # Shielded: a waiter that is cancelled leaves the shared answer alone.
            return await asyncio.shield(fut)
        fut = self._timers[key] = asyncio.get_running_loop().create_future()
        try:
            woke = await sleep_until(self._clock, at_ms, stopping)
        except BaseException:
            # This waiter was cancelled: a sleeper task answers the others.
            task = asyncio.create_task(self._sleep(key, at_ms, stopping, fut))
            self._sleepers.add(task)
            task.add_done_callback(self._sleepers.discard)
            raise
        self._answer(key, fut, woke)
        return woke

    async def _sleep(self, key: tuple[int, int], at_ms: int, stopping: asyncio.Event | None,
                     fut: asyncio.Future[bool]) -> None:
        try:
            woke = await sleep_until(self._clock, at_ms, stopping)
        except BaseException:
            self._timers.pop(key, None)
            fut.cancel()
            raise
        self._answer(key, fut, woke)

    def _answer(self, key: tuple[int, int], fut: asyncio.Future[bool], woke: bool) -> None:
        del self._timers[key]
        if not fut.done():
            fut.set_result(woke)


class Mates:
    """Set when a delivery's send is over: whether mates of its wave (its partition's other
    claimed deliveries) are still being sent, so that its outcome may wait for theirs."""

    waiting = False


class Waves:
    """Claimed deliveries per partition, each from its claim to its send's answer."""

    def __init__(self) -> None:
        self._open: dict[Hashable, int] = {}

    @contextmanager
    def open(self, group: Hashable | None) -> Iterator[Mates]:
        mates = Mates()
        if group is None:
            yield mates
            return
        self._open[group] = self._open.get(group, 0) + 1
        try:
            yield mates
        finally:
            left = self._open[group] - 1
            if left:
                self._open[group] = left
            else:
                del self._open[group]
            mates.waiting = left > 0
