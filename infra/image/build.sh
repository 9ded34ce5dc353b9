#!/usr/bin/env bash
# Build the service's container image, localhost/trigger-service:<version> and :latest
# (<version> from pyproject.toml), from this checkout, without any image registry:
#   infra/image/build.sh            (`make image`)
# 1. base:     a minimal Debian bookworm root filesystem with python3 (3.11) and ca-certificates,
#              made by mmdebstrap from Debian's packages; no docs, man pages, locales or apt
#              lists; the user `trigger` (10001), /etc/trigger-service (mount the callers and
#              key files there), /var/lib/trigger-service (its working directory). Cached as
#              var/image/cache/base-<key>.tar, <key> the hash of what goes in.
# 2. the service's wheel, built from the checkout's files that go in (IMAGE_INPUTS).
# 3. wheels:   its dependencies as wheels, resolved by the image's python (pip from PyPI, run in
#              the base), cached in var/image/wheels/ and fetched again only when the
#              dependencies in pyproject.toml or the base change; pip's own wheel beside them (it installs, is not installed).
# 4. app:      in the base, a virtualenv /opt/trigger-service/venv holding the wheels (offline,
#              no pip left in it), the Cassandra schema files and the healthcheck: app.tar.
# 5. the image: infra/image/Containerfile (FROM scratch, ADD base.tar, ADD app.tar) by
#              `podman build`: two layers, the base's reused while it does not change.
# When nothing that goes in changed (the label trigger-service.inputs), steps 3-5 are skipped.
# Installs podman, buildah, runc and mmdebstrap with apt-get when missing (infra/install.sh
# containers). Needs root (mmdebstrap's root mode and chroot).
set -euo pipefail
# shellcheck source=infra/lib.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/../lib.sh"

IMAGE_NAME="${IMAGE_NAME:-localhost/trigger-service}"
PYTHON="${PYTHON:-$REPO_ROOT/.venv/bin/python}"
[[ -x "$PYTHON" ]] || PYTHON="$(command -v python3)"
SUITE=bookworm
# python3 is the interpreter and its standard library; ca-certificates for HTTPS callbacks and
# the stores' TLS. Nothing else: the essential set brings dpkg, bash and coreutils. usrmerge
# (and with it all of perl but the essential perl-base) is purged once the /usr merge is done.
BASE_PACKAGES=(python3 ca-certificates usr-is-merged)
APP=/opt/trigger-service
BOTOCORE_SERVICES=(sqs ses kms sts sso sso-oidc)
IMAGE_DIR="$VAR_DIR/image"
CACHE="$IMAGE_DIR/cache"
WHEELS="$IMAGE_DIR/wheels"
BUILD="$IMAGE_DIR/build"
# Fixed times in the image (files, layer) so the same inputs give the same bytes.
export SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-1767225600}"  # 2026-01-01

[[ "$(id -u)" == 0 ]] || die "image: run as root (mmdebstrap and chroot need it)"
"$INFRA_DIR/install.sh" containers
t_all="$(now)"

version="$(sed -n 's/^version = "\(.*\)"$/\1/p' "$REPO_ROOT/pyproject.toml" | head -1)"
[[ -n "$version" ]] || die "image: no version in pyproject.toml"

# The apt sources of this machine (the Debian mirror it is configured for).
sources=()
for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
    [[ -s "$f" ]] && grep -qv '^\s*\(#\|$\)' "$f" && sources+=("$f")
