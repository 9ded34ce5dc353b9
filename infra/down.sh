#!/usr/bin/env bash
# Stop the local services that infra/up.sh started, and only those: the processes named by
# var/run/<service>.pid (checked against the expected command line). TERM, up to 30 s, then KILL.
#   infra/down.sh [cassandra|localstack|redis|all]...   (default: all)
# cassandra: stops the single node and every node of a local ring (var/run/cassandra-<i>.pid),
# whatever CASSANDRA_NODES says. CASSANDRA_NODE=i stops ring node i alone (the others keep
# running), e.g.  CASSANDRA_NODES=3 CASSANDRA_NODE=2 infra/down.sh cassandra
# cassandra, redis: also their secure variants (infra/secure.sh) if they run.
set -euo pipefail
source "$(dirname -- "${BASH_SOURCE[0]}")/lib.sh"

read_service_args 2,8 "$@"
take_lock

# A service with several processes (the Cassandra ring) brings its own stop.
down_one() {
    if declare -F "${1}_down" >/dev/null; then
        "${1}_down"
    else
        stop_pid "$1" "$("${1}_marker")"
    fi
}

run_parallel down_one "${services[@]}"

# The secure variants (infra/secure.sh) too, when they run: a test session that was killed
# before its teardown may have left them.
for _t in cassandra redis; do
    if [[ " ${services[*]} " == *" $_t "* && -f "$(pid_file "$_t-secure")" ]] &&
        [[ "$_t" == redis || -z "$CASSANDRA_NODE" ]]; then
        "${_t}_secure_down"
    fi
done
