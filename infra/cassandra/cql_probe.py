"""Cassandra readiness probe: exit 0 and print release_version once a CQL query succeeds.

Run with the project's venv (it has cassandra-driver): infra/services/cassandra.sh calls
    $PYTHON infra/cassandra/cql_probe.py PORT
Exit 1 (reason on stderr) if the node does not answer the query yet.
"""

import logging
import sys
import warnings


def main() -> int:
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 9042
    # The driver logs connection errors and warns about protocol downgrades; a probe that runs
    # while the node is starting only needs the final verdict.
    logging.disable(logging.CRITICAL)
    warnings.simplefilter("ignore")
    from cassandra.cluster import Cluster

    cluster = Cluster(
        ["127.0.0.1"],
        port=port,
        connect_timeout=3,
        control_connection_timeout=3,
    )
    try:
        session = cluster.connect()
        row = session.execute("SELECT release_version FROM system.local", timeout=5).one()
        print(row.release_version)
        return 0
    except Exception as exc:  # any failure means "not ready yet"
        print(f"cql probe: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    finally:
        cluster.shutdown()


if __name__ == "__main__":
    sys.exit(main())
