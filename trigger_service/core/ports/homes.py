"""Where a keyed trigger's row lives: the primitives ``adapters.homes.Homes`` builds "one row
per trigger id" from (``adapters.cassandra.homes``, ``adapters.memory.store``).

A row's home is the fire time it was created with, and requests of one Idempotency-Key can
compute different fire times (a ``delaySeconds`` retry arrives later). Every keyed creation
adds (its home, its creation time, its request hash) to the id's ``creations`` (a set:
concurrent adds all stay, a request's repeats add the same element), then reads them back;
another creation there means another request of the key, and several homes one that Paxos
elects among (``live_home``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from trigger_service.core.model import Trigger

# A keyed creation as the pointer records it: (home, creation time, request hash); the
# repeats of one request's write record the same.
Creation = tuple[int, int, str]


def creation_of(t: Trigger) -> Creation:
    assert t.home_at_ms is not None
    return (t.home_at_ms, t.created_at_ms, t.request_hash or "")


@dataclass(frozen=True, slots=True)
class Pointer:
    """What the id's pointer row says. ``home_at_ms``: the last creation's home (last write
    wins: where an unkeyed trigger's row is); ``creations``: every keyed creation, as (home,
    creation time, request hash) (empty for unkeyed triggers and rows of earlier releases);
    ``live_home``: the home Paxos elected when they wrote several; ``legacy``: an earlier
    release's whole row kept there."""

    home_at_ms: int | None
    shard: int | None
    creations: frozenset[Creation] = frozenset()
    live_home: int | None = None
    legacy: Trigger | None = None

    @property
    def homes(self) -> frozenset[int]:
        """The homes the keyed creations wrote."""
        return frozenset(c[0] for c in self.creations)

    def sole_home(self) -> int | None:
        """The one home, when the question of which is settled without a read of the rows:
        the elected one, the only one written, or (no keyed homes) the pointer's."""
        if self.live_home is not None:
            return self.live_home
        if not self.homes:
            return self.home_at_ms
        if len(self.homes) == 1:
            return next(iter(self.homes))
        return None


class KeyedRows(Protocol):
    """The store's primitives for keyed rows. Every method raises ``StoreError`` (a
    ``StoreTimeout`` when the outcome is unknown) and nothing else on the store's failure."""

    async def write_creation_index(self, t: Trigger, index_ttl_s: int) -> None:
        """The index entries of ``t`` at its home, the pointer and ``creation_of(t)`` added
        to the id's creations, acknowledged before anything reads
        them back (plain writes, timestamped by the creation: repeats rewrite identical
        cells)."""
        ...

    async def pointer(self, trigger_id: str) -> Pointer | None:
        """The pointer row as a quorum reads it now (None: no trigger has the id)."""
        ...

    async def row_at(self, trigger_id: str, home_at_ms: int, shard: int) -> Trigger | None:
        """The row at that home, as stored (no liveness check)."""
        ...

    async def write_row(self, t: Trigger) -> None:
        """Create ``t``'s row at ``t.home_at_ms`` with a plain write timestamped by its
        creation (older than every transition and every seal: it can change neither)."""
        ...

    async def elect(self, trigger_id: str, home_at_ms: int, *, replacing: int | None) -> int:
        """By Paxos: ``live_home`` becomes ``home_at_ms`` iff it is ``replacing`` (None: not
        elected yet). Returns the live home after the round (this one or the one there)."""
        ...

    async def seal(self, trigger_id: str, home_at_ms: int, shard: int) -> bool:
        """By Paxos on the row: True if no row is at that home, and none written later by a
        creation can appear there (a delete newer than every creation's cells); False if a
        row is there."""
        ...

    async def drop_row(self, trigger_id: str, home_at_ms: int, shard: int) -> None:
        """Delete a row that lost the election (nobody ever acted on it: a reader returns
        only live rows), with a timestamp newer than any creation's cells."""
        ...
