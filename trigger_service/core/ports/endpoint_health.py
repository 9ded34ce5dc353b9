"""The ports of endpoint health (``core.endpoint_health``): the durable records, read by every
dispatcher through a cache (``dispatcher.endpoint_health``), and the operators' event sink.

Every write to a record is conditional (an LWT), so a reset by one process is never undone
by another's late rewrite, and exactly one process disables an endpoint (and sends its
event)."""

from __future__ import annotations

from typing import Protocol

from trigger_service.core.endpoint_health import EndpointHealth, OpsEvent


class EndpointHealthStore(Protocol):
    """Every method may raise ``StoreError``."""

    async def endpoint_health(self, caller: str | None = None) -> list[EndpointHealth]:
        """Every record (a small table, read whole), or ``caller``'s; by caller, origin."""
        ...

    async def note_first_failure(self, h: EndpointHealth) -> EndpointHealth:
        """Make ``h`` unless a record of its (caller, origin) exists; the record now stored
        (``h``, or the one already there)."""
        ...

    async def note_failures(self, h: EndpointHealth) -> bool:
        """Rewrite the counts of ``h`` if the stored record is the same one (same first
        failure); False when it was reset (or replaced) meanwhile."""
        ...

    async def mark_disabled(self, h: EndpointHealth, at_ms: int) -> bool:
        """Disable the record ``h`` (the same first failure, not disabled yet); True for the
        one caller whose write applied."""
        ...

    async def mark_notified(self, h: EndpointHealth, at_ms: int) -> None:
        """The disabled event of ``h`` was sent (idempotent)."""
        ...

    async def clear_failing(self, caller: str, origin: str) -> bool:
        """A success: delete the record unless it is disabled (idempotent); False when it is
        disabled (kept)."""
        ...

    async def clear(self, caller: str, origin: str) -> EndpointHealth | None:
        """Enable: delete the record whatever its state; the record deleted (None: none)."""
        ...


class OpsEvents(Protocol):
    async def send(self, event: OpsEvent) -> bool:
        """Send ``event`` (signed) to the operators, retrying a few times; whether it was
        accepted. Never raises for the receiver's failure (logged)."""
        ...
