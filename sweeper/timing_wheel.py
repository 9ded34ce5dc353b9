"""Hierarchical timing wheel for near-term timers (its asyncio driver: ``wheel_driver``).

The wheel is an in-memory index of "call back ``key`` at ``deadline_ms``": O(1) add, replace and
cancel, and an ``advance(now_ms)`` that hands back everything that has come due. It is not
durable and not thread-safe; one owner (normally :class:`WheelDriver` on one event loop) calls it.

Layout (the Kafka purgatory scheme, with integer epoch milliseconds throughout):

* Level ``k`` is a ring of ``wheel_size`` buckets, each ``tick_k = tick_ms * wheel_size**k``
  wide. Bucket number ``j`` of level ``k`` holds the deadlines in ``((j-1)*tick_k, j*tick_k]``,
  i.e. ``j == ceil(deadline_ms / tick_k)``, and lives in slot ``j % wheel_size``. Buckets are
  closed on the right so that advancing to a tick boundary completes a level-0 bucket exactly.
* A timer goes to the lowest level whose ring can hold its bucket without wrapping (the bucket
  number is less than ``wheel_size`` past the bucket holding the current time). Levels above 0
  are created the first time a deadline needs them.
* Each non-empty bucket has one entry in a heap keyed by the first millisecond it covers (Kafka's
  DelayQueue of buckets). ``advance`` pops only buckets whose time has come, so a long pause
  costs O(non-empty buckets + timers moved), never O(elapsed ticks). When a bucket above level 0
  comes up, its timers cascade: each is re-placed one or more levels down (or expired).
* Cancel and replace are lazy: a key maps to its one live entry, and an entry sitting in a bucket
  is live only while that map still points at it. Dead entries (tombstones) are dropped when their
  bucket is next touched, and a compaction pass runs once they outnumber live timers by more than
  a few thousand, which bounds memory to about twice the live timers and keeps cancel at amortised
  O(1).

Expiry is exact at millisecond granularity: ``advance(now_ms)`` returns precisely the live timers
with ``deadline_ms <= now_ms``. Ticks only decide how work is batched and how far ahead of a
deadline :meth:`TimingWheel.next_deadline_ms` may wake the driver.
"""

from __future__ import annotations

import heapq
from operator import itemgetter
from typing import Generic, NamedTuple, TypeVar

from trigger_service.core.time.timing import ceil_div as _ceil_div

T = TypeVar("T")
# Expired is immutable, so an Expired[str] may stand in for an Expired[object].
T_co = TypeVar("T_co", covariant=True)

__all__ = ["Expired", "TimingWheel"]

# Tombstones are only compacted away once they also exceed this floor, so a small wheel with a
# burst of cancels does not pay for a full pass every few calls.
_COMPACT_FLOOR = 4096

_by_deadline = itemgetter(1)
_new_tuple = tuple.__new__


class Expired(NamedTuple, Generic[T_co]):
    """A timer that came due: the ``key``, ``deadline_ms`` and ``value`` it was added with.

    The wheel stores these tuples as its entries and hands the same objects back on expiry (no
    copy per expired timer). A NamedTuple is immutable and has ``__slots__ = ()``, so an entry is
    one 3-slot object with no per-instance ``__dict__`` (64 bytes on 64-bit CPython).
    """

    key: str
    deadline_ms: int
    value: T_co


