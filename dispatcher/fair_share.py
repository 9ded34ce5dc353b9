"""Fair shares between callers inside one dispatcher: one caller's herd must not hold back
another caller's deliveries due at the same time.

Two places were first come, first served, and a herd came first in both:

- the in-flight cap (``max_inflight``): a herd's held messages filled it, and the dispatcher
  stopped receiving, so another caller's messages, behind the herd's on the queue, were not
  even received until the herd was sent (``Shares``: a caller under its share of the cap is
  received past it; a caller at or over its share is hidden back on SQS for a while);
- the claim gate's LWT slots (``claim_concurrency``): claims queued for a slot in arrival
  order (``FairSlots``: the waiters are served by weighted round robin over callers).

A caller's weight is ``weight`` in the callers file (default 1): with weights 2 and 1, the
first caller gets two slots, and two thirds of the cap, for each one the second gets, while
both want more than that; a caller that wants less leaves the rest to the others.

A message that cannot be held now (its caller is over its share, or has a full queue for
its bulkhead) is hidden back on SQS until about its turn (``DrainPace``): the caller's
messages ahead of it, over the rate its sends start. A herd's excess is then received about
twice, not every second or so until its turn comes.

Pure: counts and an order, no I/O and no clock (times are passed in; ``FairSlots`` hands out
slots to asyncio waiters, nothing else).
"""

from __future__ import annotations

import asyncio
import heapq
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from dispatcher.ranked import RankedWaiters
from trigger_service.config.live_callers import Callers

Weight = Callable[[str], int]


def unit_weight(caller: str) -> int:
    """Every caller the same weight."""
    return 1


