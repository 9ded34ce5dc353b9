# shellcheck shell=bash
# LocalStack (SQS, KMS and SES), run on the host from its own virtualenv. Sourced by infra/lib.sh.
#
# Its pins (localstack/requirements.txt) conflict with the project's dependencies, hence the
# separate venv in .cache/localstack-venv, re-installed when requirements.txt changes.

# The port comes from the service's own setting, so one variable moves both.
LOCALSTACK_PORT="$(url_port "${TRIGGER_SQS_ENDPOINT_URL:-${TRIGGER_SQS_ENDPOINT:-}}" 4566)"
LOCALSTACK_VENV="$CACHE_DIR/localstack-venv"
LOCALSTACK_REQS="$REPO_ROOT/localstack/requirements.txt"
LOCALSTACK_ENV_FILE="$REPO_ROOT/localstack/localstack.env"
LOCALSTACK_STAMP="$LOCALSTACK_VENV/.installed-requirements.sha256"

localstack_marker()  { echo "$LOCALSTACK_VENV/bin/python -m localstack.runtime.main"; }
localstack_port()    { echo "$LOCALSTACK_PORT"; }
localstack_timeout() { echo "${LOCALSTACK_START_TIMEOUT:-90}"; }
localstack_log()     { echo "$LOG_DIR/localstack.log"; }

_localstack_reqs_hash() { sha256sum "$LOCALSTACK_REQS" | awk '{print $1}'; }

localstack_installed() {
    [[ -x "$LOCALSTACK_VENV/bin/python" && -f "$LOCALSTACK_STAMP" ]] &&
        [[ "$(cat "$LOCALSTACK_STAMP")" == "$(_localstack_reqs_hash)" ]]
}

localstack_install() {
    if localstack_installed; then
        return 0
    fi
    local py="${LOCALSTACK_BASE_PYTHON:-python3}"
    command -v "$py" >/dev/null 2>&1 || die "localstack: $py not found (set LOCALSTACK_BASE_PYTHON)"
    log "localstack: installing localstack/requirements.txt into $LOCALSTACK_VENV (takes ~1-2 min)"
    # Start from a clean venv: a half-finished or outdated one is not worth repairing.
    rm -rf "$LOCALSTACK_VENV"
    "$py" -m venv "$LOCALSTACK_VENV"
    "$LOCALSTACK_VENV/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip >&2
    "$LOCALSTACK_VENV/bin/python" -m pip install -q --disable-pip-version-check \
        -r "$LOCALSTACK_REQS" >&2
    # Fail now, not at start time, if the runtime cannot even be imported (e.g. a Python too new
    # or too old for the pinned version). Run from / so the repo's localstack/ folder can't shadow it.
    (cd / && "$LOCALSTACK_VENV/bin/python" -c 'import localstack.runtime.main') ||
        die "localstack: the installed localstack-core does not import"
    _localstack_reqs_hash >"$LOCALSTACK_STAMP"
    log "localstack: installed $("$LOCALSTACK_VENV/bin/python" -m pip show localstack-core 2>/dev/null | awk '/^Version:/ {print $2}')"
}

# localstack_ready [PORT]: the health endpoint lists sqs, kms and ses as "running"
# (EAGER_SERVICE_LOADING=1 in localstack.env starts them at boot) or "available" (would be
# loaded on first use). A LocalStack started before kms or ses was added never gets ready:
# restart it (infra/down.sh localstack, then make up).
localstack_ready() {
    "$LOCALSTACK_VENV/bin/python" - "${1:-$LOCALSTACK_PORT}" <<'PY'
import json, sys, urllib.request
port = sys.argv[1]
with urllib.request.urlopen(f"http://127.0.0.1:{port}/_localstack/health", timeout=3) as r:
    health = json.load(r)
states = [health.get("services", {}).get(s) for s in ("sqs", "kms", "ses")]
sys.exit(0 if all(s in ("running", "available") for s in states) else 1)
PY
}

localstack_start() {
    local fsroot="$VAR_DIR/localstack"
    mkdir -p "$fsroot"
    rotate_log "$(localstack_log)"
    (
        # localstack.env is a bash fragment (it uses LOCALSTACK_PORT); export all it sets.
        export LOCALSTACK_PORT
        export LOCALSTACK_FILESYSTEM_ROOT="$fsroot"
        # localstack/compat/sitecustomize.py: a Python 3.11 fix its KMS needs (see there).
        export PYTHONPATH="$REPO_ROOT/localstack/compat${PYTHONPATH:+:$PYTHONPATH}"
        set -a
        # shellcheck source=/dev/null
        source "$LOCALSTACK_ENV_FILE"
        set +a
        # cwd = its own folder: `python -m` puts the cwd first on sys.path, and the repo root
        # has a localstack/ folder that must not shadow the package.
        cd "$fsroot" || exit 1
        spawn_detached localstack "$(localstack_log)" \
            "$LOCALSTACK_VENV/bin/python" -m localstack.runtime.main
    )
}
