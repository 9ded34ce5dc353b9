# shellcheck shell=bash
# Containers: Debian's podman, buildah, runc and mmdebstrap (and podman-compose), what
# `make image` (infra/image/build.sh) builds the service's image with and `make test-deploy`
# runs it with. No image registry is needed: the image is built `FROM scratch` on a root
# filesystem made from Debian's packages. A tool, not a service: installed, never started.
# Sourced by infra/lib.sh.

CONTAINERS_COMMANDS=(podman buildah runc mmdebstrap podman-compose)

containers_installed() {
    local c
    for c in "${CONTAINERS_COMMANDS[@]}"; do
        command -v "$c" >/dev/null 2>&1 || return 1
    done
}

containers_install() {
    if containers_installed; then
        return 0
    fi
    log "containers: installing Debian packages podman buildah runc mmdebstrap podman-compose (apt-get)"
    apt_install containers podman buildah runc mmdebstrap podman-compose uidmap fuse-overlayfs \
        slirp4netns
    containers_installed || die "containers: apt-get install finished but a command is missing"
    log "containers: installed $(podman --version 2>/dev/null || echo 'podman (version unknown)')"
}
