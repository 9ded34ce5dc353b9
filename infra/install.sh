#!/usr/bin/env bash
# Install what the local services need, skipping whatever is already installed.
#   infra/install.sh [cassandra|localstack|redis|all]...   (default: all)
# cassandra:  Maven resolves cassandra-all + dependencies into .cache/cassandra/lib
# localstack: a virtualenv .cache/localstack-venv from localstack/requirements.txt
# redis:      Debian's redis-server package (apt-get), only if redis-server is missing
# Several services install in parallel (they use different tools).
set -euo pipefail
source "$(dirname -- "${BASH_SOURCE[0]}")/lib.sh"

read_service_args 2,7 "$@"
take_lock

install_one() {
    local name="$1" t0
    if "${name}_installed"; then
        log "$name: already installed"
        return 0
    fi
    t0="$(now)"
    "${name}_install"
    log "$name: install took $(elapsed "$t0") s"
}

t0="$(now)"
run_parallel install_one "${services[@]}"
log "install: done in $(elapsed "$t0") s"
