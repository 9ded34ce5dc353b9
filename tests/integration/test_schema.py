"""The schema as a fresh deployment gets it, on the real Cassandra."""

from __future__ import annotations

import uuid

import pytest

from trigger_service.adapters.cassandra import driver
from trigger_service.adapters.cassandra.migrate import migrate, schema_files
from trigger_service.adapters.cassandra.store import CassandraStore
from trigger_service.config.settings import CassandraSettings
from trigger_service.core.clock import SystemClock
from trigger_service.core.errors import StoreError

pytestmark = pytest.mark.integration


def test_a_new_keyspace_is_network_topology_replicated_and_fully_migrated() -> None:
    settings = CassandraSettings(keyspace="schema_" + uuid.uuid4().hex[:12])
    with pytest.raises(StoreError, match="make migrate"):
        CassandraStore.open_sync(settings)  # processes refuse a schema that is behind
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
        CassandraStore.open_sync(settings).close_sync()  # now it starts
    finally:
        session.execute(f"DROP KEYSPACE IF EXISTS {settings.keyspace}")
        cluster.shutdown()
