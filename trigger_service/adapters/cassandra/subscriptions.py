"""``SubscriptionStore`` on Cassandra (``event_subscriptions``, ``event_failures``,
infra/cql/032), on the store's statements. A caller's subscriptions are one partition of a
handful of rows (the API's cap), so every write reads it first: the count for the cap and
the ``created_at_ms`` a replacement keeps. Errors are the statements' ``StoreError``."""

from __future__ import annotations

from typing import Any

from trigger_service.adapters import schema as s
from trigger_service.adapters.cassandra import driver
from trigger_service.core.caller_events import (
    EventType,
    FailedEvent,
    Subscription,
    parse_event_types,
)

# The columns by name (``schema``): each subscription's, each failed event's.
_URL, _EVENTS, _CREATED_AT_MS, _UPDATED_AT_MS = s.SUBSCRIPTION_COLUMNS
(_SUBSCRIPTION, _FAILED_AT_MS, _EVENT_ID, _EVENT_TYPE, _EVENT_AT_MS, _ATTEMPTS, _LAST_ERROR,
 _DATA) = s.EVENT_FAILURE_COLUMNS


def subscription_queries(keyspace: str) -> dict[str, str]:
    """name → CQL text for the tables of this module."""
    subs = f"{keyspace}.{s.TABLE_EVENT_SUBSCRIPTIONS}"
    failed = f"{keyspace}.{s.TABLE_EVENT_FAILURES}"
    cols = ", ".join((s.COL_NAME, *s.SUBSCRIPTION_COLUMNS))
    fcols = ", ".join(s.EVENT_FAILURE_COLUMNS[1:])
    return {
        "subscriptions_of": f"SELECT {cols} FROM {subs} WHERE {s.COL_CALLER} = ?",
        "subscription_put": f"INSERT INTO {subs} ({s.COL_CALLER}, {cols}) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        "subscription_delete": f"DELETE FROM {subs} WHERE {s.COL_CALLER} = ? "
        f"AND {s.COL_NAME} = ?",
        "event_failures_delete": f"DELETE FROM {failed} WHERE {s.COL_CALLER} = ? "
        f"AND {_SUBSCRIPTION} = ?",
        "event_failure_put": f"INSERT INTO {failed} ({s.COL_CALLER}, {_SUBSCRIPTION}, "
        f"{fcols}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) USING TTL ?",
        "event_failures_of": f"SELECT {fcols} FROM {failed} WHERE {s.COL_CALLER} = ? "
        f"AND {_SUBSCRIPTION} = ? LIMIT ?",
    }


class CassandraSubscriptions:
    def __init__(self, cql: driver.Statements) -> None:
        """On the store's statements (``CassandraStore.statements``)."""
        self._cql = cql

    async def subscriptions(self, caller: str) -> list[Subscription]:
        rows = await self._cql.run("subscriptions_of", [caller])
        return [_subscription(caller, r) for r in rows]

    async def put_subscription(self, sub: Subscription, max_count: int
                               ) -> tuple[Subscription, bool] | None:
        there = {x.name: x for x in await self.subscriptions(sub.caller)}
        old = there.get(sub.name)
        if old is None and len(there) >= max_count:
            return None
        created_ms = old.created_at_ms if old is not None else sub.created_at_ms
        await self._cql.run("subscription_put", [
            sub.caller, sub.name, sub.url, {e.value for e in sub.events}, created_ms,
            sub.updated_at_ms])
        return Subscription(sub.caller, sub.name, sub.url, sub.events, created_ms,
                            sub.updated_at_ms), old is None

    async def delete_subscription(self, caller: str, name: str) -> bool:
        there = any(x.name == name for x in await self.subscriptions(caller))
        await self._cql.run("subscription_delete", [caller, name])
        await self._cql.run("event_failures_delete", [caller, name])
        return there

    async def put_failed_event(self, failed: FailedEvent, ttl_s: int) -> None:
        await self._cql.run("event_failure_put", [
            failed.caller, failed.subscription, failed.failed_at_ms, failed.event_id,
            failed.type.value, failed.at_ms, failed.attempts, failed.last_error,
            failed.data_json, ttl_s])

    async def failed_events(self, caller: str, name: str, limit: int) -> list[FailedEvent]:
        rows = await self._cql.run("event_failures_of", [caller, name, limit])
        return [FailedEvent(caller, name, r[_EVENT_ID], EventType(r[_EVENT_TYPE]),
                            r[_EVENT_AT_MS], r[_FAILED_AT_MS], r[_ATTEMPTS] or 0,
                            r[_LAST_ERROR], r[_DATA] or "{}") for r in rows]


def _subscription(caller: str, row: dict[str, Any]) -> Subscription:
    # A type a later release added and this one does not know is left out, not fatal.
    events = parse_event_types(e for e in (row[_EVENTS] or ()) if e in _KNOWN)
    assert not isinstance(events, str)
    return Subscription(caller, row[s.COL_NAME], row[_URL], events, row[_CREATED_AT_MS],
                        row[_UPDATED_AT_MS])


_KNOWN = frozenset(t.value for t in EventType)
