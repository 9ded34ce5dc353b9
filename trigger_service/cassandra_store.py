"""``TriggerStore`` on Apache Cassandra (cassandra-driver), with an asyncio face.

The driver calls back on its own I/O thread; ``_aio`` hands each result to the event loop.
Every driver error is translated here into ``StoreError`` (``raise ... from``).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import structlog
from cassandra import ConsistencyLevel, DriverException, OperationTimedOut
from cassandra.cluster import (
    EXEC_PROFILE_DEFAULT,
    Cluster,
    ExecutionProfile,
    ResponseFuture,
    Session,
)
from cassandra.policies import RoundRobinPolicy
from cassandra.query import PreparedStatement, dict_factory

from trigger_service import schema
from trigger_service.errors import StoreError
from trigger_service.model import Path as TriggerPath
from trigger_service.model import Status, Trigger, bucket_minute, fire_month, next_month
from trigger_service.ports import BucketEntry, IdempotencyRecord, ListPage
from trigger_service.settings import CassandraSettings

log = structlog.get_logger(__name__)

_COLUMNS = (
    "caller", "callback_url", "payload", "fire_at_ms", "created_at_ms", "shard", "path",
    "status", "attempts", "last_error", "fired_at_ms", "claim_id", "claimed_at_ms",
    "next_attempt_at_ms", "idem_key",
)
_MUTABLE = (
    "status", "attempts", "last_error", "fired_at_ms", "claim_id", "claimed_at_ms",
    "next_attempt_at_ms",
)


async def _aio(fut: ResponseFuture) -> list[dict[str, Any]]:
    """Await a driver future from asyncio (its callbacks run on the driver's I/O thread)."""
    rows, _ = await _aio_page(fut)
    return rows


def _aio_page(
    fut: ResponseFuture,
) -> asyncio.Future[tuple[list[dict[str, Any]], bytes | None]]:
    """Like ``_aio`` but for one page: (rows, paging state of the next page or None)."""
    loop = asyncio.get_running_loop()
    result: asyncio.Future[tuple[list[dict[str, Any]], bytes | None]] = loop.create_future()

    def ok(rows: list[dict[str, Any]]) -> None:
        state = fut._paging_state if fut.has_more_pages else None
        loop.call_soon_threadsafe(_settle_page, result, (rows or [], state), None)

    def err(exc: BaseException) -> None:
        loop.call_soon_threadsafe(_settle_page, result, None, exc)

    fut.add_callbacks(ok, err)
    return result


def _settle_page(
    fut: asyncio.Future[tuple[list[dict[str, Any]], bytes | None]],
    value: tuple[list[dict[str, Any]], bytes | None] | None,
    exc: BaseException | None,
) -> None:
    if fut.cancelled():
        return
    if exc is not None:
        fut.set_exception(exc)
    else:
        assert value is not None
        fut.set_result(value)


def _row_values(t: Trigger) -> dict[str, Any]:
    return {
        "caller": t.caller, "callback_url": t.callback_url, "payload": t.payload_json,
        "fire_at_ms": t.fire_at_ms, "created_at_ms": t.created_at_ms, "shard": t.shard,
        "path": t.path.value, "status": t.status.value, "attempts": t.attempts,
        "last_error": t.last_error, "fired_at_ms": t.fired_at_ms, "claim_id": t.claim_id,
        "claimed_at_ms": t.claimed_at_ms, "next_attempt_at_ms": t.next_attempt_at_ms,
        "idem_key": t.idem_key,
    }


def _trigger_from_row(trigger_id: str, row: dict[str, Any]) -> Trigger | None:
    if row.get("status") is None:  # only a tombstone or a partial row is left
        return None
    return Trigger(
        trigger_id=trigger_id,
        caller=row["caller"],
        callback_url=row["callback_url"],
        payload_json=row["payload"],
        fire_at_ms=row["fire_at_ms"],
        created_at_ms=row["created_at_ms"],
        shard=row["shard"],
        path=TriggerPath(row["path"]),
        status=Status(row["status"]),
        attempts=row["attempts"] or 0,
        last_error=row["last_error"],
        fired_at_ms=row["fired_at_ms"],
        claim_id=row["claim_id"],
        claimed_at_ms=row["claimed_at_ms"],
        next_attempt_at_ms=row["next_attempt_at_ms"],
        idem_key=row["idem_key"],
    )


class CassandraStore:
    """The trigger store. Create with :meth:`connect`; close with :meth:`close`."""

    def __init__(self, cluster: Cluster, session: Session, settings: CassandraSettings) -> None:
        self._cluster = cluster
        self._session = session
        self._settings = settings
        self._prepared: dict[str, PreparedStatement] = {}

    # --- lifecycle -------------------------------------------------------------------
    @classmethod
    async def connect(cls, settings: CassandraSettings, *, migrate: bool = True) -> CassandraStore:
        """Connect, apply the schema (idempotent) and prepare statements."""
        return await asyncio.to_thread(cls._connect_sync, settings, migrate)

    @classmethod
    def _connect_sync(cls, settings: CassandraSettings, migrate: bool) -> CassandraStore:
        try:
            profile = ExecutionProfile(
                load_balancing_policy=RoundRobinPolicy(),
                request_timeout=settings.request_timeout_s,
                consistency_level=ConsistencyLevel.LOCAL_QUORUM,
                serial_consistency_level=ConsistencyLevel.SERIAL,
                row_factory=dict_factory,
            )
            cluster = Cluster(
                contact_points=list(settings.hosts),
                port=settings.port,
                protocol_version=5,
                connect_timeout=settings.request_timeout_s,
                execution_profiles={EXEC_PROFILE_DEFAULT: profile},
            )
            session = cluster.connect()
            if migrate:
                apply_schema(cluster, session, settings)
        except DriverException as e:
            raise StoreError(f"cassandra connect failed: {e}") from e
        except Exception as e:  # NoHostAvailable is not a DriverException subclass
            raise StoreError(f"cassandra connect failed: {e}") from e
        store = cls(cluster, session, settings)
        store._prepare_all()
        return store

    async def close(self) -> None:
        await asyncio.to_thread(self._cluster.shutdown)

    def _prepare_all(self) -> None:
        # Fully qualified names: prepared statements under `USE keyspace` are ambiguous.
        ks = self._settings.keyspace
        t, buckets, by_caller, idem, cursors = (
            f"{ks}.{name}" for name in (schema.TABLE_TRIGGERS, schema.TABLE_BUCKETS,
                                        schema.TABLE_BY_CALLER, schema.TABLE_IDEMPOTENCY,
                                        schema.TABLE_SWEEP_CURSORS))
        cols = ", ".join(f"{c} = ?" for c in _COLUMNS)
        mut = ", ".join(f"{c} = ?" for c in _MUTABLE)
        cond = "IF status = ? AND claim_id = ? AND attempts = ?"
        q = {
            "create": f"UPDATE {t} USING TIMESTAMP ? SET {cols} WHERE trigger_id = ?",
            "bucket": f"INSERT INTO {buckets} (bucket_minute, shard, fire_at_ms, "
            "trigger_id, path) VALUES (?, ?, ?, ?, ?) USING TTL ? AND TIMESTAMP ?",
            "by_caller": f"INSERT INTO {by_caller} (caller, fire_month, fire_at_ms, "
            "trigger_id) VALUES (?, ?, ?, ?) USING TTL ? AND TIMESTAMP ?",
            "get": f"SELECT {', '.join(_COLUMNS)} FROM {t} WHERE trigger_id = ?",
            "cas": f"UPDATE {t} SET {mut} WHERE trigger_id = ? {cond}",
            "cas_ttl": f"UPDATE {t} USING TTL ? SET {cols} WHERE trigger_id = ? {cond}",
            "list": f"SELECT fire_at_ms, trigger_id FROM {by_caller} "
            "WHERE caller = ? AND fire_month = ? AND (fire_at_ms, trigger_id) > (?, ?) LIMIT ?",
            "idem_put": f"INSERT INTO {idem} (caller, idem_key, request_hash, "
            "trigger_id, request, response, created_at_ms) VALUES (?, ?, ?, ?, ?, ?, ?) "
            "IF NOT EXISTS USING TTL ?",
            "ping": "SELECT release_version FROM system.local",
            "bucket_scan": f"SELECT fire_at_ms, trigger_id, path FROM {buckets} "
            "WHERE bucket_minute = ? AND shard = ? AND fire_at_ms > ? AND fire_at_ms <= ?",
            "cursor_get": f"SELECT shard, promoted_until_ms FROM {cursors} WHERE sweep_group = ?",
            "cursor_put": f"INSERT INTO {cursors} (sweep_group, shard, promoted_until_ms, owner, "
            "fence) VALUES (?, ?, ?, ?, ?)",
        }
        try:
            for name, text in q.items():
                self._prepared[name] = self._session.prepare(text)
        except DriverException as e:
            raise StoreError(f"cassandra prepare failed: {e}") from e

    async def _run(self, name: str, params: Sequence[Any]) -> list[dict[str, Any]]:
        try:
            return await _aio(self._session.execute_async(self._prepared[name], params))
        except OperationTimedOut as e:
            raise StoreError(f"cassandra {name} timed out: {e}") from e
        except DriverException as e:
            raise StoreError(f"cassandra {name} failed: {e}") from e
        except Exception as e:  # NoHostAvailable and friends
            raise StoreError(f"cassandra {name} failed: {e}") from e

    # --- TriggerStore ----------------------------------------------------------------
    async def create(self, trigger: Trigger, index_ttl_s: int) -> None:
        # Index entries first, the row last: a crash in between leaves an index entry that
        # points nowhere (ignored by every reader), never a row that no index can find.
        # Cheaper than a logged batch (no batchlog round) with the same guarantee.
        ts_us = trigger.created_at_ms * 1000
        await asyncio.gather(
            self._run("bucket", [
                bucket_minute(trigger.fire_at_ms), trigger.shard, trigger.fire_at_ms,
                trigger.trigger_id, trigger.path.value, index_ttl_s, ts_us,
            ]),
            self._run("by_caller", [
                trigger.caller, fire_month(trigger.fire_at_ms), trigger.fire_at_ms,
                trigger.trigger_id, index_ttl_s, ts_us,
            ]),
        )
        values = _row_values(trigger)
        await self._run("create", [ts_us, *(values[c] for c in _COLUMNS), trigger.trigger_id])

    async def get(self, trigger_id: str) -> Trigger | None:
        rows = await self._run("get", [trigger_id])
        return _trigger_from_row(trigger_id, rows[0]) if rows else None

    async def get_many(self, trigger_ids: Sequence[str]) -> list[Trigger | None]:
        return list(await asyncio.gather(*(self.get(t) for t in trigger_ids)))

    async def compare_and_set(
        self, old: Trigger, new: Trigger, *, ttl_s: int | None = None
    ) -> bool:
        cond = [old.status.value, old.claim_id, old.attempts]
        values = _row_values(new)
        if ttl_s is None:
            params = [*(values[c] for c in _MUTABLE), new.trigger_id, *cond]
            rows = await self._run("cas", params)
        else:
            params = [ttl_s, *(values[c] for c in _COLUMNS), new.trigger_id, *cond]
            rows = await self._run("cas_ttl", params)
        return bool(rows and rows[0].get("[applied]"))

    async def list_by_caller(
        self,
        caller: str,
        *,
        start: tuple[int, int, str],
        last_month: int,
        limit: int,
        status: Status | None,
    ) -> ListPage:
        month, after_ms, after_id = start
        found: list[Trigger] = []
        # Each round reads at most `limit` index entries from one month partition, then the
        # rows themselves; filtering by status happens on the rows (the index has no status).
        reads = 0
        while month <= last_month and len(found) < limit and reads < 50:
            reads += 1
            want = limit - len(found)
            rows = await self._run("list", [caller, month, after_ms, after_id, want])
            if not rows:
                month, after_ms, after_id = next_month(month), -(2**63), ""
                continue
            triggers = await self.get_many([r["trigger_id"] for r in rows])
            for r, t in zip(rows, triggers, strict=True):
                after_ms, after_id = r["fire_at_ms"], r["trigger_id"]
                if t is not None and (status is None or t.status is status):
                    found.append(t)
            if len(rows) < want:
                month, after_ms, after_id = next_month(month), -(2**63), ""
        more = month <= last_month
        return ListPage(found, (month, after_ms, after_id) if more else None)

    async def idem_put_if_absent(
        self, record: IdempotencyRecord, ttl_s: int
    ) -> tuple[bool, IdempotencyRecord | None]:
        rows = await self._run("idem_put", [
            record.caller, record.idem_key, record.request_hash, record.trigger_id,
            record.request_json, record.response_json, record.created_at_ms, ttl_s,
        ])
        row = rows[0] if rows else {}
        if row.get("[applied]"):
            return True, None
        return False, IdempotencyRecord(
            caller=record.caller, idem_key=record.idem_key, request_hash=row["request_hash"],
            trigger_id=row["trigger_id"], request_json=row["request"],
            response_json=row["response"], created_at_ms=row["created_at_ms"],
        )

    async def ping(self) -> None:
        await self._run("ping", [])

    # --- used by the sweeper and the reconciler ---------------------------------------
    async def bucket_entries(
        self, shard: int, after_ms: int, until_ms: int, *, page_size: int = 2000
    ) -> list[BucketEntry]:
        """Every index entry of ``shard`` with ``after_ms < fire_at_ms <= until_ms``, in fire
        time order: one query per minute partition, paged. Raises ``StoreError``."""
        out: list[BucketEntry] = []
        for minute in range(bucket_minute(after_ms + 1), bucket_minute(until_ms) + 1):
            state: bytes | None = None
            while True:
                stmt = self._prepared["bucket_scan"].bind([minute, shard, after_ms, until_ms])
                stmt.fetch_size = page_size
                try:
                    rows, state = await _aio_page(
                        self._session.execute_async(stmt, paging_state=state))
                except Exception as e:
                    raise StoreError(f"cassandra bucket scan failed: {e}") from e
                out.extend(BucketEntry(r["trigger_id"], r["fire_at_ms"], shard,
                                       TriggerPath(r["path"])) for r in rows)
                if state is None:
                    break
        return out

    async def sweep_cursors(self, group: str) -> dict[int, int]:
        """shard → promoted_until_ms for every shard of ``group`` that has one."""
        rows = await self._run("cursor_get", [group])
        return {r["shard"]: r["promoted_until_ms"] for r in rows}

    async def save_sweep_cursor(
        self, group: str, shard: int, promoted_until_ms: int, owner: str, fence: int
    ) -> None:
        await self._run("cursor_put", [group, shard, promoted_until_ms, owner, fence])



def apply_schema(cluster: Cluster, session: Session, settings: CassandraSettings) -> list[int]:
    """Create the keyspace and apply every ``infra/cql/NNN_*.cql`` not applied yet.

    Each file's statements are ``IF NOT EXISTS`` so a process that died half-way through a
    file (or two processes starting together) simply re-applies it. Returns applied versions.
    """
    ks = settings.keyspace
    session.execute(
        f"CREATE KEYSPACE IF NOT EXISTS {ks} WITH replication = "
        f"{{'class': 'SimpleStrategy', 'replication_factor': {settings.replication_factor}}}"
    )
    session.execute(
        f"CREATE TABLE IF NOT EXISTS {ks}.{schema.TABLE_MIGRATIONS} "
        "(version int PRIMARY KEY, name text, applied_at_ms bigint)"
    )
    done = {r["version"] for r in session.execute(
        f"SELECT version FROM {ks}.{schema.TABLE_MIGRATIONS}")}
    applied: list[int] = []
    for path in sorted(Path(settings.schema_dir).glob("[0-9][0-9][0-9]_*.cql")):
        version = int(path.name[:3])
        if version in done:
            continue
        # DDL in the CQL files is unqualified: run it in a session bound to the keyspace.
        ddl = cluster.connect(ks)
        try:
            for stmt in _statements(path.read_text()):
                ddl.execute(stmt)
        finally:
            ddl.shutdown()
        session.execute(
            f"INSERT INTO {ks}.{schema.TABLE_MIGRATIONS} (version, name, applied_at_ms) "
            "VALUES (%s, %s, %s)",
            (version, path.name, int(time.time() * 1000)),
        )
        applied.append(version)
        log.info("schema_applied", version=version, file=path.name)
    return applied


def _statements(text: str) -> list[str]:
    lines = [ln for ln in text.splitlines() if not ln.strip().startswith("--")]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]


def encode_request(trigger: Trigger) -> str:
    """The creation fields of a trigger, for the idempotency record."""
    return json.dumps({
        "callback_url": trigger.callback_url, "payload": trigger.payload_json,
        "fire_at_ms": trigger.fire_at_ms, "created_at_ms": trigger.created_at_ms,
        "shard": trigger.shard, "path": trigger.path.value,
    })


def decode_request(trigger_id: str, caller: str, idem_key: str, text: str) -> Trigger:
    d = json.loads(text)
    return Trigger(
        trigger_id=trigger_id, caller=caller, callback_url=d["callback_url"],
        payload_json=d["payload"], fire_at_ms=d["fire_at_ms"],
        created_at_ms=d["created_at_ms"], shard=d["shard"], path=TriggerPath(d["path"]),
        idem_key=idem_key,
    )
