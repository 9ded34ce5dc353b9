"""Trigger reads of concurrent registrations, in one ``get_many`` per turn of the event loop.

A keyed registration reads the row its key derives (``app.idempotency``): a batch create
reads hundreds at once, and one request each costs the store's driver more CPU than the
rest of the registration. Here the reads asked for in the same turn of the loop go as one
``TriggerStates.get_many`` (the store's ``IN`` reads); a lone read waits for nothing but the
end of the current turn. Each caller gets what ``get`` would have answered, or the error of
the read its id was in (``StoreError``).
"""

from __future__ import annotations

from collections.abc import Sequence

from trigger_service.core.coalescing import TurnCoalescer
from trigger_service.core.model import Trigger
from trigger_service.core.ports import TriggerStates

# Ids per get_many at most.
MAX_READ = 500


class CoalescedReads:
    def __init__(self, states: TriggerStates, max_read: int = MAX_READ) -> None:
        self._states = states
        self._reads: TurnCoalescer[str, Trigger | None] = TurnCoalescer(self._read, max_read)

    async def get(self, trigger_id: str) -> Trigger | None:
        """``TriggerStates.get``, shared with the reads asked for in the same turn."""
        return await self._reads.run(trigger_id)

    async def _read(self, ids: list[str]) -> Sequence[Trigger | None]:
        if len(ids) == 1:
            return [await self._states.get(ids[0])]
        return await self._states.get_many(ids)
