#!/usr/bin/env bash
# Install what the local services need, skipping whatever is already installed.
#   infra/install.sh [cassandra|localstack|redis|chromium|prometheus|containers|all]...
#   (default: all)
# cassandra:  Maven resolves cassandra-all + dependencies into .cache/cassandra/lib
# localstack: a virtualenv .cache/localstack-venv from localstack/requirements.txt
# redis:      Debian's redis-server package (apt-get), only if redis-server is missing
# chromium:   Debian's chromium package (apt-get), only if /usr/bin/chromium is missing; a tool
#             for the browser test, not a service: only when named (`all` means the services)
# prometheus: Debian's prometheus package (apt-get), only if /usr/bin/promtool is missing; a
#             tool for the alert rules' tests (promtool), never started; only when named
# containers: Debian's podman, buildah, runc, mmdebstrap (apt-get) and podman-compose (pip, in
#             .cache/podman-compose-venv), for `make image` / `make test-deploy`; a tool
# Several components install in parallel (the apt-get ones take turns: apt_install in lib.sh).
set -euo pipefail
source "$(dirname -- "${BASH_SOURCE[0]}")/lib.sh"

# Tools are named apart from the services (read_service_args knows only services).
tools=()
args=()
for a in "$@"; do
    if [[ " ${ALL_TOOLS[*]} " == *" $a "* ]]; then tools+=("$a"); else args+=("$a"); fi
done
services=()
if ((${#args[@]})) || ! ((${#tools[@]})); then
    read_service_args 2,9 "${args[@]}"
fi
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
run_parallel install_one "${services[@]}" "${tools[@]}"
log "install: done in $(elapsed "$t0") s"
