"""``python -m trigger_service.migrate``: create the keyspace and apply the pending
``infra/cql/NNN_*.cql`` files. The one place the schema changes: ``make migrate``, ``make up``
(through ``infra/app.sh``) and the test suite run it; the service's processes only check that
the schema is current (:func:`check_applied`) and refuse to start otherwise.

One migrator at a time: the files are applied under a lock row (``schema_lock``, taken with
an LWT and a TTL), because concurrent DDL on a multi-node cluster can leave nodes disagreeing
about a table. Only the keyspace and the lock table themselves are created before the lock
(``IF NOT EXISTS``, and identical in every run).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import structlog
from cassandra.cluster import Cluster, Session

from trigger_service.adapters import schema
from trigger_service.adapters.cassandra import driver
from trigger_service.config.stores import CassandraSettings
from trigger_service.core.errors import StoreError, TriggerError

log = structlog.get_logger(__name__)

LOCK_TTL_S = 300
LOCK_WAIT_S = 120.0
_LOCK_POLL_S = 0.5


def schema_files(settings: CassandraSettings) -> dict[int, Path]:
    """version → file, for every ``NNN_*.cql`` in the schema folder."""
    return {int(p.name[:3]): p
            for p in sorted(Path(settings.schema_dir).glob("[0-9][0-9][0-9]_*.cql"))}


def applied_versions(session: Session, settings: CassandraSettings) -> set[int]:
    rows = session.execute(
        f"SELECT {schema.COL_VERSION} FROM {settings.keyspace}.{schema.TABLE_MIGRATIONS}")
    return {r[schema.COL_VERSION] for r in rows}


def check_applied(session: Session, settings: CassandraSettings) -> None:
    """Raise ``StoreError`` unless every schema file has been applied (blocking)."""
    try:
        done = applied_versions(session, settings)
    except Exception as e:
        raise StoreError(f"cassandra schema not found ({e}); run 'make migrate'") from e
    missing = sorted(set(schema_files(settings)) - done)
    if missing:
        raise StoreError(f"cassandra schema versions {missing} not applied; run 'make migrate'")


def apply_schema(cluster: Cluster, session: Session, settings: CassandraSettings,
                 now_ms: int) -> list[int]:
    """Create the keyspace and apply every schema file not applied yet; the versions applied.

    Each file's statements are ``IF NOT EXISTS`` so a run that died half-way through a file
    (or two runs together) simply re-applies it.
    """
    ks = settings.keyspace
    if _up_to_date(session, settings):
        return []  # the common case (every process start runs this): no DDL, no lock
    # An existing keyspace keeps its replication (change it with ALTER KEYSPACE and a repair).
    session.execute(
        f"CREATE KEYSPACE IF NOT EXISTS {ks} WITH replication = "
        f"{{'class': 'NetworkTopologyStrategy', "
        f"'{settings.local_dc}': {settings.replication_factor}}}"
    )
    session.execute(
        f"CREATE TABLE IF NOT EXISTS {ks}.{schema.TABLE_SCHEMA_LOCK} ({schema.COL_NAME} text "
        f"PRIMARY KEY, {schema.COL_LOCK_OWNER} text)"
    )
    with schema_lock(session, ks):
        session.execute(
            f"CREATE TABLE IF NOT EXISTS {ks}.{schema.TABLE_MIGRATIONS} ({schema.COL_VERSION} "
            f"int PRIMARY KEY, {schema.COL_NAME} text, {schema.COL_APPLIED_AT_MS} bigint)"
        )
        return _apply_pending(cluster, session, settings, now_ms)


def _up_to_date(session: Session, settings: CassandraSettings) -> bool:
    try:
        done = applied_versions(session, settings)
    except Exception:
        return False  # no keyspace or no migrations table yet
    return set(schema_files(settings)) <= done


def _apply_pending(cluster: Cluster, session: Session, settings: CassandraSettings,
                   now_ms: int) -> list[int]:
    ks = settings.keyspace
    done = applied_versions(session, settings)
    applied: list[int] = []
    for version, path in schema_files(settings).items():
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
            f"INSERT INTO {ks}.{schema.TABLE_MIGRATIONS} ({schema.COL_VERSION}, "
            f"{schema.COL_NAME}, {schema.COL_APPLIED_AT_MS}) VALUES (%s, %s, %s)",
            (version, path.name, now_ms),
        )
        applied.append(version)
        log.info("schema_applied", version=version, file=path.name)
    return applied


@contextmanager
def schema_lock(session: Session, keyspace: str, *, wait_s: float = LOCK_WAIT_S,
                ttl_s: int = LOCK_TTL_S) -> Iterator[str]:
    """Hold the migration lock of ``keyspace`` for the ``with`` block (blocking); yields the
    owner id. Waits up to ``wait_s`` for another holder; raises ``StoreError`` after that."""
    owner = uuid.uuid4().hex
    table = f"{keyspace}.{schema.TABLE_SCHEMA_LOCK}"
    take = (f"INSERT INTO {table} ({schema.COL_NAME}, {schema.COL_LOCK_OWNER}) "
            f"VALUES (%s, %s) IF NOT EXISTS USING TTL {int(ttl_s)}")
    deadline = time.monotonic() + wait_s
    while True:
        row = session.execute(take, (schema.SCHEMA_LOCK_NAME, owner)).one()
        if row["[applied]"]:
            break
        if time.monotonic() >= deadline:
            raise StoreError(f"schema lock held by {row.get(schema.COL_LOCK_OWNER)} for more "
                             f"than {wait_s:.0f} s (it expires {ttl_s} s after it was taken)")
        log.info("schema_lock_busy", holder=row.get(schema.COL_LOCK_OWNER))
        time.sleep(_LOCK_POLL_S)
    try:
        yield owner
    finally:
        session.execute(
            f"DELETE FROM {table} WHERE {schema.COL_NAME} = %s IF {schema.COL_LOCK_OWNER} = %s",
            (schema.SCHEMA_LOCK_NAME, owner))


def migrate(settings: CassandraSettings, now_ms: int) -> list[int]:
    """Connect, apply what is pending, disconnect (blocking). Raises ``StoreError``."""
    cluster, session = driver.connect(settings)
    try:
        return apply_schema(cluster, session, settings, now_ms)
    except TriggerError:
        raise
    except Exception as e:
        raise StoreError(f"cassandra migration failed: {e}") from e
    finally:
        cluster.shutdown()


def _statements(text: str) -> list[str]:
    lines = [ln for ln in text.splitlines() if not ln.strip().startswith("--")]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]
