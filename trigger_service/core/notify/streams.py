"""The open inbox streams of one API process, and their caps (``StreamGate``).

Each stream holds one of the process's connection slots (``TRIGGER_LIMITS_MAX_CONNECTIONS``) for as
long as it is open, so streams are capped per caller and per process, and each lives at most
a maximum lifetime: then the server ends it and the client reconnects (``Last-Event-ID``
replays what it missed). The counts are this process's own; the caller's count across the
API processes is ``core.ports.limit.StreamSlots`` (the HTTP layer checks both;
docs/channels.md "Inbox").

Pure: no I/O; the caller passes the time (``Clock.now_ms``) and a source of randomness.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from itertools import count

from trigger_service.core.errors import TooManyStreams
from trigger_service.core.time.timing import seconds_until

# A stream's lifetime ends within its last tenth, at random: streams opened together (after a
# deploy, say) then do not all reconnect at the same moment.
LIFETIME_SPREAD = 0.1


@dataclass(frozen=True)
class StreamCaps:
    max_streams: int
    max_per_caller: int
    lifetime_ms: int


@dataclass(frozen=True)
class StreamTicket:
    """One admitted stream: whose, and when the server ends it."""

    serial: int
    caller: str
    ends_at_ms: int


class StreamGate:
    """Admits streams under the caps and remembers them until released. Not thread-safe (one
    event loop)."""

    def __init__(self, rng: random.Random | None = None) -> None:
        self._open: dict[int, StreamTicket] = {}
        self._serials = count(1)
        self._rng = rng or random.Random()

    def admit(self, caller: str, now_ms: int, caps: StreamCaps) -> StreamTicket:
        """A ticket for one more stream of ``caller``; release it when the stream ends.
        Raises ``TooManyStreams`` (nothing admitted) when the caller's or the process's open
        streams are at their cap, with Retry-After the time until the oldest of them ends."""
        mine = [t for t in self._open.values() if t.caller == caller]
        if len(mine) >= caps.max_per_caller:
            raise TooManyStreams(
                f"this caller has {len(mine)} inbox streams open on this API process, the "
                f"most it may (close one, or retry later)", _retry_after_s(mine, now_ms))
        if len(self._open) >= caps.max_streams:
            raise TooManyStreams(
                "this API process has as many inbox streams open as it may; retry later",
                _retry_after_s(list(self._open.values()), now_ms))
        spread_ms = int(caps.lifetime_ms * LIFETIME_SPREAD * self._rng.random())
        ticket = StreamTicket(next(self._serials), caller, now_ms + caps.lifetime_ms - spread_ms)
        self._open[ticket.serial] = ticket
        return ticket

    def release(self, ticket: StreamTicket) -> None:
        """Forget the stream; safe to repeat."""
        self._open.pop(ticket.serial, None)

    def open_streams(self, caller: str | None = None) -> int:
        """How many streams are open (of ``caller``, or in all)."""
        return sum(1 for t in self._open.values() if caller is None or t.caller == caller)


def _retry_after_s(tickets: list[StreamTicket], now_ms: int) -> int:
    """Whole seconds until the first of ``tickets`` ends, at least 1."""
    first_ms = min(t.ends_at_ms for t in tickets)
    return seconds_until(first_ms, now_ms)
