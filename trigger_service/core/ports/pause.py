"""The port of the operators' caller pause (``POST /v1/ops/callers/{caller}/pause``): a
durable flag per caller, read by every dispatcher through a cache (``dispatcher.screening``)."""

from __future__ import annotations

from typing import Protocol


class CallerPauses(Protocol):
    async def pause_caller(self, caller: str, paused_at_ms: int) -> None:
        """Set ``caller``'s flag (idempotent: a second pause keeps the first time).
        Raises ``StoreError``."""
        ...

    async def resume_caller(self, caller: str) -> None:
        """Clear ``caller``'s flag (idempotent). Raises ``StoreError``."""
        ...

    async def paused_callers(self) -> dict[str, int]:
        """Every paused caller → when it was paused (a small table, read whole).
        Raises ``StoreError``."""
        ...
