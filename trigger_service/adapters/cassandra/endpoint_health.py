"""``EndpointHealthStore`` on Cassandra (``endpoint_health_by_caller``, infra/cql/027), on the
statements of ``CassandraStore`` (``CassandraStore.statements``: prepared on its session). A
partition per caller; every write is an LWT (``core.ports.endpoint_health``).

Bounded: every write rewrites each column the record has, with ``USING TTL ttl_s``, so a
record lives ``ttl_s`` after its last change (a column written alone would outlive the
others); a caller has at most ``max_per_caller`` records, checked before a new one and again
after it (two made together past the cap both go: the bound holds, and the next failure
tries again); every caller's records are read in pages of ``page_size`` rows.

The records of releases before 027 (one partition of ``endpoint_health``, 021) are moved
here by the first read of every caller's records of each process, until one finds none:
each is inserted ``IF NOT EXISTS`` (a newer record of the same endpoint wins) and deleted
from the old partition.

The index of parked triggers is ``endpoint_holds`` (infra/cql/028): a partition per (caller,
origin), by (due time, trigger id); an entry is a plain ``INSERT ... USING TTL`` (written
again, it is only renewed), read in pages of ``page_size`` rows, deleted in unlogged batches
of the partition (``driver.write_in_batches``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

from cassandra.query import UNSET_VALUE

from trigger_service.adapters import schema as s
from trigger_service.adapters.cassandra import driver
from trigger_service.config.endpoint_health import EndpointHealthSettings
from trigger_service.core.endpoint_health import EndpointHealth, ParkedTrigger

_FIRST, _LAST, _FAILURES, _ERROR, _DISABLED, _NOTIFIED = s.ENDPOINT_HEALTH_COLUMNS
_APPLIED = "[applied]"
_UNSET = UNSET_VALUE


def endpoint_health_queries(keyspace: str) -> dict[str, str]:
    """name → CQL text for the tables of this module."""
    t = f"{keyspace}.{s.TABLE_ENDPOINT_HEALTH}"
    old = f"{keyspace}.{s.TABLE_ENDPOINT_HEALTH_LEGACY}"
    cols = ", ".join((s.COL_CALLER, s.COL_ORIGIN, *s.ENDPOINT_HEALTH_COLUMNS))
    key = f"{s.COL_CALLER} = ? AND {s.COL_ORIGIN} = ?"
    counts = f"{_FIRST} = ?, {_LAST} = ?, {_FAILURES} = ?, {_ERROR} = ?"
    return {
        "eh_all": f"SELECT {cols} FROM {t}",
        "eh_caller": f"SELECT {cols} FROM {t} WHERE {s.COL_CALLER} = ?",
        "eh_origins": f"SELECT {s.COL_ORIGIN} FROM {t} WHERE {s.COL_CALLER} = ? LIMIT ?",
        "eh_one": f"SELECT {cols} FROM {t} WHERE {key}",
        "eh_first": f"INSERT INTO {t} ({cols}) VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
        f"IF NOT EXISTS USING TTL ?",
        "eh_again": f"UPDATE {t} USING TTL ? SET {counts}, {_DISABLED} = ?, {_NOTIFIED} = ? "
        f"WHERE {key} IF {_FIRST} = ? AND {_DISABLED} = ? AND {_NOTIFIED} = ?",
        "eh_disable": f"UPDATE {t} USING TTL ? SET {counts}, {_DISABLED} = ? WHERE {key} "
        f"IF {_FIRST} = ? AND {_DISABLED} = null",
        "eh_notified": f"UPDATE {t} USING TTL ? SET {counts}, {_DISABLED} = ?, {_NOTIFIED} = ? "
        f"WHERE {key} IF {_FIRST} = ? AND {_DISABLED} = ?",
        "eh_untrack": f"DELETE FROM {t} WHERE {key} IF {_FIRST} = ?",
        "eh_clear_failing": f"DELETE FROM {t} WHERE {key} IF {_DISABLED} = null",
        "eh_clear": f"DELETE FROM {t} WHERE {key} IF EXISTS",
        "eh_legacy": f"SELECT {cols} FROM {old} WHERE {s.COL_K} = ?",
        "eh_legacy_drop": f"DELETE FROM {old} WHERE {s.COL_K} = ? AND {key}",
        **_parking_queries(keyspace),
    }


def _parking_queries(keyspace: str) -> dict[str, str]:
    t = f"{keyspace}.{s.TABLE_ENDPOINT_HOLDS}"
    key = f"{s.COL_CALLER} = ? AND {s.COL_ORIGIN} = ?"
    return {
        "eh_park": f"INSERT INTO {t} ({s.COL_CALLER}, {s.COL_ORIGIN}, {s.COL_DUE_AT_MS}, "
        f"{s.COL_TRIGGER_ID}) VALUES (?, ?, ?, ?) USING TTL ?",
        "eh_parked": f"SELECT {s.COL_DUE_AT_MS}, {s.COL_TRIGGER_ID} FROM {t} WHERE {key} "
        f"AND {s.COL_DUE_AT_MS} >= ?",
        "eh_unpark": f"DELETE FROM {t} WHERE {key} AND {s.COL_DUE_AT_MS} = ? "
        f"AND {s.COL_TRIGGER_ID} = ?",
    }


def _health(row: dict[str, Any]) -> EndpointHealth:
    return EndpointHealth(row[s.COL_CALLER], row[s.COL_ORIGIN], row[_FIRST], row[_LAST],
                          row[_FAILURES] or 0, row[_ERROR], row[_DISABLED], row[_NOTIFIED])


def _applied(rows: list[dict[str, Any]]) -> bool:
    return bool(rows) and bool(rows[0][_APPLIED])


def _set(value: object) -> object:
    """A column's new value; None is left unset (a null written is a tombstone)."""
    return _UNSET if value is None else value


