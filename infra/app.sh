#!/usr/bin/env bash
# Start or stop the service's own processes (API, dispatcher, sweepers, reconciler) in the
# background, with PID files and logs under var/, like infra/up.sh does for the dependencies.
#   infra/app.sh up       apply the schema, start every process, wait until the API is ready
#   infra/app.sh down     stop exactly the processes this script started
#   infra/app.sh status
# Every TRIGGER_* variable in the caller's environment reaches the processes. The sample
# receiver (infra/sample_receiver.py) listens on RECEIVER_PORT (9000); it is skipped with a
# warning when something else already uses that port.
# The provider sandbox (tests/providers.py: an SMTP sink on SANDBOX_SMTP_PORT 1025, a
# Twilio-format SMS API on 9201, an FCM-format push API on 9202 and a Telegram-format Bot API on
# 9203 (unless TRIGGER_TELEGRAM_BASE_URL is set), each printing what it gets
# to var/log/providers.log) runs unless TRIGGER_SMTP_HOST, TRIGGER_SMS_BASE_URL or
# TRIGGER_PUSH_BASE_URL is set: then the real providers are used (docs/channels.md "Providers").
# Metrics: every process writes prometheus_client's multiprocess files to
# PROMETHEUS_MULTIPROC_DIR (var/prometheus, emptied when no process of ours runs), so the API's
# /metrics shows the whole host; the Nth dispatcher / sweeper also serves its own /metrics on
# TRIGGER_DISPATCH_METRICS_PORT / TRIGGER_SWEEP_METRICS_PORT + N - 1 (0: none).
set -euo pipefail
source "$(dirname -- "${BASH_SOURCE[0]}")/lib.sh"

PYTHON="${PYTHON:-$REPO_ROOT/.venv/bin/python}"
API_HOST="${TRIGGER_API_HOST:-127.0.0.1}"
API_PORT="${TRIGGER_API_PORT:-8080}"
RECEIVER_PORT="${RECEIVER_PORT:-9000}"
RECEIVER_SCRIPT="$REPO_ROOT/infra/sample_receiver.py"
export PROMETHEUS_MULTIPROC_DIR="${PROMETHEUS_MULTIPROC_DIR:-$VAR_DIR/prometheus}"
# Production is the service's default (it then refuses the development tokens, secrets and
# LocalStack): this development stack asks for development, unless the caller chose.
export TRIGGER_ENV="${TRIGGER_ENV:-development}"
# (The names before this release, TRIGGER_DISPATCHER_METRICS_PORT, TRIGGER_SWEEPER_METRICS_PORT
# and TRIGGER_DISPATCHERS, are still read: deprecated aliases, as in the service.)
DISPATCHER_METRICS_PORT="${TRIGGER_DISPATCH_METRICS_PORT:-${TRIGGER_DISPATCHER_METRICS_PORT:-9101}}"
SWEEPER_METRICS_PORT="${TRIGGER_SWEEP_METRICS_PORT:-${TRIGGER_SWEEPER_METRICS_PORT:-9111}}"
SANDBOX_SMS_PORT="${SANDBOX_SMS_PORT:-9201}"
SANDBOX_PUSH_PORT="${SANDBOX_PUSH_PORT:-9202}"
SANDBOX_SMTP_PORT="${SANDBOX_SMTP_PORT:-1025}"
SANDBOX_TELEGRAM_PORT="${SANDBOX_TELEGRAM_PORT:-9203}"
SANDBOX=0
if [[ -z "${TRIGGER_SMTP_HOST:-}${TRIGGER_SMS_BASE_URL:-}${TRIGGER_PUSH_BASE_URL:-}" ]]; then
    SANDBOX=1
    export TRIGGER_SMTP_HOST=127.0.0.1 TRIGGER_SMTP_PORT="$SANDBOX_SMTP_PORT"
    export TRIGGER_SMS_BASE_URL="http://127.0.0.1:$SANDBOX_SMS_PORT"
    export TRIGGER_PUSH_BASE_URL="http://127.0.0.1:$SANDBOX_PUSH_PORT"
    if [[ -z "${TRIGGER_TELEGRAM_BASE_URL:-}" ]]; then
        # The simulator's token (config/providers.py DEV_TELEGRAM_TOKEN).
        export TRIGGER_TELEGRAM_BASE_URL="http://127.0.0.1:$SANDBOX_TELEGRAM_PORT"
        export TRIGGER_TELEGRAM_BOT_TOKEN="${TRIGGER_TELEGRAM_BOT_TOKEN:-123456789:dev-telegram-token}"
    fi
