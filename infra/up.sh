#!/usr/bin/env bash
# Install (if needed) and start the local services: Redis, Cassandra and LocalStack (SQS).
#   infra/up.sh [cassandra|localstack|redis|all]...   (default: all)
# Each service is installed, started and waited for in parallel with the others. A service
# whose PID file names a live process of ours is left alone (only waited for). Prints one line
# per service when it is ready; on a timeout prints the end of that service's log and exits 1.
# Ports come from the service's settings: TRIGGER_CASSANDRA_PORT (9042), the port of
# TRIGGER_SQS_ENDPOINT_URL (4566) and of TRIGGER_REDIS_URL (6379); and CASSANDRA_STORAGE_PORT (7000).
# Timeouts (s): CASSANDRA_START_TIMEOUT (180), LOCALSTACK_START_TIMEOUT (90), REDIS_START_TIMEOUT (10).
# PYTHON: interpreter with cassandra-driver for Cassandra's readiness check (.venv/bin/python).
# A local Cassandra ring: CASSANDRA_NODES=3 (node i on 127.0.0.i, var/run/cassandra-<i>.pid) starts
# the ring's nodes that are not running, together, and waits until all of them answer CQL and
# see each other (running nodes are left alone); CASSANDRA_NODE=i starts node i alone. Ring
# timeout: CASSANDRA_START_TIMEOUT (300). Details: infra/services/cassandra.sh.
set -euo pipefail
source "$(dirname -- "${BASH_SOURCE[0]}")/lib.sh"

read_service_args 2,14 "$@"
take_lock

up_one() {
    local name="$1" t0

    if ! "${name}_installed"; then
        t0="$(now)"
        "${name}_install"
        log "$name: install took $(elapsed "$t0") s"
    fi

    if declare -F "${name}_preflight" >/dev/null; then
        "${name}_preflight"
    fi

    # A service with more than one process (the Cassandra ring) brings its own start-and-wait;
    # it calls up_default for its plain single-process case.
    if declare -F "${name}_up" >/dev/null; then
        "${name}_up"
    else
        up_default "$name"
    fi
}

# up_default NAME: start NAME unless our process runs, then wait until it is ready.
up_default() {
    local name="$1" port pid t0 timeout marker logf
    port="$("${name}_port")"
    marker="$("${name}_marker")"
    logf="$("${name}_log")"
    timeout="$("${name}_timeout")"

    t0="$(now)"
    pid="$(our_pid "$name" "$marker")"
    if [[ -n "$pid" ]]; then
        local running_port
        running_port="$(read_port "$name")"
        if [[ -n "$running_port" && "$running_port" != "$port" ]]; then
            die "$name: already running (pid $pid) on port $running_port, not on the requested $port; stop it first: infra/down.sh $name"
        fi
        if "${name}_ready" >/dev/null 2>&1; then
            echo "$name: already running (pid $pid, 127.0.0.1:$port)"
            return 0
        fi
        log "$name: pid $pid is ours but not ready yet; waiting for it"
    else
        if port_open "$port"; then
            die "$name: port $port on 127.0.0.1 is in use by a process that infra/up.sh did not start (no live $(pid_file "$name")). Stop it, or pick another port (see infra/up.sh --help)."
        fi
        log "$name: starting (log: $logf)"
        "${name}_start"
        pid="$(our_pid "$name" "$marker")"
        [[ -z "$pid" ]] || echo "$port" >"$(port_file "$name")"
        [[ -n "$pid" ]] || {
            print_log_tail "$name" "$logf"
            die "$name: exited right after start"
        }
    fi

    # Wait for readiness; give up early if the process dies.
    local deadline
    deadline=$(($(date +%s) + timeout))
    while :; do
        if "${name}_ready" >/dev/null 2>&1; then
            echo "$name: ready on 127.0.0.1:$port (pid $pid, $(elapsed "$t0") s)"
            return 0
        fi
        if ! pid_matches "$pid" "$marker"; then
            rm -f "$(pid_file "$name")"
            print_log_tail "$name" "$logf"
            die "$name: process $pid exited before it was ready"
        fi
        if (($(date +%s) >= deadline)); then
            print_log_tail "$name" "$logf"
            die "$name: not ready after ${timeout} s (still running as pid $pid; infra/down.sh stops it)"
        fi
        sleep 0.5
    done
}

t0="$(now)"
ensure_dirs
run_parallel up_one "${services[@]}"
log "up: all ready in $(elapsed "$t0") s"
