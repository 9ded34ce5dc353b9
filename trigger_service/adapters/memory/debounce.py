"""``DebounceHeads`` in memory, for unit tests (alone, or mixed into ``MemoryStore``)."""

from __future__ import annotations

from trigger_service.core.debounce import DebounceHead


class MemoryDebounceHeads:
    heads: dict[tuple[str, str], DebounceHead]

    def __init__(self) -> None:
        self._init_debounce()

    def _init_debounce(self) -> None:
        self.heads = {}

    async def debounce_head(self, caller: str, key: str) -> DebounceHead | None:
        return self.heads.get((caller, key))

    async def start_head(self, head: DebounceHead, ttl_s: int) -> DebounceHead:
        return self.heads.setdefault((head.caller, head.key), head)

    async def replace_head(self, old: DebounceHead, new: DebounceHead,
                           ttl_s: int) -> DebounceHead:
        there = self.heads.get((new.caller, new.key))
        if there is None or there.started_at_ms == old.started_at_ms:
            self.heads[(new.caller, new.key)] = new
            return new
        return there
