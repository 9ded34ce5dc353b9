"""``DebounceHeads`` in memory, for unit tests (alone, or mixed into ``MemoryStore``)."""

from __future__ import annotations

from trigger_service.core.debounce import DebounceHead


class MemoryDebounceHeads:
    """Heads as written (their ``expires_at_ms`` as given: nothing expires here)."""

    heads: dict[tuple[str, str], DebounceHead]
    head_writes: int  # start_head and replace_head calls: each is an LWT on Cassandra

    def __init__(self) -> None:
        self._init_debounce()

    def _init_debounce(self) -> None:
        self.heads = {}
        self.head_writes = 0

    async def debounce_head(self, caller: str, key: str) -> DebounceHead | None:
        return self.heads.get((caller, key))

    async def start_head(self, head: DebounceHead, ttl_s: int) -> DebounceHead:
        self.head_writes += 1
        return self.heads.setdefault((head.caller, head.key), head)

    async def replace_head(self, old: DebounceHead, new: DebounceHead,
                           ttl_s: int) -> DebounceHead:
        self.head_writes += 1
        there = self.heads.get((new.caller, new.key))
        if there is None or there.started_at_ms == old.started_at_ms:
            self.heads[(new.caller, new.key)] = new
            return new
        return there