done
((${#sources[@]})) || die "image: no apt sources under /etc/apt"

sha() { sha256sum | cut -c1-16; }

# --- 1. base root filesystem -------------------------------------------------------------------
base_key="$( {
    echo "$SUITE ${BASE_PACKAGES[*]} $SOURCE_DATE_EPOCH"
    sed -n '/^make_base()/,/^}/p' "${BASH_SOURCE[0]}"
    cat "${sources[@]}"
} | sha)"
base_tar="$CACHE/base-$base_key.tar"
make_base() {
    local tmp="$CACHE/making-$base_key.tar"  # .tar: mmdebstrap writes a tarball
    # shellcheck disable=SC2016 # the hooks' "$1" (the root) is mmdebstrap's to expand
    mmdebstrap --quiet --variant=essential --include="$(IFS=,; echo "${BASE_PACKAGES[*]}")" \
        --dpkgopt='path-exclude=/usr/share/doc/*' \
        --dpkgopt='path-include=/usr/share/doc/*/copyright' \
        --dpkgopt='path-exclude=/usr/share/man/*' \
        --dpkgopt='path-exclude=/usr/share/info/*' \
        --dpkgopt='path-exclude=/usr/share/locale/*' \
        --dpkgopt='path-exclude=/usr/share/lintian/*' \
        --customize-hook='rm -rf "$1"/var/cache/apt/* "$1"/var/lib/apt/lists/* "$1"/var/log/*.log "$1"/var/cache/debconf/*-old' \
        --customize-hook='chroot "$1" dpkg --purge --force-depends usrmerge libfile-find-rule-perl libnumber-compare-perl libtext-glob-perl perl perl-modules-5.36 libperl5.36 libgdbm-compat4 >/dev/null' \
        --customize-hook='find "$1"/usr/lib/python3* -name "test" -maxdepth 2 -type d -exec rm -rf {} +' \
        --customize-hook='echo "trigger:x:10001:10001:trigger-service:/var/lib/trigger-service:/usr/sbin/nologin" >>"$1"/etc/passwd' \
        --customize-hook='echo "trigger:x:10001:" >>"$1"/etc/group; echo "trigger:!:20454::::::" >>"$1"/etc/shadow' \
        --customize-hook='mkdir -p "$1"/etc/trigger-service "$1"/var/lib/trigger-service "$1"/opt/trigger-service' \
        --customize-hook='chown 10001:10001 "$1"/var/lib/trigger-service; rm -f "$1"/etc/resolv.conf "$1"/etc/hostname' \
        "$SUITE" "$tmp" "${sources[@]}"
    mv -f "$tmp" "$base_tar"
}
mkdir -p "$CACHE"
if [[ -s "$base_tar" ]]; then
    log "image: base root filesystem cached ($(basename "$base_tar"))"
else
    t0="$(now)"
    log "image: making the base root filesystem (mmdebstrap $SUITE: ${BASE_PACKAGES[*]})"
    make_base
    find "$CACHE" -name 'base-*.tar' ! -name "$(basename "$base_tar")" -delete
    log "image: base made in $(elapsed "$t0") s ($(du -h "$base_tar" | cut -f1))"
fi

# --- 2. the service's wheel --------------------------------------------------------------------
# Built from a copy of the checkout's files that go into the image (tracked, or new and not
# ignored): never from a stale build/ or anything git-ignored; a change elsewhere (tests, docs)
# leaves the image as it is.
IMAGE_INPUTS=(pyproject.toml trigger_service dispatcher sweeper reconciler infra/cql infra/image)
rm -rf "$BUILD"
mkdir -p "$BUILD/src" "$BUILD/dist"
(cd "$REPO_ROOT" && git ls-files -z --cached --others --exclude-standard -- "${IMAGE_INPUTS[@]}" |
    while IFS= read -r -d '' f; do [[ -e "$f" ]] && printf '%s\0' "$f"; done |
    tar --null -T - -cf -) | tar -xf - -C "$BUILD/src"
# The dependency wheels are resolved by the image's own python (markers such as
# python_full_version < "3.11.3" must be judged by it, not by this machine's python).
wheels_key="$( {
    echo "$base_key"
    "$PYTHON" -c 'import sys, tomllib; p = tomllib.load(open(sys.argv[1], "rb"))["project"]
print(p["requires-python"], p["dependencies"])' "$REPO_ROOT/pyproject.toml"
} | sha)"
inputs_key="$( {
    echo "$base_key $wheels_key $version"
    (cd "$BUILD/src" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum)
} | sha)"
current="$(podman image inspect "$IMAGE_NAME:$version" \
    --format '{{index .Labels "trigger-service.inputs"}}' 2>/dev/null || true)"
