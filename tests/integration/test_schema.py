"""The schema as a fresh deployment gets it, on the real Cassandra."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.keys import fixture_cipher
from trigger_service.adapters.cassandra import driver
from trigger_service.adapters.cassandra.migrate import migrate, schema_files, schema_lock
from trigger_service.adapters.cassandra.store import CassandraStore
from trigger_service.config.stores import CassandraSettings
from trigger_service.core.errors import StoreError
from trigger_service.core.time.clock import SystemClock

pytestmark = pytest.mark.integration


def test_a_new_keyspace_is_network_topology_replicated_and_fully_migrated() -> None:
    settings = CassandraSettings(keyspace="schema_" + uuid.uuid4().hex[:12])
    with pytest.raises(StoreError, match="make migrate"):
        # Processes refuse a schema that is behind.
        CassandraStore.open_sync(settings, fixture_cipher())
    applied = migrate(settings, SystemClock().now_ms())
    assert applied == sorted(schema_files(settings))
    assert migrate(settings, SystemClock().now_ms()) == []  # idempotent
    cluster, session = driver.connect(settings)
    try:
        row = session.execute(
            "SELECT replication FROM system_schema.keyspaces WHERE keyspace_name = %s",
            (settings.keyspace,)).one()
        replication = dict(row["replication"])
        assert replication["class"].endswith("NetworkTopologyStrategy")
        assert replication[settings.local_dc] == str(settings.replication_factor)
        CassandraStore.open_sync(settings, fixture_cipher()).close_sync()  # now it starts
    finally:
        session.execute(f"DROP KEYSPACE IF EXISTS {settings.keyspace}")
        cluster.shutdown()


def test_concurrent_migrations_apply_each_file_once() -> None:
    """Several migrators started together (several hosts deploying at once): the lock lets one
    apply the files; the others find them applied."""
    settings = CassandraSettings(keyspace="schema_" + uuid.uuid4().hex[:12])
    try:
        with ThreadPoolExecutor(3) as pool:
            results = list(pool.map(lambda _: migrate(settings, SystemClock().now_ms()),
                                    range(3)))
        every = sorted(v for r in results for v in r)
        assert every == sorted(schema_files(settings))  # each version applied exactly once
    finally:
        _drop(settings)


def test_the_schema_lock_waits_for_its_holder_and_gives_up_in_time() -> None:
    settings = CassandraSettings(keyspace="schema_" + uuid.uuid4().hex[:12])
    migrate(settings, SystemClock().now_ms())
    cluster, session = driver.connect(settings)
    try:
        with schema_lock(session, settings.keyspace) as holder:
            with pytest.raises(StoreError, match=f"schema lock held by {holder}"):
                with schema_lock(session, settings.keyspace, wait_s=1):
                    pass
        with schema_lock(session, settings.keyspace, wait_s=1) as second:
            assert second != holder  # released when the first block ended
    finally:
        cluster.shutdown()
        _drop(settings)


def _drop(settings: CassandraSettings) -> None:
    cluster, session = driver.connect(settings)
    try:
        session.execute(f"DROP KEYSPACE IF EXISTS {settings.keyspace}")
    finally:
        cluster.shutdown()