def _counts(h: EndpointHealth) -> list[Any]:
    return [h.first_failure_at_ms, h.last_failure_at_ms, h.failures, _set(h.last_error)]


class CassandraEndpointHealth:
    def __init__(self, cql: driver.Statements, *, ttl_s: int, page_size: int) -> None:
        self._cql = cql
        self.ttl_s = ttl_s
        self._page_size = page_size
        self._legacy_empty = False  # the 021 partition was read empty (by this process)

    @classmethod
    def of(cls, cql: driver.Statements, settings: EndpointHealthSettings
           ) -> CassandraEndpointHealth:
        """On the store's statements (``CassandraStore.statements``), with the settings'
        ``record_ttl_s`` and ``page_size``."""
        return cls(cql, ttl_s=settings.record_ttl_s, page_size=settings.page_size)

    async def endpoint_health(self, caller: str | None = None) -> list[EndpointHealth]:
        if caller is not None:
            return [_health(r) for r in await self._cql.run("eh_caller", [caller])]
        if not self._legacy_empty:
            await self._move_legacy()
        out: list[EndpointHealth] = []
        async for page in self._cql.pages("eh_all", [], self._page_size):
            out += (_health(r) for r in page)
        # A token range scan comes in token order: in (caller, origin) order for the caller.
        return sorted(out, key=lambda h: h.key)

    async def _move_legacy(self) -> None:
        moved = 0
        async for page in self._cql.pages("eh_legacy", [s.ENDPOINT_HEALTH_KEY], self._page_size):
            for r in page:
                h = _health(r)
                await self._cql.run("eh_first", [h.caller, h.origin, *_counts(h),
                                                 _set(h.disabled_at_ms), _set(h.notified_at_ms),
                                                 self.ttl_s])
                await self._cql.run("eh_legacy_drop", [s.ENDPOINT_HEALTH_KEY, h.caller, h.origin])
                moved += 1
        self._legacy_empty = moved == 0

    async def note_first_failure(self, h: EndpointHealth, max_per_caller: int
                                 ) -> EndpointHealth | None:
        origins = await self._origins(h.caller, max_per_caller)
        if h.origin not in origins and len(origins) >= max_per_caller:
            return None  # the caller's cap: not tracked
        rows = await self._cql.run("eh_first", [h.caller, h.origin, *_counts(h), _UNSET, _UNSET,
                                                self.ttl_s])
        if not _applied(rows):
            # Not applied: the row holds the record that was there (every column).
            return _health(rows[0])
        origins = await self._origins(h.caller, max_per_caller)
        if len(origins - {h.origin}) >= max_per_caller:  # another made one meanwhile
            await self._cql.run("eh_untrack", [h.caller, h.origin, h.first_failure_at_ms])
            return None
        return h

    async def _origins(self, caller: str, cap: int) -> set[str]:
        """The caller's tracked origins, ``cap + 1`` at most."""
        return {r[s.COL_ORIGIN] for r in await self._cql.run("eh_origins", [caller, cap + 1])}

    async def note_failures(self, h: EndpointHealth) -> bool:
        return _applied(await self._cql.run("eh_again", [
            self.ttl_s, *_counts(h), _set(h.disabled_at_ms), _set(h.notified_at_ms), h.caller,
            h.origin, h.first_failure_at_ms, h.disabled_at_ms, h.notified_at_ms]))

    async def mark_disabled(self, h: EndpointHealth, at_ms: int) -> bool:
        return _applied(await self._cql.run("eh_disable", [
            self.ttl_s, *_counts(h), at_ms, h.caller, h.origin, h.first_failure_at_ms]))

    async def mark_notified(self, h: EndpointHealth, at_ms: int) -> None:
        await self._cql.run("eh_notified", [self.ttl_s, *_counts(h), h.disabled_at_ms, at_ms,
                                            h.caller, h.origin, h.first_failure_at_ms,
                                            h.disabled_at_ms])

    async def clear_failing(self, caller: str, origin: str) -> bool:
        return _applied(await self._cql.run("eh_clear_failing", [caller, origin]))

    async def clear(self, caller: str, origin: str) -> EndpointHealth | None:
        rows = await self._cql.run("eh_one", [caller, origin])
        if not rows:
            return None
        await self._cql.run("eh_clear", [caller, origin])
        return _health(rows[0])

    # --- the index of parked triggers -------------------------------------------------------
    async def note_parked(self, caller: str, origin: str, parked: ParkedTrigger, ttl_s: int
                          ) -> None:
        await self._cql.run("eh_park", [caller, origin, parked.due_at_ms, parked.trigger_id, ttl_s])

    async def parked_since(self, caller: str, origin: str, since_ms: int
                           ) -> AsyncIterator[list[ParkedTrigger]]:
        async for page in self._cql.pages("eh_parked", [caller, origin, since_ms], self._page_size):
            yield [ParkedTrigger(r[s.COL_TRIGGER_ID], r[s.COL_DUE_AT_MS]) for r in page]

    async def forget_parked(self, caller: str, origin: str, parked: Sequence[ParkedTrigger]
                            ) -> None:
        await driver.write_in_batches(self._cql.run_unlogged, [
            ("eh_unpark", [caller, origin, h.due_at_ms, h.trigger_id]) for h in parked])
