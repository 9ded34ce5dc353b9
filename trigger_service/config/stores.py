"""Settings of the stores the service connects to (sections ``cassandra`` and ``redis`` of
``settings.Settings``): where they are, how a process authenticates and encrypts its
connections, and how much one request or pool may take. ``CASSANDRA_VARIABLES`` and
``REDIS_VARIABLES`` are their rows of ``settings.VARIABLES``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trigger_service.config.parsers import pos_float, pos_int, str_list

Row = tuple[str, tuple[str, str], Callable[[str], Any], str]
_REPO_ROOT = Path(__file__).resolve().parent.parent.parent


@dataclass(frozen=True)
class CassandraSettings:
    hosts: tuple[str, ...] = ("127.0.0.1",)
    port: int = 9042
    keyspace: str = "triggers"
    replication_factor: int = 1
    # The data centre this process is in: routing prefers its replicas, consistency is
    # LOCAL_QUORUM / LOCAL_SERIAL in it, and a new keyspace is replicated to it
    # (NetworkTopologyStrategy). A single node with SimpleSnitch is in "datacenter1".
    local_dc: str = "datacenter1"
    request_timeout_s: float = 10.0
    # Rows per page of a read (the driver's default): every read pages to its end, so this
    # bounds what one request carries, not what a read returns.
    fetch_size: int = 5000
    schema_dir: Path = _REPO_ROOT / "infra" / "cql"
    # PasswordAuthenticator credentials (empty: no authentication) and client TLS: with a CA
    # file the connection is TLS and the node's certificate is verified against it.
    username: str = ""
    password: str = field(default="", repr=False)  # never logged
    tls_ca_file: str = ""


@dataclass(frozen=True)
class RedisSettings:
    # An ACL user and password go in the URL (redis://user:password@host:port/db); rediss://
    # is TLS, verified against tls_ca_file when set (else the system's CAs).
    url: str = field(default="redis://127.0.0.1:6379/0", repr=False)  # may hold a password
    tls_ca_file: str = ""
    # The command pool of a process (leases, rate limits, idempotency, publishes); a waiter
    # gets a connection within 2 s or a CacheError. Inbox streams never take from it (the
    # API's one subscription has its own connection).
    max_connections: int = 64


CASSANDRA_VARIABLES: tuple[Row, ...] = (
    ("TRIGGER_CASSANDRA_HOSTS", ("cassandra", "hosts"), str_list,
     "comma-separated contact points"),
    ("TRIGGER_CASSANDRA_PORT", ("cassandra", "port"), pos_int, "CQL port"),
    ("TRIGGER_CASSANDRA_KEYSPACE", ("cassandra", "keyspace"), str,
     "keyspace (created with the schema at start-up)"),
    ("TRIGGER_CASSANDRA_REPLICATION_FACTOR", ("cassandra", "replication_factor"), pos_int,
     "replicas in the local data centre when the keyspace is created "
     "(NetworkTopologyStrategy)"),
    ("TRIGGER_CASSANDRA_LOCAL_DC", ("cassandra", "local_dc"), str,
     "this process's data centre: token- and DC-aware routing, LOCAL_QUORUM and "
     "LOCAL_SERIAL there"),
    ("TRIGGER_CASSANDRA_REQUEST_TIMEOUT_S", ("cassandra", "request_timeout_s"), pos_float,
     "per-request timeout"),
    ("TRIGGER_CASSANDRA_FETCH_SIZE", ("cassandra", "fetch_size"), pos_int,
     "rows per page of a read (every read pages to its end; big sets are processed "
     "a page at a time)"),
    ("TRIGGER_CASSANDRA_USERNAME", ("cassandra", "username"), str,
     "PasswordAuthenticator user (empty: connect without authentication)"),
    ("TRIGGER_CASSANDRA_PASSWORD", ("cassandra", "password"), str,
     "that user's password"),
    ("TRIGGER_CASSANDRA_TLS_CA_FILE", ("cassandra", "tls_ca_file"), str,
     "PEM file of the CA that signed the nodes' certificates: when set, every "
     "connection is TLS and verifies the node"),
)

REDIS_VARIABLES: tuple[Row, ...] = (
    ("TRIGGER_REDIS_URL", ("redis", "url"), str,
     "Redis (≥ 7.0): orders an Idempotency-Key's requests, rate limits, quotas, "
     "leases; redis://user:password@host:port/db, rediss:// for TLS"),
    ("TRIGGER_REDIS_TLS_CA_FILE", ("redis", "tls_ca_file"), str,
     "PEM file of the CA that signed Redis's certificate (rediss://; empty: the "
     "system's CAs)"),
    ("TRIGGER_REDIS_MAX_CONNECTIONS", ("redis", "max_connections"), pos_int,
     "Redis command connections per process (a full pool makes a command wait up to "
     "2 s); the API's inbox streams share one more, their own"),
)
