#!/usr/bin/env bash
# Stop the local services that infra/up.sh started, and only those: the processes named by
# var/run/<service>.pid (checked against the expected command line). TERM, up to 30 s, then KILL.
#   infra/down.sh [cassandra|localstack|redis|all]...   (default: all)
set -euo pipefail
source "$(dirname -- "${BASH_SOURCE[0]}")/lib.sh"

read_service_args 2,4 "$@"
take_lock

down_one() { stop_pid "$1" "$("${1}_marker")"; }

run_parallel down_one "${services[@]}"
