"""The recipient store's port: profiles per caller, the index of each person's
triggers, and the zone changes not yet carried to them. Implemented by
``adapters.memory.recipients`` (tests) and ``adapters.cassandra.recipients``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol

from trigger_service.core.recipient_profiles import RecipientProfile

MAX_RECIPIENT_LIST = 500


@dataclass(frozen=True, slots=True)
class LinkedTrigger:
    """An entry of a person's trigger index: where the trigger's row is."""

    trigger_id: str
    home_at_ms: int
    shard: int


@dataclass(frozen=True, slots=True)
class ZoneChange:
    """A profile's zone change whose triggers may not all be re-resolved yet."""

    caller: str
    recipient_id: str
    changed_at_ms: int


class RecipientStore(Protocol):
    async def get_profile(self, caller: str, recipient_id: str) -> RecipientProfile | None:
        """The profile, or None. Raises ``StoreError``."""
        ...

    async def put_profile(self, caller: str, profile: RecipientProfile) -> None:
        """Create or replace (idempotent: a repeat writes the same). Raises ``StoreError``."""
        ...

    async def delete_profile(self, caller: str, recipient_id: str) -> None:
        """Idempotent. Raises ``StoreError``."""
        ...

    async def list_profiles(self, caller: str, after: str, limit: int
                            ) -> list[RecipientProfile]:
        """Up to ``limit`` (≤ ``MAX_RECIPIENT_LIST``) profiles with ids after ``after``, in id
        order (bounded: ``limit`` rows per partition read). Raises ``StoreError``."""
        ...

    async def count_profiles(self, caller: str) -> int:
        """How many profiles ``caller`` has. Raises ``StoreError``."""
        ...

    async def link(self, caller: str, recipient_id: str, entry: LinkedTrigger,
                   ttl_s: int) -> None:
        """Add a trigger to the person's index (idempotent). Raises ``StoreError``."""
        ...

    def linked(self, caller: str, recipient_id: str) -> AsyncIterator[list[LinkedTrigger]]:
        """The person's index in trigger id order, a page at a time to the last (never all
        at once, and no bound: a person's entries are as many as the triggers made for them
        in the index TTL, finished ones included). Readers check each entry against the row:
        an entry may point at a finished trigger, or at none. Raises ``StoreError`` from the
        page that failed (the pages yielded before it stand: a read, go on or read again)."""
        ...

    async def record_zone_change(self, change: ZoneChange) -> None:
        """Note that the person's triggers must be re-resolved (before the profile is
        written: a crash in between leaves a change to complete, never one forgotten).
        Raises ``StoreError``."""
        ...

    async def zone_changes(self, limit: int) -> list[ZoneChange]:
        """Changes not yet completed, at most ``limit``. Raises ``StoreError``."""
        ...

    async def complete_zone_change(self, change: ZoneChange) -> None:
        """Forget ``change`` unless a newer change of the person was recorded since (that
        one stays). Raises ``StoreError``."""
        ...
