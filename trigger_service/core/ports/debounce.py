"""The debounce heads' boundary (``app.debouncing``): one row per (caller, debounce key),
changed only by conditional writes, so concurrent requests agree on one head."""

from __future__ import annotations

from typing import Protocol

from trigger_service.core.debounce import DebounceHead


class DebounceHeads(Protocol):
    """Heads by (caller, key). Every write is conditional and answers the head that is there
    after it (this request's when it applied, another's when that one came first); a write
    whose outcome is unknown raises, and the caller reads again."""

    async def debounce_head(self, caller: str, key: str) -> DebounceHead | None:
        """The head as read (it may be behind a conditional write in progress: the writes
        below answer the truth). Raises ``StoreError``."""
        ...

    async def start_head(self, head: DebounceHead, ttl_s: int) -> DebounceHead:
        """``head``, living ``ttl_s`` (its ``expires_at_ms`` says when, as the caller
        reckons it), unless (caller, key) has one (then that one). Raises ``StoreError``."""
        ...

    async def replace_head(self, old: DebounceHead, new: DebounceHead,
                           ttl_s: int) -> DebounceHead:
        """``new`` in place of ``old``, living ``ttl_s``, if (caller, key) still has ``old``
        (the same start; ``new`` may be ``old`` renewed), else the head there (None there:
        ``new`` is started). Raises ``StoreError``."""
        ...
