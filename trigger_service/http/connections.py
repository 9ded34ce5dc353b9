"""Who holds an API process's connection slots, and which slot to give up under pressure: the
policy of ``http.server.GuardedServer``, with no sockets in it (a connection is any hashable
key; the time is the injected ``Clock``'s monotonic time).

- **The cap.** At most ``max_connections`` connections are counted open. A new one over it
  takes the slot of the kept-alive connection idle the longest (that one is to be closed,
  ``Admission.evicted``); none idle: it is refused.
- **A caller's share.** A connection belongs to the principal whose request it last carried,
  idle or not; a caller may hold ``per_caller`` of them. A caller's request on another
  connection (a new one, or one another principal last used) while it holds its share is
  refused (``claim`` is False), and the connection stays whose it was: other callers still
  get in. A connection that has answered nobody's request yet is counted, but belongs to
  no one until it does (the server's head deadline bounds how long it waits for one).
- **Anonymous idle connections** (kept alive after answering only unauthenticated requests:
  health checks, 401s) are to be closed once idle ``anonymous_idle_ms`` (``idle_expired``).

Fresh connections (no answer sent yet) and busy ones (a request in progress, an inbox
stream) are never taken: only a connection waiting for its client's next request is, which
a client must expect of any kept-alive connection.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

from trigger_service.core.ports import Clock

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class Admission(Generic[K]):
    """A new connection's fate: ``admitted`` (counted) or not; ``evicted``: the idle
    connection whose slot it took, for the server to close (already forgotten here)."""

    admitted: bool
    evicted: K | None = None


@dataclass
class _Slot:
    owner: str | None = None
    idle_since_ms: int | None = None  # None: fresh or busy (a request in progress)


class ConnectionShares(Generic[K]):
    """The slots of one process (see the module). Not thread-safe: the event loop's."""

    def __init__(self, max_connections: int, per_caller: int, anonymous_idle_ms: int,
                 clock: Clock) -> None:
        self.max_connections = max_connections
        self.per_caller = per_caller
        self.anonymous_idle_ms = anonymous_idle_ms
        self._clock = clock
        self._slots: dict[K, _Slot] = {}
        # The idle kept-alive connections, longest idle first (one going idle moves to the
        # end; the clock is monotonic, so this is the order of idle_since_ms).
        self._idle: OrderedDict[K, None] = OrderedDict()
        self._held: dict[str, int] = {}

    def open(self, conn: K) -> Admission[K]:
        """Count a new connection, taking the longest-idle slot when the process is full."""
        evicted = None
        if len(self._slots) >= self.max_connections:
            if not self._idle:
                return Admission(False)
            evicted = next(iter(self._idle))
            self.closed(evicted)
        self._slots[conn] = _Slot()
        return Admission(True, evicted)

    def started(self, conn: K) -> None:
        """A request's head arrived on ``conn``: it is busy until ``finished``."""
        slot = self._slots.get(conn)
        if slot is not None:
            slot.idle_since_ms = None
            self._idle.pop(conn, None)

    def claim(self, conn: K, owner: str, *, capped: bool = True) -> bool:
        """``conn`` now carries a request of ``owner``; False (and nothing changes) when
        ``capped`` and ``owner`` already holds its share on other connections."""
        slot = self._slots.get(conn)
        if slot is None or slot.owner == owner:
            return True
        if capped and self._held.get(owner, 0) >= self.per_caller:
            return False
        self._release(slot)
        slot.owner = owner
        self._held[owner] = self._held.get(owner, 0) + 1
        return True

    def finished(self, conn: K) -> None:
        """``conn``'s answer is sent: it waits, idle, for its client's next request."""
        slot = self._slots.get(conn)
        if slot is not None:
            slot.idle_since_ms = self._clock.monotonic_ms()
            self._idle[conn] = None
            self._idle.move_to_end(conn)

    def closed(self, conn: K) -> None:
        """``conn`` is gone (or is being closed): its slot is free. Unknown: nothing."""
        slot = self._slots.pop(conn, None)
        if slot is not None:
            self._idle.pop(conn, None)
            self._release(slot)

    def idle_expired(self, conn: K) -> bool:
        """Whether ``conn`` is an anonymous kept-alive connection idle for its time."""
        slot = self._slots.get(conn)
        return (slot is not None and slot.owner is None and slot.idle_since_ms is not None
                and self._clock.monotonic_ms() - slot.idle_since_ms >= self.anonymous_idle_ms)

    def owner(self, conn: K) -> str | None:
        slot = self._slots.get(conn)
        return None if slot is None else slot.owner

    def held(self, owner: str) -> int:
        """How many connections ``owner`` holds (busy and idle)."""
        return self._held.get(owner, 0)

    def __len__(self) -> int:
        return len(self._slots)

    def _release(self, slot: _Slot) -> None:
        if slot.owner is not None:
            left = self._held[slot.owner] - 1
            if left:
                self._held[slot.owner] = left
            else:
                del self._held[slot.owner]
