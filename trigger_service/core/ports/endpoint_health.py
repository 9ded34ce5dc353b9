"""The ports of endpoint health (``core.endpoint_health``): the durable records, read by every
dispatcher through a cache (``dispatcher.endpoint_health``), and the operators' event sink.

Every write to a record is conditional (an LWT), so a reset by one process is never undone
by another's late rewrite, and exactly one process disables an endpoint (and sends its
event).

Bounded per caller: a record expires a TTL after its last write (each write renews it), a
caller has at most ``max_per_caller`` records (a new failing origin past that is not
tracked: it is never disabled, its deliveries retry as any), and every caller's records are
read in pages.

The index of parked triggers (``ParkedTrigger``), per (caller, origin): what an enable's
replay reads instead of every trigger of the caller's. An entry is written before its trigger
is parked, so a parked trigger always has one (a crash between the two leaves an entry of a
trigger not parked, which the reader checks against the row); it lives ``ttl_s`` (the trigger
retention) unless the reader deletes it as stale. Its partition holds at most the entries of
that (caller, origin) written within ``ttl_s``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Protocol

from trigger_service.core.endpoint_health import EndpointHealth, OpsEvent, ParkedTrigger


class EndpointHealthStore(Protocol):
    """Every method may raise ``StoreError``."""

    async def endpoint_health(self, caller: str | None = None) -> list[EndpointHealth]:
        """Every record (read in pages, to the end), or ``caller``'s; by caller, origin."""
        ...

    async def note_first_failure(self, h: EndpointHealth, max_per_caller: int
                                 ) -> EndpointHealth | None:
        """Make ``h`` unless a record of its (caller, origin) exists; the record now stored
        (``h``, or the one already there). None when there is none and its caller has
        ``max_per_caller`` records already (not tracked; two made together past the cap may
        both be refused)."""
        ...

    async def note_failures(self, h: EndpointHealth) -> bool:
        """Rewrite the counts of ``h`` if the stored record is the same one (same first
        failure, disable and notification); False when it was reset, replaced, disabled or
        notified meanwhile."""
        ...

    async def mark_disabled(self, h: EndpointHealth, at_ms: int) -> bool:
        """Disable the record ``h`` (the same first failure, not disabled yet); True for the
        one caller whose write applied."""
        ...

    async def mark_notified(self, h: EndpointHealth, at_ms: int) -> None:
        """The disabled event of ``h`` (the record as disabled) was sent (idempotent);
        nothing when the stored record is another one."""
        ...

    async def clear_failing(self, caller: str, origin: str) -> bool:
        """A success: delete the record unless it is disabled (idempotent); False when it is
        disabled (kept)."""
        ...

    async def clear(self, caller: str, origin: str) -> EndpointHealth | None:
        """Enable: delete the record whatever its state; the record deleted (None: none)."""
        ...

    async def note_parked(self, caller: str, origin: str, parked: ParkedTrigger, ttl_s: int
                          ) -> None:
        """Add ``parked`` to the index of (``caller``, ``origin``) for ``ttl_s`` (idempotent:
        the same entry again only renews it). Written before the trigger is parked."""
        ...

    def parked_since(self, caller: str, origin: str, since_ms: int
                     ) -> AsyncIterator[list[ParkedTrigger]]:
        """The entries of (``caller``, ``origin``) due at or after ``since_ms``, in pages, by
        due time then id, to the end (a trigger parked at several occurrences has an entry
        for each)."""
        ...

    async def forget_parked(self, caller: str, origin: str, parked: Sequence[ParkedTrigger]
                            ) -> None:
        """Delete these entries of (``caller``, ``origin``) (idempotent): their triggers are
        no longer parked."""
        ...


class OpsEvents(Protocol):
    async def send(self, event: OpsEvent) -> bool:
        """Send ``event`` (signed) to the operators, retrying a few times; whether it was
        accepted. Never raises for the receiver's failure (logged)."""
        ...
