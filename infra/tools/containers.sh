# shellcheck shell=bash
# Containers: Debian's podman, buildah, runc and mmdebstrap, what `make image`
# (infra/image/build.sh) builds the service's image with and `make test-deploy` runs it with,
# and podman-compose from PyPI in .cache/podman-compose-venv (Debian's 1.0.3 adds a bridge
# network to `network_mode: host` and fails). No image registry is needed: the image is built
# `FROM scratch` on a root filesystem made from Debian's packages. A tool, not a service:
# installed, never started. Sourced by infra/lib.sh.

CONTAINERS_COMMANDS=(podman buildah runc mmdebstrap)
PODMAN_COMPOSE_VENV="$CACHE_DIR/podman-compose-venv"
PODMAN_COMPOSE="$PODMAN_COMPOSE_VENV/bin/podman-compose"
PODMAN_COMPOSE_REQUIREMENT="podman-compose>=1.1,<2"

containers_installed() {
    local c
    for c in "${CONTAINERS_COMMANDS[@]}"; do
        command -v "$c" >/dev/null 2>&1 || return 1
    done
    # podman kube play's pod infra container is built around catatonit (no pause image here)
    command -v catatonit >/dev/null 2>&1 || [[ -x /usr/libexec/podman/catatonit ]] || return 1
    [[ -x "$PODMAN_COMPOSE" ]]
}

containers_install() {
    if containers_installed; then
        return 0
    fi
    local c missing=0
    for c in "${CONTAINERS_COMMANDS[@]}"; do
        command -v "$c" >/dev/null 2>&1 || missing=1
    done
    if ((missing)); then
        log "containers: installing Debian packages podman buildah runc mmdebstrap (apt-get)"
        apt_install containers podman buildah runc mmdebstrap uidmap fuse-overlayfs slirp4netns catatonit
    fi
    if [[ ! -x "$PODMAN_COMPOSE" ]]; then
        log "containers: installing $PODMAN_COMPOSE_REQUIREMENT into .cache/podman-compose-venv (pip)"
        ensure_dirs
        { "${PYTHON_BOOTSTRAP:-python3}" -m venv "$PODMAN_COMPOSE_VENV" &&
            "$PODMAN_COMPOSE_VENV/bin/python" -m pip install -q "$PODMAN_COMPOSE_REQUIREMENT"; } \
            >"$LOG_DIR/install-podman-compose.log" 2>&1 || {
            print_log_tail pip "$LOG_DIR/install-podman-compose.log"
            die "containers: installing podman-compose failed"
        }
    fi
    containers_installed || die "containers: installed, but a command is still missing"
    log "containers: $(podman --version 2>/dev/null), $("$PODMAN_COMPOSE" --version 2>/dev/null | head -1)"
}
