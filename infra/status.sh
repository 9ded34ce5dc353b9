#!/usr/bin/env bash
# One line per local service: running | starting | stopped | port taken by a foreign process.
#   infra/status.sh [cassandra|localstack|redis|all]...   (default: all)
# Exit status: 0 if every listed service is running, 3 otherwise.
# cassandra with CASSANDRA_NODES=N (2..3): one line per ring node (cassandra-<i>, 127.0.0.i).
set -euo pipefail
source "$(dirname -- "${BASH_SOURCE[0]}")/lib.sh"

read_service_args 2,5 "$@"

# status_default NAME: NAME's one line; false unless it is running.
status_default() {
    local name="$1" state port
    state="$(service_state "$name")"
    port="$(read_port "$name")"
    port="${port:-$("${name}_port")}"
    case "$state" in
        running) echo "$name: running (pid $(read_pid "$name"), 127.0.0.1:$port)" ;;
        starting) echo "$name: starting (pid $(read_pid "$name"), 127.0.0.1:$port not ready yet)"; return 1 ;;
        foreign) echo "$name: stopped (but port $port is used by a process we did not start)"; return 1 ;;
        *) echo "$name: stopped"; return 1 ;;
    esac
}

rc=0
for name in "${services[@]}"; do
    # A service with several processes (the Cassandra ring) prints its own lines.
    if declare -F "${name}_status" >/dev/null; then
        "${name}_status" || rc=3
    else
        status_default "$name" || rc=3
    fi
done
exit "$rc"
