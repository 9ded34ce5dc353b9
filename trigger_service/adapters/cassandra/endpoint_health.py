"""``EndpointHealthStore`` on Cassandra (``endpoint_health``, infra/cql/021), on the session of
``CassandraStore`` (its statements are prepared with the store's). One partition: the rows
are the origins failing now. Every write is an LWT (``core.ports.endpoint_health``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from trigger_service.adapters import schema as s
from trigger_service.core.endpoint_health import EndpointHealth

if TYPE_CHECKING:
    from trigger_service.adapters.cassandra.store import CassandraStore

Run = Callable[[str, Sequence[Any]], Awaitable[list[dict[str, Any]]]]
_FIRST, _LAST, _FAILURES, _ERROR, _DISABLED, _NOTIFIED = s.ENDPOINT_HEALTH_COLUMNS
_APPLIED = "[applied]"


def endpoint_health_queries(keyspace: str) -> dict[str, str]:
    """name → CQL text for the table of this module."""
    t = f"{keyspace}.{s.TABLE_ENDPOINT_HEALTH}"
    cols = ", ".join((s.COL_CALLER, s.COL_ORIGIN, *s.ENDPOINT_HEALTH_COLUMNS))
    key = f"{s.COL_K} = ? AND {s.COL_CALLER} = ? AND {s.COL_ORIGIN} = ?"
    return {
        "eh_all": f"SELECT {cols} FROM {t} WHERE {s.COL_K} = ?",
        "eh_caller": f"SELECT {cols} FROM {t} WHERE {s.COL_K} = ? AND {s.COL_CALLER} = ?",
        "eh_one": f"SELECT {cols} FROM {t} WHERE {key}",
        "eh_first": f"INSERT INTO {t} ({s.COL_K}, {s.COL_CALLER}, {s.COL_ORIGIN}, {_FIRST}, "
        f"{_LAST}, {_FAILURES}, {_ERROR}) VALUES (?, ?, ?, ?, ?, ?, ?) IF NOT EXISTS",
        "eh_again": f"UPDATE {t} SET {_LAST} = ?, {_FAILURES} = ?, {_ERROR} = ? WHERE {key} "
        f"IF {_FIRST} = ?",
        "eh_disable": f"UPDATE {t} SET {_DISABLED} = ? WHERE {key} "
        f"IF {_FIRST} = ? AND {_DISABLED} = null",
        "eh_notified": f"UPDATE {t} SET {_NOTIFIED} = ? WHERE {key} IF {_FIRST} = ?",
        "eh_clear_failing": f"DELETE FROM {t} WHERE {key} IF {_DISABLED} = null",
        "eh_clear": f"DELETE FROM {t} WHERE {key} IF EXISTS",
    }


def _health(row: dict[str, Any]) -> EndpointHealth:
    return EndpointHealth(row[s.COL_CALLER], row[s.COL_ORIGIN], row[_FIRST], row[_LAST],
                          row[_FAILURES] or 0, row[_ERROR], row[_DISABLED], row[_NOTIFIED])


def _applied(rows: list[dict[str, Any]]) -> bool:
    return bool(rows) and bool(rows[0][_APPLIED])


class CassandraEndpointHealth:
    def __init__(self, run: Run) -> None:
        self._run = run

    @classmethod
    def of(cls, store: CassandraStore) -> CassandraEndpointHealth:
        """On ``store``'s session (its statements are prepared there)."""
        return cls(store._run)

    async def endpoint_health(self, caller: str | None = None) -> list[EndpointHealth]:
        rows = (await self._run("eh_all", [s.ENDPOINT_HEALTH_KEY]) if caller is None
                else await self._run("eh_caller", [s.ENDPOINT_HEALTH_KEY, caller]))
        return [_health(r) for r in rows]

    def _key(self, caller: str, origin: str) -> list[Any]:
        return [s.ENDPOINT_HEALTH_KEY, caller, origin]

    async def note_first_failure(self, h: EndpointHealth) -> EndpointHealth:
        rows = await self._run("eh_first", [*self._key(h.caller, h.origin),
                                            h.first_failure_at_ms, h.last_failure_at_ms,
                                            h.failures, h.last_error])
        if _applied(rows):
            return h
        # Not applied: the row holds the record that was there (every column).
        return _health(rows[0])

    async def note_failures(self, h: EndpointHealth) -> bool:
        return _applied(await self._run("eh_again", [
            h.last_failure_at_ms, h.failures, h.last_error, *self._key(h.caller, h.origin),
            h.first_failure_at_ms]))

    async def mark_disabled(self, h: EndpointHealth, at_ms: int) -> bool:
        return _applied(await self._run("eh_disable", [
            at_ms, *self._key(h.caller, h.origin), h.first_failure_at_ms]))

    async def mark_notified(self, h: EndpointHealth, at_ms: int) -> None:
        await self._run("eh_notified", [at_ms, *self._key(h.caller, h.origin),
                                        h.first_failure_at_ms])

    async def clear_failing(self, caller: str, origin: str) -> bool:
        return _applied(await self._run("eh_clear_failing", self._key(caller, origin)))

    async def clear(self, caller: str, origin: str) -> EndpointHealth | None:
        rows = await self._run("eh_one", self._key(caller, origin))
        if not rows:
            return None
        await self._run("eh_clear", self._key(caller, origin))
        return _health(rows[0])
