"""A real 3-node Cassandra ring (``make test CASSANDRA_NODES=3``): one node is stopped with the
infra script while triggers are written, read and claimed through the real ``CassandraStore``
(LOCAL_QUORUM / LOCAL_SERIAL, replication factor 3), then started again. The assertion is that
nothing acknowledged is lost: with 2 of 3 replicas up every write is kept, every read sees it
and every LWT still applies (and a stale one still does not).

Skipped unless the ring that this checkout's ``infra/up.sh`` started is up (3 live nodes seen
from 127.0.0.1 and a PID file for the node it stops). It uses its own keyspace
(``TRIGGER_RING_KEYSPACE``, default ``triggers_ring_test``) and the port of
``TRIGGER_CASSANDRA_PORT`` (9042).
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import socket
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest
from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile
from cassandra.policies import RoundRobinPolicy

from tests.contract.support import INDEX_TTL_S, make_trigger
from tests.keys import fixture_cipher
from trigger_service.adapters.cassandra.migrate import migrate
from trigger_service.adapters.cassandra.store import CassandraStore
from trigger_service.config.stores import CassandraSettings
from trigger_service.core.errors import StoreError
from trigger_service.core.model import Status, Trigger
from trigger_service.core.time.clock import SystemClock
from trigger_service.core.time.timing import DAY_MS

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[2]
RING = ("127.0.0.1", "127.0.0.2", "127.0.0.3")
VICTIM = 2  # not node 1: 127.0.0.1 is where the skip check (and a default client) connects
KEYSPACE = os.environ.get("TRIGGER_RING_KEYSPACE", "triggers_ring_test")
PORT = int(os.environ.get("TRIGGER_CASSANDRA_PORT", "9042"))
WORKERS = 3  # concurrent writers, each create -> read -> claim -> stale claim in a loop
PAUSE_S = 0.05  # between a writer's rounds: the ring shares 2 cores with the test
REJOIN_PAUSE_S = 0.5  # slower while the node restarts: its start-up needs the CPU


def _live_nodes() -> int:
    """How many nodes the driver, connected through 127.0.0.1, sees up (0 if none answers)."""
    profile = ExecutionProfile(load_balancing_policy=RoundRobinPolicy())
    cluster = Cluster([RING[0]], port=PORT, protocol_version=5, connect_timeout=3,
                      control_connection_timeout=3,
                      execution_profiles={EXEC_PROFILE_DEFAULT: profile})
    try:
        cluster.connect()
        return sum(1 for h in cluster.metadata.all_hosts() if h.is_up)
    except Exception:  # nothing answers: no ring here
        return 0
    finally:
        cluster.shutdown()


def _port_open(host: str) -> bool:
    try:
        with socket.create_connection((host, PORT), timeout=1):
            return True
    except OSError:
        return False


@pytest.fixture(scope="module")
def ring_store() -> Iterator[CassandraStore]:
    how = "start it with: make test CASSANDRA_NODES=3 (or CASSANDRA_NODES=3 infra/up.sh cassandra)"
    live = _live_nodes()
    if live < len(RING):
        pytest.skip(f"needs a 3-node Cassandra ring on {RING[0]}:{PORT} (saw {live} up); {how}")
    if not (REPO_ROOT / "var" / "run" / f"cassandra-{VICTIM}.pid").is_file():
        pytest.skip(f"the ring on port {PORT} was not started by this checkout; {how}")
    logging.getLogger("cassandra").setLevel(logging.ERROR)  # a node going down is expected
    settings = CassandraSettings(hosts=RING, port=PORT, keyspace=KEYSPACE, replication_factor=3)
    migrate(settings, SystemClock().now_ms())
    store = CassandraStore.open_sync(settings, fixture_cipher())
    yield store
    store.close_sync()


async def _infra(script: str, **env: str) -> float:
    """Run ``infra/<script> cassandra`` for the ring; its duration (s). Fails with its output."""
    t0 = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        str(REPO_ROOT / "infra" / script), "cassandra",
        env={**os.environ, "CASSANDRA_NODES": str(len(RING)), **env},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    out, _ = await proc.communicate()
    assert proc.returncode == 0, f"infra/{script} cassandra failed:\n{out.decode()}"
    return time.monotonic() - t0


@dataclass
class Ledger:
    """What the store acknowledged, by phase (before / down / back)."""

    phase: str = "before"
    pause_s: float = PAUSE_S
    acked: dict[str, Trigger] = field(default_factory=dict)  # id -> last acknowledged state
    unsure: dict[str, tuple[Trigger, Trigger]] = field(default_factory=dict)  # claim unknown
    settled: list[str] = field(default_factory=list)  # ids whose writer is done with them
    timings: dict[str, float] = field(default_factory=dict)  # infra step -> seconds
    writes: dict[str, int] = field(default_factory=dict)  # phase -> acknowledged creates
    claims: dict[str, int] = field(default_factory=dict)  # phase -> LWTs that applied
    errors: list[str] = field(default_factory=list)

    def count(self, kind: dict[str, int]) -> None:
        kind[self.phase] = kind.get(self.phase, 0) + 1


async def _one_round(store: CassandraStore, ledger: Ledger, worker: int) -> None:
    """Create a trigger, read it and an older one back, claim it (LWT), retry the stale claim."""
    t = make_trigger(f"ring-{worker}", SystemClock().now_ms() + DAY_MS,
                     shard=random.randrange(1_000, 2**31 - 1))
    try:
        await store.create(t, INDEX_TTL_S)
    except StoreError as e:  # not acknowledged: no promise made, nothing to check
        ledger.errors.append(f"{ledger.phase} create: {e}")
        return
    ledger.acked[t.trigger_id] = t
    ledger.count(ledger.writes)
    assert await store.get(t.trigger_id) == t, "an acknowledged create is not readable"
    if ledger.settled:
        older = random.choice(ledger.settled)
        assert _matches(await store.get(older), older, ledger), f"{older} lost its last write"
    claimed = replace(t, status=Status.IN_FLIGHT, claim_id=uuid.uuid4().hex,
                            claimed_at_ms=SystemClock().now_ms())
    try:
        applied = await store.compare_and_set(t, claimed)
    except StoreError as e:  # the LWT may or may not have applied: either state is fine
        ledger.unsure[t.trigger_id] = (t, claimed)
        ledger.errors.append(f"{ledger.phase} claim: {e}")
        ledger.settled.append(t.trigger_id)
        return
    assert applied, "an LWT on an unchanged row did not apply"
    ledger.acked[t.trigger_id] = claimed
    ledger.count(ledger.claims)
    assert not await store.compare_and_set(t, claimed), "a stale LWT applied"
    ledger.settled.append(t.trigger_id)


async def _churn(store: CassandraStore, ledger: Ledger, stop: asyncio.Event, worker: int) -> None:
    while not stop.is_set():
        await _one_round(store, ledger, worker)
        await asyncio.sleep(ledger.pause_s)


async def _run_phase(store: CassandraStore, ledger: Ledger, phase: str, seconds: float) -> None:
    ledger.phase = phase
    stop = asyncio.Event()
    tasks = [asyncio.create_task(_churn(store, ledger, stop, w)) for w in range(WORKERS)]
    await asyncio.sleep(seconds)
    stop.set()
    await asyncio.gather(*tasks)


async def _check(store: CassandraStore, ledger: Ledger, ids: list[str]) -> None:
    """The acknowledged state of each of ``ids`` is what a LOCAL_QUORUM read returns now."""
    for start in range(0, len(ids), 100):
        chunk = ids[start:start + 100]
        got = await store.get_many(chunk)
        for tid, row in zip(chunk, got, strict=True):
            assert _matches(row, tid, ledger), f"{tid} lost: {ledger.acked[tid]} != {row}"


def _matches(row: Trigger | None, tid: str, ledger: Ledger) -> bool:
    """Is ``row`` the acknowledged state (either state if the claim's outcome is unknown)?"""
    return row in ledger.unsure[tid] if tid in ledger.unsure else row == ledger.acked[tid]


@pytest.mark.timeout(300)  # ~1 min on an idle machine; a node's start is slow under load
async def test_one_node_down_loses_nothing_and_lwts_still_apply(
    ring_store: CassandraStore,
) -> None:
    store, ledger = ring_store, Ledger()
    victim = RING[VICTIM - 1]
    t0 = time.monotonic()
    await _run_phase(store, ledger, "before", 3)
    # Stop the node while the writers run (the stop takes a few seconds: drain, then exit).
    ledger.phase = "stopping"
    stop = asyncio.Event()
    tasks = [asyncio.create_task(_churn(store, ledger, stop, w)) for w in range(WORKERS)]
    try:
        ledger.timings["down.sh"] = await _infra("down.sh", CASSANDRA_NODE=str(VICTIM))
        assert not _port_open(victim), f"node {VICTIM} still answers after infra/down.sh"
        ledger.phase = "down"
        await asyncio.sleep(8)
        await _check(store, ledger, list(ledger.settled))  # the writers are still busy
        # Start it again while the writers still run; up.sh waits for the whole ring.
        ledger.phase, ledger.pause_s = "rejoining", REJOIN_PAUSE_S
        ledger.timings["up.sh"] = await _infra("up.sh")
    finally:
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        if not _port_open(victim):  # the test failed with the node down: leave a whole ring
            await _infra("up.sh")
    for task in tasks:
        task.result()  # re-raise a writer's failed assertion
    ledger.pause_s = PAUSE_S
    await _run_phase(store, ledger, "back", 3)
    await _check(store, ledger, list(ledger.acked))  # every writer has stopped
    summary = (f"{len(ledger.acked)} triggers in {time.monotonic() - t0:.0f} s; "
               f"creates {ledger.writes}; claims {ledger.claims}; infra {ledger.timings}; "
               f"{len(ledger.errors)} unacknowledged: {ledger.errors[:3]}")
    print(summary)
    for phase in ("before", "down", "back"):
        assert ledger.writes.get(phase, 0) > 0 and ledger.claims.get(phase, 0) > 0, summary
    # A clean stop (drain, gossip shutdown) should cost at most the requests caught in it.
    assert len(ledger.errors) <= WORKERS * 2, summary