if [[ "$current" == "$inputs_key" ]]; then
    podman tag "$IMAGE_NAME:$version" "$IMAGE_NAME:latest"
    rm -rf "$BUILD"
    log "image: $IMAGE_NAME:$version is up to date (inputs $inputs_key); done in $(elapsed "$t_all") s"
    exit 0
fi
t0="$(now)"
"$PYTHON" -m pip wheel -q --no-deps --no-build-isolation --wheel-dir "$BUILD/dist" "$BUILD/src" \
    2>"$BUILD/wheel.log" ||
    "$PYTHON" -m pip wheel -q --no-deps --wheel-dir "$BUILD/dist" "$BUILD/src" ||
    die "image: building the service's wheel failed"
wheel="$(ls "$BUILD"/dist/trigger_service-*.whl)"
log "image: built $(basename "$wheel") in $(elapsed "$t0") s"

# --- 4. the service's layer --------------------------------------------------------------------
t0="$(now)"
root="$BUILD/rootfs"
mkdir -p "$root"
tar -xpf "$base_tar" -C "$root"
pyver="$(chroot "$root" python3 -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])')"
chroot "$root" python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' ||
    die "image: the base's python3 is $pyver; the service needs >= 3.11"
chroot "$root" python3 -m venv --without-pip "$APP/venv"
mkdir -p "$root/tmp/wheels" "$root/tmp/dist" "$WHEELS"
cp "$wheel" "$root/tmp/dist/"
[[ -n "$(ls "$WHEELS"/pip-*.whl 2>/dev/null)" ]] ||
    "$PYTHON" -m pip download -q --only-binary :all: --no-deps --dest "$WHEELS" pip ||
    die "image: pip download pip failed"
pipwhls=("$WHEELS"/pip-*.whl)
pipwhl="$(basename "${pipwhls[0]}")"
mount --bind "$WHEELS" "$root/tmp/wheels"
trap 'umount "$root/tmp/wheels" 2>/dev/null || true' EXIT
# pip runs from its own wheel (python pip.whl/pip), so it is never installed in the image.
in_root_pip() {
    chroot "$root" env -i PATH=/usr/bin:/bin HOME=/tmp PIP_DISABLE_PIP_VERSION_CHECK=1 \
        PIP_CERT=/tmp/ca.pem PIP_DEFAULT_TIMEOUT=120 \
        "$APP/venv/bin/python" "/tmp/wheels/$pipwhl/pip" "$@" >>"$BUILD/install.log" 2>&1 || {
        print_log_tail pip "$BUILD/install.log"
        die "image: pip $1 in the image's root filesystem failed"
    }
}
if [[ "$(cat "$WHEELS/.key" 2>/dev/null)" == "$wheels_key" ]]; then
    log "image: dependency wheels cached (var/image/wheels)"
else
    t1="$(now)"
    log "image: fetching the dependency wheels (pip from PyPI, into var/image/wheels)"
    cp /etc/resolv.conf "$root/etc/resolv.conf"
    cp "${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}" "$root/tmp/ca.pem"
    in_root_pip wheel -q --wheel-dir /tmp/wheels --find-links /tmp/wheels \
        "/tmp/dist/$(basename "$wheel")"
    rm -f "$WHEELS"/trigger_service-*.whl "$root/tmp/ca.pem"
    echo "$wheels_key" >"$WHEELS/.key"
    log "image: wheels fetched in $(elapsed "$t1") s"
fi
in_root_pip install -q --no-compile --no-index --find-links /tmp/wheels \
    "/tmp/dist/$(basename "$wheel")"
