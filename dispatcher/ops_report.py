"""What a dispatcher tells the ops page and Prometheus about its circuits and fire lag, every
``PUBLISH_EVERY_S``: each (caller, origin) circuit's state (the ``breaker_state`` gauge and
the ``OpsBoard``), the circuits it dropped since (deleted from the board), the fire lag
tallied since the last round (the ``OpsBoard``), and flow control's keys (``FlowGate``).

Safe to lose: a failed publication is logged by the loop and the lag tally is put back for
the next round; breaker entries expire ``OPS_BREAKER_TTL_S`` after a dispatcher stops
publishing them, so a dead dispatcher's circuits leave the page, and so do dropped ones
whose deletion failed.
"""

from __future__ import annotations

import asyncio
import os
import socket

from dispatcher.breaker import STATE_CODES
from dispatcher.delivery import Delivery
from trigger_service.core.ports import Clock, Metrics
from trigger_service.core.ports.ops import BreakerView, OpsBoard
from trigger_service.platform.supervisor import every

PUBLISH_EVERY_S = 1.0
BREAKER_TTL_S = 30
# A closed circuit unused this long is forgotten (origins come and go).
IDLE_FORGET_MS = 600_000


def dispatcher_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class OpsReporter:
    def __init__(self, delivery: Delivery, board: OpsBoard, clock: Clock, metrics: Metrics,
                 *, source: str | None = None) -> None:
        self._delivery = delivery
        self._board = board
        self._clock = clock
        self._metrics = metrics
        self.source = source or dispatcher_id()

    def breaker_views(self) -> list[BreakerView]:
        """Every circuit's state now (and the gauge set to it); idle closed ones forgotten
        (their gauges removed)."""
        self._delivery.breakers.forget_idle(IDLE_FORGET_MS)
        views = []
        for (caller, origin), b in self._delivery.breakers.items():
            state = b.state
            self._metrics.set("breaker_state", STATE_CODES[state], caller=caller, origin=origin)
            views.append(BreakerView(origin, state.value, b.changed_at_ms, self.source, caller))
        return views

    async def publish(self) -> None:
        """One round. Raises ``CacheError`` (the lag is kept for the next round; dropped
        circuits not deleted expire)."""
        views = self.breaker_views()
        await self._board.publish_breakers(self.source, views, self._clock.now_ms(),
                                           BREAKER_TTL_S,
                                           self._delivery.breakers.take_dropped())
        lag = self._delivery.lag.take()
        if lag:
            try:
                await self._board.add_lag(lag)
            except BaseException:
                self._delivery.lag.put_back(lag)
                raise
        if self._delivery.flow is not None:  # flow control's keys, in the same round
            await self._delivery.flow.publish()

    async def run(self, stop: asyncio.Event) -> None:
        await every(stop, PUBLISH_EVERY_S, self.publish, name="ops_report")
