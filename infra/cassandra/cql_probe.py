"""Cassandra readiness probe, for one node or a local ring.

Run with the project's venv (it has cassandra-driver); infra/services/cassandra.sh calls
    $PYTHON infra/cassandra/cql_probe.py PORT [--host HOST]
        exit 0 and print release_version once a CQL query on HOST (127.0.0.1) succeeds;
    $PYTHON infra/cassandra/cql_probe.py PORT --ring HOST...
        exit 0 once every HOST answers CQL on its own address, and each of them sees every
        HOST in gossip with status NORMAL and as a peer with its own schema version. Prints
        one progress line either way (which nodes answer, what each sees).
Exit 1 (reason on stderr) if not ready yet.
"""

from __future__ import annotations

import logging
import sys
import warnings
from typing import Any


def _session(host: str, port: int) -> tuple[Any, Any]:
    from cassandra.cluster import Cluster
    from cassandra.policies import WhiteListRoundRobinPolicy

    # Whitelisted to HOST: every query runs on that node, never on a peer the driver found.
    cluster = Cluster(
        [host],
        port=port,
        connect_timeout=3,
        control_connection_timeout=3,
        load_balancing_policy=WhiteListRoundRobinPolicy([host]),
    )
    try:
        return cluster, cluster.connect()
    except BaseException:
        cluster.shutdown()
        raise


def probe_one(host: str, port: int) -> int:
    cluster = None
    try:
        cluster, session = _session(host, port)
        row = session.execute("SELECT release_version FROM system.local", timeout=5).one()
        print(row.release_version)
        return 0
    except Exception as exc:  # any failure means "not ready yet"
        print(f"cql probe {host}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    finally:
        if cluster is not None:
            cluster.shutdown()


def _view(host: str, port: int) -> tuple[str, dict[str, str], dict[str, str]]:
    """What HOST knows: its own schema version; address -> gossip status (e.g. ``NORMAL,<token>``)
    of every endpoint in its gossip (itself included); address -> schema version of each peer."""
    cluster, session = _session(host, port)
    try:
        local = session.execute("SELECT schema_version FROM system.local", timeout=5).one()
        # STATUS_WITH_PORT is the state Cassandra 4+ gossips; STATUS only for older peers.
        gossip = {str(r.address): str(r.status_with_port or r.status or "")
                  for r in session.execute(
                      "SELECT address, status, status_with_port FROM system_views.gossip_info",
                      timeout=5)}
        peers = {str(r.peer): str(r.schema_version)
                 for r in session.execute("SELECT peer, schema_version FROM system.peers_v2",
                                          timeout=5)}
        return str(local.schema_version), gossip, peers
    finally:
        cluster.shutdown()


def probe_ring(hosts: list[str], port: int) -> int:
    answers: dict[str, str] = {}
    problems: list[str] = []
    for host in hosts:
        try:
            schema, gossip, peers = _view(host, port)
        except Exception as exc:  # this node does not answer CQL yet
            problems.append(f"{host}: no CQL ({type(exc).__name__})")
            continue
        normal = [h for h in hosts if gossip.get(h, "").startswith("NORMAL")]
        answers[host] = f"{len(normal)}/{len(hosts)} NORMAL"
        if len(normal) < len(hosts):
            problems.append(f"{host} sees {len(normal)}/{len(hosts)} NORMAL")
        elif any(peers.get(h) != schema for h in hosts if h != host):
            problems.append(f"{host}: schema versions differ")
    cql = ",".join(h.rsplit(".", 1)[-1] for h in answers) or "none"
    print("; ".join([f"nodes answering CQL: {cql}",
                     *(f"{h} sees {v}" for h, v in answers.items())]))
    if problems:
        print("ring not ready: " + "; ".join(problems), file=sys.stderr)
        return 1
    return 0


def main(argv: list[str]) -> int:
    port = int(argv[0]) if argv else 9042
    # The driver logs connection errors and warns about protocol downgrades; a probe that runs
    # while the node is starting only needs the final verdict.
    logging.disable(logging.CRITICAL)
    warnings.simplefilter("ignore")
    if len(argv) > 2 and argv[1] == "--ring":
        return probe_ring(argv[2:], port)
    host = argv[2] if len(argv) > 2 and argv[1] == "--host" else "127.0.0.1"
    return probe_one(host, port)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
