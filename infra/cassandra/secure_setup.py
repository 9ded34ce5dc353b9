"""Readiness probe and role setup of the secure Cassandra node (infra/secure.sh).

Run with the project's venv; infra/services/cassandra.sh calls
    $PYTHON infra/cassandra/secure_setup.py [--setup] --host ADDR --port PORT --ca CA.pem
        --secrets DIR
Exit 0 once the role ``trigger`` logs in over TLS (verified against CA.pem, hostname checked),
reads ``system.local`` and holds its permissions; exit 1 (reason on stderr) if not yet. With
``--setup`` it first logs in as the superuser ``cassandra`` (the stored password, else the default
``cassandra`` of a new node) and makes everything idempotently: the superuser's password
becomes DIR/cassandra-superuser-password, the role ``trigger`` (DIR/cassandra-password, LOGIN,
not superuser) gets every permission on every keyspace. It connects through the service's own
``driver.connect``, so it also checks the settings the service would use.
"""

from __future__ import annotations

import argparse
import logging
import re
import sys
import warnings
from pathlib import Path

# Run as a script from infra/: the repository root (the service's package) is not on sys.path.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from trigger_service.adapters.cassandra import driver
from trigger_service.config.stores import CassandraSettings
from trigger_service.core.errors import StoreError

ROLE = "trigger"
SUPERUSER = "cassandra"


def _secret(secrets: Path, name: str) -> str:
    value = (secrets / name).read_text().strip()
    # Inlined into CQL below: only what secure_secret (infra/lib.sh) makes is accepted.
    if not re.fullmatch(r"[0-9a-f]{16,64}", value):
        raise SystemExit(f"{secrets / name}: not a hex password")
    return value


def _settings(args: argparse.Namespace, user: str, password: str) -> CassandraSettings:
    return CassandraSettings(hosts=(args.host,), port=args.port, username=user,
                             password=password, tls_ca_file=args.ca, request_timeout_s=5.0)


def _role_ready(args: argparse.Namespace, password: str) -> None:
    """Raises ``StoreError`` unless the role logs in, reads, and may create keyspaces."""
    cluster, session = driver.connect(_settings(args, ROLE, password))
    try:
        session.execute("SELECT release_version FROM system.local")
        granted = {(r["resource"], r["permission"])
                   for r in session.execute(f"LIST ALL PERMISSIONS OF {ROLE}")}
    except Exception as e:
        raise StoreError(f"read as {ROLE} failed: {e}") from e
    finally:
        cluster.shutdown()
    if ("<all keyspaces>", "CREATE") not in granted:
        raise StoreError(f"{ROLE} has no permissions yet")


def _setup(args: argparse.Namespace, role_password: str, super_password: str) -> None:
    """As the superuser: its own password, the role and its grants (all idempotent)."""
    try:
        cluster, session = driver.connect(_settings(args, SUPERUSER, super_password))
    except StoreError as e:
        if "authentication refused" not in str(e):
            raise
        # A new node: the default superuser still has its well-known password.
        cluster, session = driver.connect(_settings(args, SUPERUSER, SUPERUSER))
    try:
        session.execute(f"ALTER ROLE {SUPERUSER} WITH PASSWORD = '{super_password}'")
        session.execute(f"CREATE ROLE IF NOT EXISTS {ROLE} WITH PASSWORD = '{role_password}' "
                        "AND LOGIN = true AND SUPERUSER = false")
        session.execute(f"ALTER ROLE {ROLE} WITH PASSWORD = '{role_password}'")
        session.execute(f"GRANT ALL PERMISSIONS ON ALL KEYSPACES TO {ROLE}")
    finally:
        cluster.shutdown()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--setup", action="store_true")
    parser.add_argument("--host", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--ca", required=True)
    parser.add_argument("--secrets", type=Path, required=True)
    args = parser.parse_args(argv)
    # The driver logs every failed attempt; a probe that runs while the node starts only needs
    # the final verdict.
    logging.disable(logging.CRITICAL)
    warnings.simplefilter("ignore")
    role_password = _secret(args.secrets, "cassandra-password")
    try:
        # Setup runs on every `up` (all of it is idempotent): a step that failed on a start
        # (a node still settling) is never left undone because the role can already log in.
        if args.setup:
            _setup(args, role_password, _secret(args.secrets, "cassandra-superuser-password"))
        _role_ready(args, role_password)
    except Exception as e:  # any failure means "not ready yet"
        print(f"secure probe: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
