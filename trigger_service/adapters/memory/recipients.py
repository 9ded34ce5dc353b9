"""An in-memory ``RecipientStore`` for unit tests and the in-process runtime (one process:
no TTLs, nothing shared). The person's index pages as Cassandra's does."""

from __future__ import annotations

from collections.abc import AsyncIterator

from trigger_service.core.ports.recipient import LinkedTrigger, ZoneChange
from trigger_service.core.recipient_profiles import RecipientProfile


class MemoryRecipients:
    def __init__(self) -> None:
        self.profiles: dict[tuple[str, str], RecipientProfile] = {}
        self.links: dict[tuple[str, str], dict[str, LinkedTrigger]] = {}
        self.changes: dict[tuple[str, str], int] = {}
        self.page_size = 5000  # index entries per page of ``linked``: Cassandra's fetch size

    async def get_profile(self, caller: str, recipient_id: str) -> RecipientProfile | None:
        return self.profiles.get((caller, recipient_id))

    async def put_profile(self, caller: str, profile: RecipientProfile) -> None:
        self.profiles[(caller, profile.recipient_id)] = profile

    async def delete_profile(self, caller: str, recipient_id: str) -> None:
        self.profiles.pop((caller, recipient_id), None)

    async def list_profiles(self, caller: str, after: str, limit: int
                            ) -> list[RecipientProfile]:
        ids = sorted(r for c, r in self.profiles if c == caller and r > after)
        return [self.profiles[(caller, r)] for r in ids[:limit]]

    async def count_profiles(self, caller: str) -> int:
        return sum(1 for c, _ in self.profiles if c == caller)

    async def link(self, caller: str, recipient_id: str, entry: LinkedTrigger,
                   ttl_s: int) -> None:
        self.links.setdefault((caller, recipient_id), {})[entry.trigger_id] = entry

    async def linked(self, caller: str, recipient_id: str
                     ) -> AsyncIterator[list[LinkedTrigger]]:
        # As Cassandra pages: each page read when asked for, after the last id yielded.
        found, after = self.links.get((caller, recipient_id), {}), ""
        while ids := sorted(i for i in found if i > after)[:self.page_size]:
            yield [found[i] for i in ids]
            after = ids[-1]

    async def record_zone_change(self, change: ZoneChange) -> None:
        self.changes[(change.caller, change.recipient_id)] = change.changed_at_ms

    async def zone_changes(self, limit: int) -> list[ZoneChange]:
        return [ZoneChange(c, r, at) for (c, r), at in sorted(self.changes.items())][:limit]

    async def complete_zone_change(self, change: ZoneChange) -> None:
        key = (change.caller, change.recipient_id)
        if self.changes.get(key) == change.changed_at_ms:
            del self.changes[key]