class TimingWheel(Generic[T]):
    """Hierarchical timing wheel mapping string keys to deadlines (epoch ms) and values.

    Not thread-safe: call it from one thread (in the service, the event loop that owns it).
    """

    __slots__ = (
        "_aligned_ms", "_dead", "_due", "_entries", "_limits_ms",
        "_now_ms", "_queue", "_rings", "_ticks_ms", "_wheel_size",
    )

    def __init__(self, tick_ms: int = 10, wheel_size: int = 512, start_ms: int = 0) -> None:
        """Create an empty wheel whose current time is ``start_ms``.

        ``tick_ms`` is the width of a level-0 bucket and ``wheel_size`` the number of buckets per
        level, so level 0 spans ``tick_ms * wheel_size`` ms and level ``n+1`` has a tick of
        ``tick_ms * wheel_size**(n+1)``. Raises ``ValueError`` if ``tick_ms < 1`` or
        ``wheel_size < 2``.
        """
        if tick_ms < 1:
            raise ValueError(f"tick_ms must be >= 1, got {tick_ms}")
        if wheel_size < 2:
            raise ValueError(f"wheel_size must be >= 2, got {wheel_size}")
        self._wheel_size = wheel_size
        self._now_ms = start_ms
        self._ticks_ms: list[int] = [tick_ms]
        self._rings: list[list[list[Expired[T]]]] = [[[] for _ in range(wheel_size)]]
        # key -> its one live entry; a bucket entry that is not the value here is a tombstone.
        self._entries: dict[str, Expired[T]] = {}
        # Entries added with a deadline at or before the current time: due on the next advance.
        self._due: list[Expired[T]] = []
        # (first ms the bucket covers, level, bucket number) for every non-empty bucket.
        self._queue: list[tuple[int, int, int]] = []
        # Tombstones still sitting in buckets or in _due.
        self._dead = 0
        # _limits_ms[k] is the latest deadline level k can hold without its ring wrapping, given
        # the rings' alignment time _aligned_ms (now_ms between calls; see advance).
        self._aligned_ms = start_ms
        self._limits_ms: list[int] = []
        self._align(start_ms)

    # -- introspection -------------------------------------------------------------------------

    @property
    def now_ms(self) -> int:
        """The wheel's current time: the largest of ``start_ms`` and all times given to advance."""
        return self._now_ms

    @property
    def tick_ms(self) -> int:
        """Width of a level-0 bucket in milliseconds."""
        return self._ticks_ms[0]

    @property
    def levels(self) -> int:
        """How many levels exist so far (overflow levels are created on demand, never dropped)."""
        return len(self._rings)

    def __len__(self) -> int:
        """Number of live timers (added, not yet expired, not cancelled or replaced)."""
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        """Whether ``key`` has a live timer."""
        return key in self._entries

    # -- mutation ------------------------------------------------------------------------------

    def add(self, key: str, deadline_ms: int, value: T) -> None:
        """Schedule ``value`` under ``key`` to expire at ``deadline_ms``. O(1) amortised.

        If ``key`` already has a live timer it is replaced: the old one will never be returned by
        :meth:`advance`. A deadline at or before :attr:`now_ms` is returned by the next
        :meth:`advance` call (even one that does not move time forward).
        """
        # tuple.__new__ skips the NamedTuple's Python-level __new__; this is the hot path.
        entry: Expired[T] = _new_tuple(Expired, (key, deadline_ms, value))
        entries = self._entries
        # One dict operation for the common case of a new key.
        replaced = entries.setdefault(key, entry) is not entry
        if replaced:
            entries[key] = entry  # the old entry, wherever it sits, is now a tombstone
        if deadline_ms <= self._now_ms:
            self._due.append(entry)
        else:
            self._place(entry, deadline_ms)
        if replaced:
            self._dead += 1
            self._maybe_compact()

    def cancel(self, key: str) -> bool:
        """Cancel the live timer for ``key``; it will never be returned by :meth:`advance`.

        Returns True if a live timer was cancelled, False if ``key`` had none (never added,
        already expired or already cancelled). O(1) amortised.
        """
        if self._entries.pop(key, None) is None:
            return False
        self._dead += 1
        self._maybe_compact()
        return True

    def advance(self, now_ms: int) -> list[Expired[T]]:
        """Move the current time to ``now_ms`` and return every timer that is now due.

        Returns each live timer with ``deadline_ms <= now_ms`` exactly once, removed from the
        wheel, in non-decreasing ``deadline_ms`` order (ties in unspecified order). A timer is
        never returned before its deadline; one added with a deadline at or before the current
        time is returned by this call. If ``now_ms`` is earlier than :attr:`now_ms` (a wall clock
        stepped back) the current time stays put; only already-due timers are returned.

        Cost is proportional to the non-empty buckets passed and the timers expired or cascaded,
        not to the number of ticks elapsed, so a call after an hours-long pause is cheap.
        """
        if now_ms < self._now_ms:
            now_ms = self._now_ms
        out: list[Expired[T]] = []
        # With no tombstones anywhere every stored entry is live and the per-entry check can go.
        all_live = self._dead == 0
        dropped = self._take_added_due(out)  # tombstones removed in this call
        queue = self._queue
        wheel_size = self._wheel_size
        tick0_ms = self._ticks_ms[0]
        # Cascaded timers are re-placed relative to the start of the bucket being emptied, not
        # relative to now_ms: buckets still waiting in the queue occupy ring slots that are only
        # free of collisions relative to that earlier time (the queue is drained in time order).
        cascade_ms = self._now_ms
        partial: tuple[int, int, int] | None = None
        while queue and queue[0][0] <= now_ms:
            item = heapq.heappop(queue)
            first_ms, level, bucket_no = item
            cascade_ms = max(cascade_ms, first_ms)
            ring = self._rings[level]
            slot = bucket_no % wheel_size
            bucket = ring[slot]
            ring[slot] = []
            if level == 0 and bucket_no * tick0_ms <= now_ms:
                dropped += self._expire_bucket(bucket, out, all_live)
            elif level == 0:
                # now_ms lies inside this bucket: the rest stays in place and the bucket goes
                # back on the queue once this loop is done, for the next advance to look at.
                dropped += self._expire_part(bucket, now_ms, out, ring, slot)
                if ring[slot]:
                    partial = item
            else:
                dropped += self._cascade(bucket, now_ms, cascade_ms, out, all_live)
        if partial is not None:
            heapq.heappush(queue, partial)

        self._now_ms = now_ms
        if self._aligned_ms != now_ms:
            self._align(now_ms)
        self._dead -= dropped
        if len(out) > 1:
            out.sort(key=_by_deadline)
        return out

    def _take_added_due(self, out: list[Expired[T]]) -> int:
        """Move the live timers added already due into ``out``; the tombstones dropped."""
        if not self._due:
            return 0
        due, self._due = self._due, []
        return self._expire_bucket(due, out, all_live=False)

    def _expire_bucket(self, bucket: list[Expired[T]], out: list[Expired[T]],
                       all_live: bool) -> int:
        """Every live timer of ``bucket`` (wholly due) into ``out``; the tombstones dropped."""
        entries = self._entries
        if all_live:
            for entry in bucket:
                del entries[entry[0]]
            out += bucket
            return 0
        dropped = 0
        for entry in bucket:
            if entries.get(entry[0]) is entry:
                del entries[entry[0]]
                out.append(entry)
            else:
                dropped += 1
        return dropped

    def _expire_part(self, bucket: list[Expired[T]], now_ms: int, out: list[Expired[T]],
                     ring: list[list[Expired[T]]], slot: int) -> int:
        """A level-0 bucket that ``now_ms`` lies inside: the due part into ``out``, the rest
        back into ``ring[slot]``."""
        entries = self._entries
        kept = ring[slot]
        dropped = 0
        for entry in bucket:
            if entries.get(entry[0]) is not entry:
                dropped += 1
            elif entry[1] <= now_ms:
                del entries[entry[0]]
                out.append(entry)
            else:
                kept.append(entry)
        return dropped

    def _cascade(self, bucket: list[Expired[T]], now_ms: int, cascade_ms: int,
                 out: list[Expired[T]], all_live: bool) -> int:
        """A bucket above level 0: re-place every live timer lower down, or expire it."""
        if self._aligned_ms != cascade_ms:
            self._align(cascade_ms)
        entries = self._entries
        queue = self._queue
        rings = self._rings
        wheel_size = self._wheel_size
        limits_ms = self._limits_ms
        ticks_ms = self._ticks_ms
        dropped = 0
        for entry in bucket:
            if not all_live and entries.get(entry[0]) is not entry:
                dropped += 1
                continue
            deadline_ms = entry[1]
            if deadline_ms <= now_ms:
                del entries[entry[0]]
                out.append(entry)
                continue
            # Same steps as _place, inlined: this loop moves every timer once per level.
            to_level = 0
            while deadline_ms > limits_ms[to_level]:
                to_level += 1
            tick_ms = ticks_ms[to_level]
            to_no = -(-deadline_ms // tick_ms)
            to_bucket = rings[to_level][to_no % wheel_size]
            if not to_bucket:
                heapq.heappush(queue, ((to_no - 1) * tick_ms + 1, to_level, to_no))
            to_bucket.append(entry)
        return dropped

    def next_deadline_ms(self) -> int | None:
        """When the driver must next call :meth:`advance`; None if there are no live timers.

        Otherwise returns a time ``T`` that is never later than the earliest live deadline, so
        sleeping until ``T`` cannot oversleep a timer:

        * if some live timer is already due (deadline <= :attr:`now_ms`, added since the last
          advance), ``T`` is the earliest such deadline, so ``T <= now_ms``: advance right away;
        * otherwise ``T = max(now_ms + 1, s + 1)`` where ``s`` is the start of the earliest
          non-empty bucket (buckets cover ``(s, s + tick]`` of their level), hence
          ``now_ms < T <= earliest live deadline``. ``T`` is exact only to a bucket: up to one
          level-0 tick early for near timers, and up to one level-``n`` tick early for a timer
          sitting in level ``n`` (waking there is needed anyway, to cascade it). A bucket holding
          only cancelled timers can also make ``T`` earlier than necessary, never later.

        Advancing to any time before ``T`` returns nothing. O(1) unless timers were added in the
        past since the last advance (then O(number of those)).
        """
        entries = self._entries
        if not entries:
            return None
        earliest_due_ms: int | None = None
        for entry in self._due:
            if entries.get(entry[0]) is entry and (
                earliest_due_ms is None or entry[1] < earliest_due_ms
            ):
                earliest_due_ms = entry[1]
        if earliest_due_ms is not None:
            return earliest_due_ms
        # A live timer that is not due sits in some bucket, so the queue is not empty.
        return max(self._queue[0][0], self._now_ms + 1)

    # -- internals -----------------------------------------------------------------------------

    def _place(self, entry: Expired[T], deadline_ms: int) -> None:
        """Put ``entry`` in the lowest level that can hold it, given the current alignment.

        Requires ``deadline_ms > self._aligned_ms``.
        """
        limits_ms = self._limits_ms
        if deadline_ms > limits_ms[-1]:
            self._add_levels(deadline_ms)
        level = 0
        while deadline_ms > limits_ms[level]:
            level += 1
        tick_ms = self._ticks_ms[level]
        bucket_no = -(-deadline_ms // tick_ms)  # ceil_div inlined: a call slows add() ~8 %
        bucket = self._rings[level][bucket_no % self._wheel_size]
        if not bucket:
            heapq.heappush(self._queue, ((bucket_no - 1) * tick_ms + 1, level, bucket_no))
        bucket.append(entry)

    def _align(self, ref_ms: int) -> None:
        """Recompute the per-level limits for rings aligned to time ``ref_ms``.

        Level ``k`` may hold bucket numbers ``[c, c + wheel_size)`` where ``c`` is the bucket
        holding ``ref_ms``; the latest deadline in bucket ``c + wheel_size - 1`` is the limit.
        Every bucket already stored must lie in that range, so rings are aligned to ``now_ms``
        between calls and only move forward, in queue order, inside :meth:`advance`.
        """
        self._aligned_ms = ref_ms
        wheel_size = self._wheel_size
        self._limits_ms[:] = [
            (_ceil_div(ref_ms, tick_ms) + wheel_size - 1) * tick_ms for tick_ms in self._ticks_ms
        ]

    def _add_levels(self, deadline_ms: int) -> None:
        """Create overflow levels until the top one can hold ``deadline_ms``."""
        while deadline_ms > self._limits_ms[-1]:
            tick_ms = self._ticks_ms[-1] * self._wheel_size
            self._ticks_ms.append(tick_ms)
            self._rings.append([[] for _ in range(self._wheel_size)])
            ceiling = _ceil_div(self._aligned_ms, tick_ms) + self._wheel_size - 1
            self._limits_ms.append(ceiling * tick_ms)

    def _maybe_compact(self) -> None:
        if self._dead > len(self._entries) + _COMPACT_FLOOR:
            self._compact()

    def _compact(self) -> None:
        """Drop every tombstone and rebuild the bucket queue. O(levels * wheel_size + entries)."""
        entries = self._entries
        self._due = [e for e in self._due if entries.get(e[0]) is e]
        queue: list[tuple[int, int, int]] = []
        for level, ring in enumerate(self._rings):
            tick_ms = self._ticks_ms[level]
            for slot, bucket in enumerate(ring):
                if not bucket:
                    continue
                live = [e for e in bucket if entries.get(e[0]) is e]
                ring[slot] = live
                if live:
                    bucket_no = _ceil_div(live[0][1], tick_ms)
                    queue.append(((bucket_no - 1) * tick_ms + 1, level, bucket_no))
        heapq.heapify(queue)
        self._queue = queue
        self._dead = 0
