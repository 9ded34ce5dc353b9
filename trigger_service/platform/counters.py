"""Durable counters: each process adds what its in-process counters gained since the last
flush to the ``CounterStore`` every ``FLUSH_EVERY_S`` and once more when it stops, so
duplicates, takeovers and leaks survive a SIGKILL of the process that saw them (up to the
last flush) and ``GET /v1/stats`` sums every process's."""

from __future__ import annotations

import asyncio

from trigger_service.core.ports import CounterStore, Metrics
from trigger_service.platform.supervisor import every

FLUSH_EVERY_S = 5.0


class CounterFlusher:
    def __init__(self, metrics: Metrics, store: CounterStore) -> None:
        self._metrics = metrics
        self._store = store
        self._flushed: dict[str, int] = {}

    async def flush(self) -> dict[str, int]:
        """Add the deltas since the last successful flush; returns them. Raises
        ``StoreError`` (the deltas are then added by a later flush)."""
        snapshot = self._metrics.snapshot()
        deltas = {name: value - self._flushed.get(name, 0) for name, value in snapshot.items()
                  if value != self._flushed.get(name, 0)}
        if deltas:
            await self._store.add_counters(deltas)
            self._flushed.update({name: snapshot[name] for name in deltas})
        return deltas

    async def run(self, stop: asyncio.Event) -> None:
        """Flush every ``FLUSH_EVERY_S`` until ``stop`` (the owner flushes once more after
        its other loops have drained)."""
        await every(stop, FLUSH_EVERY_S, self.flush, name="counters")
