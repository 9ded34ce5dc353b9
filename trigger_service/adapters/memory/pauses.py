"""``CallerPauses`` in memory, for unit tests (alone, or mixed into ``MemoryStore``)."""

from __future__ import annotations


class MemoryCallerPauses:
    paused: dict[str, int]
    pause_reads: int

    def __init__(self) -> None:
        self._init_pauses()

    def _init_pauses(self) -> None:
        self.paused = {}
        self.pause_reads = 0

    async def pause_caller(self, caller: str, paused_at_ms: int) -> None:
        self.paused.setdefault(caller, paused_at_ms)

    async def resume_caller(self, caller: str) -> None:
        self.paused.pop(caller, None)

    async def paused_callers(self) -> dict[str, int]:
        self.pause_reads += 1
        return dict(self.paused)
