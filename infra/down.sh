#!/usr/bin/env bash
# Stop the local services that infra/up.sh started, and only those: the processes named by
# var/run/<service>.pid (checked against the expected command line). TERM, up to 30 s, then KILL.
#   infra/down.sh [cassandra|localstack|redis|all]...   (default: all)
set -euo pipefail
source "$(dirname -- "${BASH_SOURCE[0]}")/lib.sh"

case "${1:-}" in
    -h | --help)
        sed -n '2,4p' "$0" | sed 's/^# \{0,1\}//'
        exit 0
        ;;
esac

# (Not a process substitution: an unknown name must stop the script.)
service_list="$(services_from_args "$@")"
mapfile -t services <<<"$service_list"
take_lock

down_one() { stop_pid "$1" "$("${1}_marker")"; }

run_parallel down_one "${services[@]}"
