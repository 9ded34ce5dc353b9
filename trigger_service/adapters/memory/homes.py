"""The fake store's rows of triggers as Cassandra holds them: by (trigger id, home), with a
pointer row per id (``MemoryPointer``), ``MemoryStore.triggers``' live view of them
(``LiveRows``) and the primitives ``adapters.homes`` builds one row per keyed id on
(``MemoryKeyedRows``). Both work on the store's state through ``RowHost`` (what
``MemoryStore`` offers them), so that this module does not import the store's."""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from dataclasses import dataclass, field
from typing import Protocol

from trigger_service.core.model import Trigger
from trigger_service.core.ports.homes import Creation, Pointer, creation_of


@dataclass
class MemoryPointer:
    """An id's pointer row: the last creation's home (``written_at_ms``: its creation
    time, which decides as the real store's write timestamp does), the keyed homes, the
    elected one."""

    home_at_ms: int | None
    shard: int
    written_at_ms: int
    creations: set[Creation] = field(default_factory=set)
    live_home: int | None = None

    def written(self, t: Trigger, *, keyed: bool) -> None:
        """A creation's pointer cells: its home wins by its creation time (as the real
        one's write timestamp does); with ``keyed`` the creation is added to the id's."""
        assert t.home_at_ms is not None
        if t.created_at_ms >= self.written_at_ms:
            self.home_at_ms, self.shard, self.written_at_ms = (t.home_at_ms, t.shard,
                                                               t.created_at_ms)
        if keyed:
            self.creations.add(creation_of(t))

    def settled_home(self) -> int | None:
        """Where ``MemoryStore.triggers`` reads the id's row (``Pointer.sole_home``, else
        the last creation's home)."""
        home = self.frozen().sole_home()
        return self.home_at_ms if home is None else home

    def frozen(self) -> Pointer:
        return Pointer(self.home_at_ms, self.shard, frozenset(self.creations), self.live_home)


class RowHost(Protocol):
    """What the views of this module need of the fake store (``MemoryStore``): its rows and
    pointers, and the writes and reads it makes of them (counted and failed as its own)."""

    rows: dict[tuple[str, int | None], Trigger]
    pointers: dict[str, MemoryPointer]
    _sealed: set[tuple[str, int]]

    def live_home(self, trigger_id: str) -> int | None: ...

    def _enter(self, name: str) -> None: ...

    def _index(self, trigger: Trigger) -> None: ...

    def _point(self, t: Trigger, *, keyed: bool) -> None: ...

    def _at(self, trigger_id: str, home_at_ms: int, shard: int) -> Trigger | None: ...

    def _write_row(self, t: Trigger) -> None: ...


class LiveRows(MutableMapping[str, Trigger]):
    """``MemoryStore.triggers``: each id's row as its pointer settles it (the elected home,
    the only one, or the last creation's), in the order the ids were created; a test's
    assignment writes the row at its home (a new id: unkeyed, that home alone)."""

    def __init__(self, store: RowHost) -> None:
        self._s = store

    def _live(self, trigger_id: str) -> Trigger | None:
        if trigger_id not in self._s.pointers:
            return None
        return self._s.rows.get((trigger_id, self._s.live_home(trigger_id)))

    def __getitem__(self, trigger_id: str) -> Trigger:
        t = self._live(trigger_id)
        if t is None:
            raise KeyError(trigger_id)
        return t

    def __setitem__(self, trigger_id: str, t: Trigger) -> None:
        p = self._s.pointers.get(trigger_id)
        if p is None or (t.home_at_ms not in p.frozen().homes
                         and t.home_at_ms != p.home_at_ms):
            p = self._s.pointers[trigger_id] = MemoryPointer(t.home_at_ms, t.shard,
                                                             t.created_at_ms)
        p.shard = t.shard
        self._s.rows[(trigger_id, t.home_at_ms)] = t

    def __delitem__(self, trigger_id: str) -> None:
        if self._live(trigger_id) is None:
            raise KeyError(trigger_id)
        del self._s.pointers[trigger_id]
        for key in [k for k in self._s.rows if k[0] == trigger_id]:
            del self._s.rows[key]

    def __iter__(self) -> Iterator[str]:
        return iter([tid for tid in list(self._s.pointers) if self._live(tid) is not None])

    def __len__(self) -> int:
        return sum(1 for _ in self)


class MemoryKeyedRows:
    """``KeyedRows`` on the fake's dicts (``adapters.homes`` builds on it)."""

    def __init__(self, store: RowHost) -> None:
        self._s = store

    async def write_creation_index(self, t: Trigger, index_ttl_s: int) -> None:
        self._s._index(t)
        self._s._point(t, keyed=True)

    async def pointer(self, trigger_id: str) -> Pointer | None:
        p = self._s.pointers.get(trigger_id)
        return None if p is None else p.frozen()

    async def row_at(self, trigger_id: str, home_at_ms: int, shard: int) -> Trigger | None:
        return self._s._at(trigger_id, home_at_ms, shard)

    async def write_row(self, t: Trigger) -> None:
        self._s._write_row(t)

    async def elect(self, trigger_id: str, home_at_ms: int, *, replacing: int | None) -> int:
        self._s._enter("elect")
        p = self._s.pointers[trigger_id]
        if p.live_home == replacing:
            p.live_home = home_at_ms
        assert p.live_home is not None
        return p.live_home

    async def seal(self, trigger_id: str, home_at_ms: int, shard: int) -> bool:
        self._s._enter("seal")
        if (trigger_id, home_at_ms) in self._s.rows:
            return False
        self._s._sealed.add((trigger_id, home_at_ms))
        return True

    async def drop_row(self, trigger_id: str, home_at_ms: int, shard: int) -> None:
        self._s.rows.pop((trigger_id, home_at_ms), None)
        self._s._sealed.add((trigger_id, home_at_ms))
