#!/usr/bin/env bash
# Wipe the local Cassandra node's data (var/cassandra: keyspaces, commit log, caches, hints).
# Refuses while Cassandra is running: run infra/down.sh cassandra first.
# Redis and LocalStack keep nothing on disk (memory only), so there is nothing to reset there.
set -euo pipefail
source "$(dirname -- "${BASH_SOURCE[0]}")/lib.sh"

take_lock
if [[ -n "$(our_pid cassandra "$(cassandra_marker)")" ]]; then
    die "cassandra is running; stop it first: infra/down.sh cassandra"
fi
if [[ -d "$CASSANDRA_HOME_DIR" ]]; then
    rm -rf "$CASSANDRA_HOME_DIR"
    log "removed $CASSANDRA_HOME_DIR"
else
    log "nothing to remove ($CASSANDRA_HOME_DIR does not exist)"
fi
