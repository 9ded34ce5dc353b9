"""Authenticated, encrypted connections against the REAL secure variants of the stores:
a Cassandra node with PasswordAuthenticator and TLS-only clients, and a TLS-only Redis with an
ACL user (``infra/secure.sh``, started here once per session and stopped at its end unless
they were already running). Wrong or missing credentials, plaintext and an unknown CA are
refused with the adapters' errors; the right settings migrate, store and use the cache,
lease and limits."""

from __future__ import annotations

import gc
import subprocess
import uuid
import warnings
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.keys import throwaway_cipher
from trigger_service.adapters.cassandra.migrate import migrate
from trigger_service.adapters.cassandra.store import CassandraStore
from trigger_service.adapters.redis.client import RedisPing, open_client, open_from_settings
from trigger_service.adapters.redis.idempotency import RedisIdempotencyCache
from trigger_service.adapters.redis.lease import RedisLease
from trigger_service.adapters.redis.limits import RedisRateLimiter
from trigger_service.config.settings import Settings
from trigger_service.config.stores import CassandraSettings, RedisSettings
from trigger_service.core.errors import CacheError, StoreError
from trigger_service.core.ports.limit import BucketRule
from trigger_service.core.time.clock import SystemClock

# The secure Cassandra takes about a minute to start on a small machine: its first test
# waits for it, so this module's tests get more than the default per-test timeout.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]

SCRIPT = Path(__file__).resolve().parents[2] / "infra" / "secure.sh"
KEYSPACE = "triggers_secure_test"
# Not this project's CA: the system's bundle, which never signed the throwaway certificate.
OTHER_CA = "/etc/ssl/certs/ca-certificates.crt"


def _secure(action: str, service: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SCRIPT), action, service], capture_output=True, text=True,
                          timeout=400, check=False)


def _started(service: str) -> Iterator[Settings]:
    """Settings for the secure SERVICE (from ``infra/secure.sh env``), started if needed."""
    was_running = _secure("status", service).returncode == 0
    up = _secure("up", service)
    if up.returncode != 0:
        if not was_running:  # a half-started instance must not outlive the session
            _secure("down", service)
        pytest.fail(f"infra/secure.sh up {service} failed:\n{up.stderr}")
    env = dict(line.split("=", 1) for line in _secure("env", service).stdout.splitlines())
    yield Settings.from_env(env)
    if not was_running:
        _secure("down", service)


@pytest.fixture(scope="session")
def secure_cassandra() -> Iterator[CassandraSettings]:
    for settings in _started("cassandra"):
        yield replace(settings.cassandra, keyspace=KEYSPACE)


@pytest.fixture(scope="session")
def secure_redis() -> Iterator[RedisSettings]:
    for settings in _started("redis"):
        yield settings.redis


def _refused(settings: CassandraSettings) -> str:
    # A refusal is immediate; the short timeout only bounds a test that would otherwise hang.
    # (The round trip keeps the default: a node just started may answer slowly.)
    with pytest.raises(StoreError) as e:
        CassandraStore.open_sync(replace(settings, request_timeout_s=5.0), throwaway_cipher())
    return str(e.value)


def test_cassandra_refuses_a_wrong_password(secure_cassandra: CassandraSettings) -> None:
    message = _refused(replace(secure_cassandra, password="wrong"))
    assert "authentication refused (user 'trigger'" in message


def test_cassandra_refuses_a_client_without_credentials(
        secure_cassandra: CassandraSettings) -> None:
    message = _refused(replace(secure_cassandra, username="", password=""))
    assert "authentication refused (no user set" in message


def test_cassandra_refuses_plaintext(secure_cassandra: CassandraSettings) -> None:
    message = _refused(replace(secure_cassandra, tls_ca_file=""))
    assert message.startswith("cassandra connect failed")


def test_cassandra_refuses_a_node_not_signed_by_the_ca(
        secure_cassandra: CassandraSettings) -> None:
    message = _refused(replace(secure_cassandra, tls_ca_file=OTHER_CA))
    assert "TLS handshake failed" in message


async def test_cassandra_with_credentials_and_ca_migrates_and_stores(
        secure_cassandra: CassandraSettings) -> None:
    migrate(secure_cassandra, SystemClock().now_ms())
    store = CassandraStore.open_sync(secure_cassandra, throwaway_cipher(), seal_payloads=True)
    try:
        caller = f"secure-{uuid.uuid4().hex[:8]}"
        await store.add_secret(caller, 1_000, "whsec_one")
        assert await store.secrets(caller, 3) == [(1_000, "whsec_one")]
    finally:
        store.close_sync()


def _url(settings: RedisSettings, *, scheme: str = "rediss", user: str | None = None,
         password: str | None = None) -> str:
    """The secure Redis's URL with another scheme, user or password (``""``: none)."""
    parts = urlsplit(settings.url)
    user = parts.username or "" if user is None else user
    password = parts.password or "" if password is None else password
    userinfo = f"{user}:{password}@" if user or password else ""
    return f"{scheme}://{userinfo}{parts.hostname}:{parts.port}{parts.path}"


async def _ping_refused(url: str, ca: str) -> str:
    client = open_client(url, tls_ca_file=ca)
    try:
        with pytest.raises(CacheError) as e:
            await RedisPing(client).ping()
        return str(e.value)
    finally:
        await client.aclose()
        # redis-py leaves the socket of a refused handshake to the garbage collector, whose
        # transport then warns "unclosed" whenever it is collected, in whatever test runs
        # then (seen twice in a later test of this file): collect it here, where it was made.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            gc.collect()


async def test_redis_refuses_a_client_without_password(secure_redis: RedisSettings) -> None:
    message = await _ping_refused(_url(secure_redis, user="", password=""),
                                  secure_redis.tls_ca_file)
    assert "authentication required" in message.lower()


async def test_redis_refuses_a_wrong_user(secure_redis: RedisSettings) -> None:
    message = await _ping_refused(_url(secure_redis, user="intruder"), secure_redis.tls_ca_file)
    assert "invalid username-password pair" in message


async def test_redis_refuses_plaintext(secure_redis: RedisSettings) -> None:
    await _ping_refused(_url(secure_redis, scheme="redis"), "")


async def test_redis_refuses_a_server_not_signed_by_the_ca(secure_redis: RedisSettings) -> None:
    message = await _ping_refused(secure_redis.url, OTHER_CA)
    assert "certificate verify failed" in message


async def test_redis_with_acl_user_and_ca_serves_cache_lease_and_limits(
        secure_redis: RedisSettings) -> None:
    client = open_from_settings(secure_redis)
    tag = uuid.uuid4().hex[:8]
    try:
        cache = RedisIdempotencyCache(client)
        assert await cache.claim(f"c-{tag}", "key", "hash") is None  # ours
        held = await cache.claim(f"c-{tag}", "key", "hash")
        assert held is not None and held.request_hash == "hash"
        lease = RedisLease(client, 10_000, f"g-{tag}")
        assert await lease.acquire(0, "me") is not None
        assert await lease.acquire(0, "other") is None
        limiter = RedisRateLimiter(client)
        rule = BucketRule(rate_per_s=0.001, burst=1)
        assert (await limiter.take(f"l-{tag}", rule)).allowed
        assert not (await limiter.take(f"l-{tag}", rule)).allowed
    finally:
        await client.aclose()