fi

# API processes sharing the port (SO_REUSEPORT; the kernel spreads connections over them):
# TRIGGER_API_WORKERS, 0 or unset for one per core. Dispatcher processes: TRIGGER_DISPATCH_PROCESSES.
API_WORKERS="${TRIGGER_API_WORKERS:-0}"
((API_WORKERS > 0)) || API_WORKERS="$(nproc)"
export TRIGGER_API_WORKERS="$API_WORKERS"
DISPATCHERS="${TRIGGER_DISPATCH_PROCESSES:-${TRIGGER_DISPATCHERS:-1}}"

# name:module, in start order (stopped in reverse). "receiver" runs a script, not a module.
# The first API process is "api" (its readiness is the stack's), the others api-2 ... api-N.
APPS=(receiver:receiver providers:tests.providers api:trigger_service)
for ((n = 2; n <= API_WORKERS; n++)); do APPS+=("api-$n:trigger_service"); done
for ((n = 1; n <= DISPATCHERS; n++)); do APPS+=("dispatcher-$n:dispatcher"); done
APPS+=(sweeper-1:sweeper sweeper-2:sweeper reconciler-1:reconciler)

# app_marker NAME MODULE: what the process's command line contains (see our_pid in lib.sh).
app_marker() { if [[ "$1" == receiver ]]; then echo "$RECEIVER_SCRIPT"; else echo "-m $2"; fi; }
app_command() {
    if [[ "$1" == receiver ]]; then
        echo "$PYTHON" "$RECEIVER_SCRIPT" --port "$RECEIVER_PORT"
    elif [[ "$1" == providers ]]; then
        echo "$PYTHON" -m tests.providers "$SANDBOX_SMS_PORT" "$SANDBOX_PUSH_PORT" \
            "$SANDBOX_SMTP_PORT" "$SANDBOX_TELEGRAM_PORT"
    elif [[ "$1" == dispatcher-* ]]; then
        # Its slot file: its successor after a crash proves it dead (dispatcher/succession.py).
        echo env "TRIGGER_DISPATCH_METRICS_PORT=$(nth_port "$DISPATCHER_METRICS_PORT" "$1")" \
            "TRIGGER_DISPATCH_SLOT_FILE=$RUN_DIR/$1.slot" "$PYTHON" -m "$2"
    elif [[ "$1" == sweeper-* ]]; then
        echo env "TRIGGER_SWEEP_METRICS_PORT=$(nth_port "$SWEEPER_METRICS_PORT" "$1")" \
            "$PYTHON" -m "$2"
    else
        echo "$PYTHON" -m "$2"
    fi
}

