#!/usr/bin/env bash
# One line per local service: running | starting | stopped | port taken by a foreign process.
#   infra/status.sh [cassandra|localstack|redis|all]...   (default: all)
# Exit status: 0 if every listed service is running, 3 otherwise.
set -euo pipefail
source "$(dirname -- "${BASH_SOURCE[0]}")/lib.sh"

read_service_args 2,4 "$@"
rc=0
for name in "${services[@]}"; do
    state="$(service_state "$name")"
    port="$(read_port "$name")"
    port="${port:-$("${name}_port")}"
    case "$state" in
        running) echo "$name: running (pid $(read_pid "$name"), 127.0.0.1:$port)" ;;
        starting) echo "$name: starting (pid $(read_pid "$name"), 127.0.0.1:$port not ready yet)"; rc=3 ;;
        foreign) echo "$name: stopped (but port $port is used by a process we did not start)"; rc=3 ;;
        *) echo "$name: stopped"; rc=3 ;;
    esac
done
exit "$rc"
