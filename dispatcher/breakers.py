"""One dispatcher's circuits, one per (caller, callback origin), with a cap per caller.

Keyed by caller as well as origin so that one caller cannot open another's circuit: triggers
of caller A aimed at the origin B's callbacks use fail only A's circuit for it, and B's
deliveries there go on. The cost of that is a circuit per pair, so each caller may have at
most ``max_per_caller`` of them: a new pair over the cap drops the caller's least recently
used idle (closed) circuit. An open or half-open one is never dropped (that would forget
the trouble it guards against); a caller whose circuits are all in trouble gets none for a
new origin (``get`` answers None: the delivery waits as for an open circuit).

A dropped circuit takes its ``breaker_state`` gauge child with it, and is remembered until
the ops reporter takes it (``take_dropped``) to delete what it published for it.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from typing import NamedTuple

from dispatcher.breaker import BreakerState, CircuitBreaker
from trigger_service.core.ports import Clock, Metrics

MAX_DROPPED_KEPT = 10_000


class BreakerKey(NamedTuple):
    caller: str
    origin: str  # ``core.urls.callback_origin``'s form


class Breakers:
    def __init__(self, clock: Clock, metrics: Metrics, *, fail_max: int, reset_s: float,
                 max_per_caller: int) -> None:
        self._clock = clock
        self._metrics = metrics
        self._fail_max = fail_max
        self._reset_s = reset_s
        self._max_per_caller = max(1, max_per_caller)
        # Per caller, origin → circuit, least recently used first.
        self._by_caller: dict[str, OrderedDict[str, CircuitBreaker]] = {}
        # Bounded: with no ops reporter to take them (or a slow one) the oldest go, and what
        # was published for them expires on its own (``OPS_BREAKER_TTL_S``).
        self._dropped: deque[BreakerKey] = deque(maxlen=MAX_DROPPED_KEPT)

    def get(self, caller: str, origin: str) -> CircuitBreaker | None:
        """The circuit of ``caller``'s callbacks to ``origin``, made if new (and marked as
        the caller's most recently used). None when it is new, the caller is at its cap and
        none of its circuits is idle to make room."""
        mine = self._by_caller.setdefault(caller, OrderedDict())
        b = mine.get(origin)
        if b is not None:
            mine.move_to_end(origin)
            return b
        if len(mine) >= self._max_per_caller and not self._drop_lru_idle(caller, mine):
            return None
        self._by_caller[caller] = mine  # (back, if the drop emptied it)
        b = mine[origin] = CircuitBreaker(self._clock, fail_max=self._fail_max,
                                          reset_s=self._reset_s)
        return b

    def items(self) -> list[tuple[BreakerKey, CircuitBreaker]]:
        return [(BreakerKey(caller, origin), b) for caller, mine in self._by_caller.items()
                for origin, b in mine.items()]

    def __len__(self) -> int:
        return sum(len(mine) for mine in self._by_caller.values())

    def forget_idle(self, idle_ms: int) -> None:
        """Drop every closed circuit not used for ``idle_ms`` (origins come and go)."""
        now_ms = self._clock.now_ms()
        for caller, mine in list(self._by_caller.items()):
            for origin, b in list(mine.items()):
                if b.state is BreakerState.CLOSED and now_ms - b.used_at_ms > idle_ms:
                    self._drop(caller, mine, origin)

    def take_dropped(self) -> list[BreakerKey]:
        """The circuits dropped since the last call (what was published for them is stale)."""
        dropped = list(self._dropped)
        self._dropped.clear()
        return dropped

    def _drop_lru_idle(self, caller: str, mine: OrderedDict[str, CircuitBreaker]) -> bool:
        for origin, b in mine.items():  # least recently used first
            if b.state is BreakerState.CLOSED:
                self._drop(caller, mine, origin)
                self._metrics.inc("breakers_evicted_total")
                return True
        return False

    def _drop(self, caller: str, mine: OrderedDict[str, CircuitBreaker], origin: str) -> None:
        del mine[origin]
        if not mine:
            del self._by_caller[caller]
        self._metrics.remove("breaker_state", caller=caller, origin=origin)
        self._dropped.append(BreakerKey(caller, origin))