umount "$root/tmp/wheels"
trap - EXIT
rm -rf "$root/tmp/wheels" "$root/tmp/dist"
site="$(echo "$root$APP"/venv/lib/python3*/site-packages)"
# The Cassandra schema files (trigger-migrate applies them): the service looks for them beside
# its packages, at <site-packages>/infra/cql (trigger_service/config/stores.py).
mkdir -p "$site/infra"
cp -r "$BUILD/src/infra/cql" "$site/infra/cql"
install -m 0755 "$BUILD/src/infra/image/healthcheck.py" "$root/usr/local/bin/trigger-healthcheck"
# botocore's models of the AWS services the service calls (SQS, SES, KMS) and of those the
# credential chain may (STS for web-identity roles, SSO): the other ~400 are 24 MB it never reads.
for d in "$site"/botocore/data/*/; do
    [[ " ${BOTOCORE_SERVICES[*]} " == *" $(basename "$d") "* ]] || rm -rf "$d"
done
# Bytecode that never looks at the sources' times (unchecked-hash): the layer's times are
# clamped to SOURCE_DATE_EPOCH, which would make timestamped .pyc files stale (every start
# recompiling in memory), and the same sources give the same bytes.
chroot "$root" "$APP/venv/bin/python" -m compileall -q -j 0 --invalidation-mode unchecked-hash \
    "${site#"$root"}" >>"$BUILD/install.log" 2>&1 || {
    print_log_tail compileall "$BUILD/install.log"
    die "image: compiling the virtualenv's bytecode failed"
}
# No compiler, no docs, no caches; the tests of the packages are not needed either.
find "$site" -depth -type d \( -name tests -o -name test \) -path '*/site-packages/*/*' \
    ! -path '*/trigger_service/*' -exec rm -rf {} + 2>/dev/null || true
# The image's second layer: what this step added (the base is the first, unchanged).
tar --sort=name --numeric-owner --mtime="@$SOURCE_DATE_EPOCH" --clamp-mtime \
    -cf "$BUILD/app.tar" -C "$root" ./opt/trigger-service ./usr/local/bin/trigger-healthcheck
ln -f "$base_tar" "$BUILD/base.tar" 2>/dev/null || cp "$base_tar" "$BUILD/base.tar"
rm -rf "$root"
log "image: the service's layer (python $pyver) in $(elapsed "$t0") s ($(du -h "$BUILD/app.tar" | cut -f1) uncompressed)"

# --- 5. the image ------------------------------------------------------------------------------
t0="$(now)"
old_id="$(podman image inspect "$IMAGE_NAME:$version" --format '{{.Id}}' 2>/dev/null || true)"
cp "$REPO_ROOT/infra/image/Containerfile" "$BUILD/Containerfile"
podman build --quiet --format docker --timestamp "$SOURCE_DATE_EPOCH" \
    --label "org.opencontainers.image.title=trigger-service" \
    --label "org.opencontainers.image.version=$version" \
    --label "trigger-service.inputs=$inputs_key" \
    -t "$IMAGE_NAME:$version" -t "$IMAGE_NAME:latest" -f "$BUILD/Containerfile" "$BUILD" >/dev/null ||
    die "image: podman build failed"
rm -rf "$BUILD"
# The image these tags named before, now untagged, goes (only that one).
if [[ -n "$old_id" && "$old_id" != "$(podman image inspect "$IMAGE_NAME:$version" --format '{{.Id}}')" ]]; then
    podman rmi "$old_id" >/dev/null 2>&1 || true
fi
size="$(podman image inspect "$IMAGE_NAME:$version" --format '{{.Size}}')"
log "image: committed in $(elapsed "$t0") s"
log "image: $IMAGE_NAME:$version (and :latest), $((size / 1000000)) MB, python $pyver; done in $(elapsed "$t_all") s"
