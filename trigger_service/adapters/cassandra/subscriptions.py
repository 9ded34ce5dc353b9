"""``SubscriptionStore`` on Cassandra (``event_subscriptions``, ``event_failures``,
infra/cql/032, 034), on the store's statements. A caller's subscriptions are one partition
of a handful of rows (the API's cap), so every put reads it first: the count for the cap and
the ``created_at_ms`` a replacement keeps.

The cap holds under concurrency: a creation is one conditional batch, its row and the
partition's static ``creations`` moved on from the value read with the rows counted, so of
creations counted against the same rows one applies and the others count again. A
replacement (``IF EXISTS``) and a delete (``IF EXISTS``) add no row and leave ``creations``;
all three are LWTs, so none overtakes another. Errors are the statements' ``StoreError``."""

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
from trigger_service.core.errors import StoreError

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
    creations = s.COL_SUBSCRIPTION_CREATIONS
    return {
        "subscriptions_of": f"SELECT {cols}, {creations} FROM {subs} WHERE {s.COL_CALLER} = ?",
        "subscription_create": f"INSERT INTO {subs} ({s.COL_CALLER}, {cols}) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        "subscription_creations": f"UPDATE {subs} SET {creations} = ? "
        f"WHERE {s.COL_CALLER} = ? IF {creations} = ?",
        "subscription_replace": f"UPDATE {subs} SET {_URL} = ?, {_EVENTS} = ?, "
        f"{_UPDATED_AT_MS} = ? WHERE {s.COL_CALLER} = ? AND {s.COL_NAME} = ? IF EXISTS",
        "subscription_delete": f"DELETE FROM {subs} WHERE {s.COL_CALLER} = ? "
        f"AND {s.COL_NAME} = ? IF EXISTS",
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
        # A partition with its static column only answers one row without a name.
        return [_subscription(caller, r) for r in rows if r[s.COL_NAME] is not None]

    async def put_subscription(self, sub: Subscription, max_count: int
                               ) -> tuple[Subscription, bool] | None:
        # A round is lost only to a creation that applied or a delete of this name: past
        # ``max_count`` creations the count refuses, so this many rounds end unless deletes
        # keep coming.
        for _ in range(max_count + 4):
            rows = await self._cql.run("subscriptions_of", [sub.caller])
            there = {r[s.COL_NAME]: r for r in rows if r[s.COL_NAME] is not None}
            old = there.get(sub.name)
            if old is not None:
                if await self._applied("subscription_replace", [
                        sub.url, _event_values(sub), sub.updated_at_ms, sub.caller, sub.name]):
                    return Subscription(sub.caller, sub.name, sub.url, sub.events,
                                        old[_CREATED_AT_MS], sub.updated_at_ms), False
                continue  # deleted since: counted again
            if len(there) >= max_count:
                return None
            if await self._create(sub, rows[0][s.COL_SUBSCRIPTION_CREATIONS] if rows else None):
                return sub, True
        raise StoreError(f"subscription {sub.name!r}: the caller's subscriptions keep "
                         "changing; retry")

    async def _create(self, sub: Subscription, creations: int | None) -> bool:
        """Write ``sub`` as new if no creation applied since ``creations`` was read."""
        rows = await self._cql.run_conditional([
            ("subscription_creations", [(creations or 0) + 1, sub.caller, creations]),
            ("subscription_create", [sub.caller, sub.name, sub.url, _event_values(sub),
                                     sub.created_at_ms, sub.updated_at_ms])])
        return _applied(rows)

    async def _applied(self, name: str, params: list[Any]) -> bool:
        return _applied(await self._cql.run(name, params))

    async def delete_subscription(self, caller: str, name: str) -> bool:
        there = await self._applied("subscription_delete", [caller, name])
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


def _applied(rows: list[dict[str, Any]]) -> bool:
    if not rows:
        raise StoreError("cassandra: a conditional write without an answer")
    return bool(rows[0].get(s.LWT_APPLIED))


def _event_values(sub: Subscription) -> set[str]:
    return {e.value for e in sub.events}


def _subscription(caller: str, row: dict[str, Any]) -> Subscription:
    # A type a later release added and this one does not know is left out, not fatal.
    events = parse_event_types(e for e in (row[_EVENTS] or ()) if e in _KNOWN)
    assert not isinstance(events, str)
    return Subscription(caller, row[s.COL_NAME], row[_URL], events, row[_CREATED_AT_MS],
                        row[_UPDATED_AT_MS])


_KNOWN = frozenset(t.value for t in EventType)