class Shares:
    """Messages in hand per caller, against the dispatcher's cap.

    Below the cap every message is admitted. At or over it, a caller's message is admitted
    only while the caller holds fewer than its share: the cap times its weight over the
    weights of every caller holding messages (itself included). The others' shares add up to
    at most the cap, so however the callers come, at most twice the cap is ever in hand, and
    a caller with a few messages is received even when another one fills the dispatcher."""

    def __init__(self, cap: int, weight: Weight = unit_weight) -> None:
        self.cap = max(1, cap)
        self._weight = weight
        self._in_hand: dict[str, int] = {}
        self._weights: dict[str, int] = {}  # of the callers holding messages
        self._weight_sum = 0
        self.total = 0
        # Each caller's held messages' due times: a heap, and those left but not yet popped.
        self._dues: dict[str, list[int]] = {}
        self._gone: dict[str, Counter[int]] = {}

    def in_hand(self, caller: str) -> int:
        return self._in_hand.get(caller, 0)

    def share(self, caller: str) -> int:
        """The caller's share of the cap among the callers holding messages (at least 1)."""
        w = self._weights.get(caller)
        mine = max(1, self._weight(caller)) if w is None else w
        total = self._weight_sum + (mine if w is None else 0)
        return max(1, self.cap * mine // total)

    def admits(self, caller: str, uncounted: int = 0) -> bool:
        """Whether one more message of ``caller`` may be held now; ``uncounted``: how many
        of those in hand do not count against the cap (the dispatcher's messages waiting
        for their caller's bulkhead)."""
        return (self.total - uncounted < self.cap
                or self.in_hand(caller) < self.share(caller))

    def earliest_due_ms(self, caller: str) -> int | None:
        """The earliest due time of ``caller``'s messages in hand (None: it holds none):
        room is made for its next one no earlier than that."""
        dues, gone = self._dues.get(caller), self._gone.get(caller)
        while dues and gone and gone[dues[0]]:
            gone[heapq.heappop(dues)] -= 1
        return dues[0] if dues else None

    def enter(self, caller: str, due_ms: int = 0) -> tuple[str, int]:
        """Count one more message of ``caller``, due at ``due_ms``, in hand; ``leave`` with
        what this returns when it is done."""
        n = self._in_hand.get(caller, 0)
        if not n:
            w = self._weights[caller] = max(1, self._weight(caller))
            self._weight_sum += w
            self._dues[caller], self._gone[caller] = [], Counter()
        self._in_hand[caller] = n + 1
        self.total += 1
        heapq.heappush(self._dues[caller], due_ms)
        return caller, due_ms

    def leave(self, held: tuple[str, int]) -> None:
        caller, due_ms = held
        n = self._in_hand[caller] - 1
        self.total -= 1
        if n:
            self._in_hand[caller] = n
            self._gone[caller][due_ms] += 1
            return
        del self._in_hand[caller], self._dues[caller], self._gone[caller]
        self._weight_sum -= self._weights.pop(caller)


class RoundRobin:
    """Weighted round robin over callers with something waiting (stride scheduling): each
    turn goes to the waiting caller whose pass is least; taking a turn moves its pass on by
    1/weight. A caller that starts waiting begins at the pass of the last turn, so time it
    spent idle is not credit it can spend on a burst."""

    def __init__(self, weight: Weight = unit_weight) -> None:
        self._weight = weight
        self._waiting: dict[str, int] = {}
        self._pass: dict[str, float] = {}
        self._now = 0.0  # the pass of the last turn taken

    def __len__(self) -> int:
        return sum(self._waiting.values())

    def push(self, caller: str) -> None:
        """One more turn wanted by ``caller``."""
        n = self._waiting.get(caller, 0)
        if not n:
            self._pass[caller] = max(self._pass.get(caller, 0.0), self._now)
        self._waiting[caller] = n + 1

    def charge(self, caller: str) -> None:
        """``caller`` took a turn without waiting (nobody else was)."""
        self._pass[caller] = self._now = max(self._pass.get(caller, 0.0), self._now)
        self._pass[caller] += 1.0 / max(1, self._weight(caller))

    def withdraw(self, caller: str) -> None:
        """One wanted turn of ``caller`` is not wanted any more."""
        n = self._waiting[caller] - 1
        if n:
            self._waiting[caller] = n
        else:
            del self._waiting[caller]

    def pop(self) -> str | None:
        """Whose turn it is (None: nobody waits)."""
        if not self._waiting:
            return None
        caller = min(self._waiting, key=lambda c: (self._pass[c], c))
        self._now = self._pass[caller]
        self._pass[caller] += 1.0 / max(1, self._weight(caller))
        self.withdraw(caller)
        if len(self._pass) > 4 * len(self._waiting) + 64:
            # Forget idle callers' passes (they start at the last turn's anyway).
            self._pass = {c: p for c, p in self._pass.items() if c in self._waiting}
        return caller


class FairSlots:
    """A semaphore of ``size`` slots whose waiters are served by ``RoundRobin`` over their
    callers, and within a caller by priority (``ranked.RankedWaiters``: high first, then
    first come first served)."""

    def __init__(self, size: int, weight: Weight = unit_weight) -> None:
        self._free = size
        self._order = RoundRobin(weight)
        self._queues: dict[str, RankedWaiters] = {}

    @property
    def waiting(self) -> int:
        return len(self._order)

    @asynccontextmanager
    async def slot(self, caller: str, rank: int = 1) -> AsyncIterator[None]:
        """Hold one slot for the block (waiting for it, in the caller's turn, and among
        the caller's waiters in ``rank``'s order: ``Priority.rank``)."""
        await self.acquire(caller, rank)
        try:
            yield
        finally:
            self.release()

    async def acquire(self, caller: str, rank: int = 1) -> None:
        if self._free > 0 and not len(self._order):
            self._free -= 1
            self._order.charge(caller)
            return
        fut = self._queues.setdefault(caller, RankedWaiters()).add(rank)
        self._order.push(caller)
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.release()  # handed a slot just as it was cancelled: pass it on
            else:
                fut.cancel()
                self._queues[caller].forget()
                if not len(self._queues[caller]):
                    del self._queues[caller]
                self._order.withdraw(caller)
            raise

    def release(self) -> None:
        """Give a slot back: to the next waiter in turn, else to the free ones."""
        caller = self._order.pop()
        if caller is None:
            self._free += 1
            return
        queue = self._queues[caller]
        queue.wake_next()
        if not len(queue):
            del self._queues[caller]


# Without a pace, a message that cannot be held waits FAIR_DEFER_S, doubled with each
# receive up to FAIR_DEFER_MAX_S: long enough that it is not received again and again, short
# enough that it is not held back much longer than the dispatcher needs to make room.
FAIR_DEFER_S = 1
FAIR_DEFER_MAX_S = 8


def short_wait_s(receive_count: int) -> int:
    """The wait without a pace of a message received ``receive_count`` times."""
    return min(FAIR_DEFER_MAX_S, FAIR_DEFER_S << min(max(0, receive_count - 1), 3))


class DrainPace:
    """Each caller's pace (sends started per second, measured over windows of ``window_ms``)
    and, from it, when to bring back a message that cannot be held now: its turn.

    The first message deferred comes back when half of those ahead of it have started;
    each next one ``1/rate`` after the one before, so a herd's excess returns at the rate it
    is sent, never all at once. A turn is at most ``max_ms`` ahead (the rate may rise).
    Without a measured rate (nothing of the caller started in the last two windows) there
    is no turn: the caller of ``turn_ms`` falls back to a short wait."""

    def __init__(self, window_ms: int = 5_000, max_ms: int = 60_000) -> None:
        self._window_ms = window_ms
        self._max_ms = max_ms
        # caller -> [window start, sends started in it, the last full window's rate per ms]
        self._windows: dict[str, list[float]] = {}
        self._next_ms: dict[str, float] = {}  # caller -> the next free turn

    def started(self, caller: str, now_ms: int) -> None:
        """One send of ``caller`` started at ``now_ms``."""
        w = self._windows.get(caller)
        if w is None:
            self._windows[caller] = [now_ms, 1, 0.0]
            return
        if now_ms - w[0] >= self._window_ms:
            w[2] = w[1] / (now_ms - w[0])
            w[0], w[1] = now_ms, 0
        w[1] += 1

    def rate_per_s(self, caller: str, now_ms: int) -> float | None:
        """Sends of ``caller`` started per second lately (None: none measured)."""
        w = self._windows.get(caller)
        if w is None:
            return None
        elapsed_ms = now_ms - w[0]
        if elapsed_ms >= 2 * self._window_ms:
            return None  # nothing started for two windows: no pace to go by
        if elapsed_ms >= self._window_ms or not w[2]:
            # The current window (once it is at least a second old) when it is complete or
            # when there is no earlier one.
            return w[1] * 1000 / elapsed_ms if elapsed_ms >= 1000 else None
        return w[2] * 1000

    def come_back_ms(self, caller: str, now_ms: int, ahead: int, receive_count: int) -> int:
        """``turn_ms``, or without a pace ``short_wait_s`` from now."""
        turn = self.turn_ms(caller, now_ms, ahead)
        return turn if turn is not None else now_ms + short_wait_s(receive_count) * 1000

    def turn_ms(self, caller: str, now_ms: int, ahead: int) -> int | None:
        """When a message of ``caller`` with ``ahead`` of its messages before it should come
        back (None: no pace measured). Each call takes a turn."""
        rate = self.rate_per_s(caller, now_ms)
        if rate is None:
            return None
        per_ms = 1000 / rate
        turn = min(max(now_ms + ahead * per_ms / 2, self._next_ms.get(caller, 0.0)),
                   now_ms + self._max_ms)
        self._next_ms[caller] = turn + per_ms
        return int(turn)


def caller_weights(callers: Callers) -> Callable[[str], int]:
    """Each caller's weight in fair shares (``weight`` in the callers file; 1 for a caller
    no longer in it), read at each use: a reloaded file applies at once."""
    def weight(caller: str) -> int:
        c = callers.by_name(caller)
        return c.weight if c is not None else 1
    return weight
