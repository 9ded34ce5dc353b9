#!/usr/bin/env bash
# Wipe the local Cassandra data: the single node's (var/cassandra: keyspaces, commit log, caches,
# hints) and the local ring's (var/cassandra-ring, every node).
# Refuses while a node of either is running: run infra/down.sh cassandra first.
# Redis and LocalStack keep nothing on disk (memory only), so there is nothing to reset there.
set -euo pipefail
source "$(dirname -- "${BASH_SOURCE[0]}")/lib.sh"

take_lock
for node in 0 $(seq 1 "$CASSANDRA_RING_MAX"); do
    if [[ -n "$(_cassandra_pid "$node")" ]]; then
        die "$(_cassandra_name "$node") is running; stop it first: infra/down.sh cassandra"
    fi
done
for dir in "$CASSANDRA_HOME_DIR" "$CASSANDRA_RING_DIR"; do
    if [[ -d "$dir" ]]; then
        rm -rf "$dir"
        log "removed $dir"
    else
        log "nothing to remove ($dir does not exist)"
    fi
done