# nth_port BASE NAME-N: BASE + N - 1 (0 stays 0: no metrics port), so instances never collide.
nth_port() { if (($1 == 0)); then echo 0; else echo $(($1 + ${2##*-} - 1)); fi; }

# Empty the multiprocess metrics directory, unless a process of ours still writes to it
# (then its files must stay: they are its counters).
reset_metrics_dir() {
    local entry
    for entry in "${APPS[@]}"; do
        [[ "${entry%%:*}" == receiver || "${entry%%:*}" == providers ]] && continue
        if [[ -n "$(our_pid "${entry%%:*}" "$(app_marker "${entry%%:*}" "${entry#*:}")")" ]]; then
            mkdir -p "$PROMETHEUS_MULTIPROC_DIR"
            return 0
        fi
    done
    mkdir -p "$PROMETHEUS_MULTIPROC_DIR"
    rm -f "$PROMETHEUS_MULTIPROC_DIR"/*.db
}

# Whether one of our api-N processes runs: then the port is open because of it (it binds with
# SO_REUSEPORT) and "api", restarted after a crash, joins it.
other_api_workers_run() {
    local n
    for ((n = 2; n <= API_WORKERS; n++)); do
        [[ -n "$(our_pid "api-$n" "-m trigger_service")" ]] && return 0
    done
    return 1
}

api_ready() { curl -fsS -m 2 "http://$API_HOST:$API_PORT/readyz" >/dev/null 2>&1; }

app_up() {
    ensure_dirs
    [[ -x "$PYTHON" ]] || die "no $PYTHON: run 'make install' first"
    reset_metrics_dir
    # The development key-encryption key (var/encryption.keys; docs/operations/security.md "Encryption at rest"),
    # made once: a new one would leave every secret sealed before unreadable.
    (cd "$REPO_ROOT" && "$PYTHON" -m trigger_service.platform.keys add --if-missing) ||
        die "could not create the encryption key file"
    (cd "$REPO_ROOT" && "$PYTHON" -m trigger_service.migrate) || die "schema migration failed"
    local entry name module pid started=()
    for entry in "${APPS[@]}"; do
        name="${entry%%:*}"
        module="${entry#*:}"
        pid="$(our_pid "$name" "$(app_marker "$name" "$module")")"
        if [[ -n "$pid" ]]; then
            # Not ours to vouch for: only what this call starts is checked below (a process
            # that was running may be stopped meanwhile by someone else, e.g. an operator).
            log "$name: already running (pid $pid)"
            continue
        fi
        if [[ "$name" == api ]] && port_open "$API_PORT" && ! other_api_workers_run; then
            die "api: port $API_PORT is in use by a process app.sh did not start (set TRIGGER_API_PORT)"
        fi
        if [[ "$name" == providers ]] && ((SANDBOX == 0)); then
            continue  # real providers configured
        fi
        if [[ "$name" == providers ]] && port_open "$SANDBOX_SMS_PORT"; then
            warn "providers: port $SANDBOX_SMS_PORT is in use; no provider sandbox"
            continue
        fi
        if [[ "$name" == receiver ]] && port_open "$RECEIVER_PORT"; then
            warn "receiver: port $RECEIVER_PORT is in use; no sample receiver (set RECEIVER_PORT)"
            continue
        fi
        rotate_log "$LOG_DIR/$name.log"
        # shellcheck disable=SC2046 # the command is words without spaces
        (cd "$REPO_ROOT" && spawn_detached "$name" "$LOG_DIR/$name.log" $(app_command "$name" "$module"))
        log "$name: started (pid $(read_pid "$name"), log var/log/$name.log)"
        started+=("$entry")
    done
    local deadline=$(($(date +%s) + 60))
    until api_ready; do
        if [[ -z "$(our_pid api "-m trigger_service")" ]]; then
            print_log_tail api "$LOG_DIR/api.log"
            die "api: exited during start-up"
        fi
        (($(date +%s) < deadline)) || {
            print_log_tail api "$LOG_DIR/api.log"
            die "api: not ready after 60 s"
        }
        sleep 0.5
    done
    ((${#started[@]})) || return 0
    sleep 1  # let the processes just started fail fast if they are going to
    for entry in "${started[@]}"; do
        name="${entry%%:*}"
        module="${entry#*:}"
        if [[ -z "$(our_pid "$name" "$(app_marker "$name" "$module")")" ]]; then
            print_log_tail "$name" "$LOG_DIR/$name.log"
            die "$name: exited during start-up"
        fi
    done
}

app_down() {
    local i entry
    for ((i = ${#APPS[@]} - 1; i >= 0; i--)); do
        entry="${APPS[$i]}"
        stop_pid "${entry%%:*}" "$(app_marker "${entry%%:*}" "${entry#*:}")"
    done
    # Processes of a longer APPS list from an earlier checkout are stopped too.
    local f name
    for f in "$RUN_DIR"/api-*.pid "$RUN_DIR"/dispatcher-*.pid "$RUN_DIR"/sweeper-*.pid \
        "$RUN_DIR"/reconciler-*.pid; do
        [[ -e "$f" ]] || continue
        name="$(basename "$f" .pid)"
        if [[ "$name" == api-* ]]; then stop_pid "$name" "-m trigger_service"
        else stop_pid "$name" "-m ${name%-*}"; fi
    done
}

app_status() {
    local entry name pid
    for entry in "${APPS[@]}"; do
        name="${entry%%:*}"
        pid="$(our_pid "$name" "$(app_marker "$name" "${entry#*:}")")"
        if [[ -n "$pid" ]]; then echo "$name: running (pid $pid)"; else echo "$name: stopped"; fi
    done
}

case "${1:-}" in
    up) app_up ;;
    down) app_down ;;
    status) app_status ;;
    *)
        sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'
        exit 2
        ;;
esac
