# shellcheck shell=bash
# Shared helpers for the infra/ scripts. Sourced, never run.
#
# Every script resolves the repository root from its own path, so they work from any cwd.
# Everything they write lives under the repository's git-ignored .cache/ (installed software)
# and var/ (data, logs, PID files), never in system locations (except the Debian redis package).

# Sourcing twice would re-run the service definitions; once is enough.
if [[ -n "${_TRIGGER_INFRA_LIB:-}" ]]; then
    return 0
fi
_TRIGGER_INFRA_LIB=1

INFRA_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)"
REPO_ROOT="$(cd -- "$INFRA_DIR/.." && pwd -P)"
CACHE_DIR="$REPO_ROOT/.cache"
VAR_DIR="$REPO_ROOT/var"
RUN_DIR="$VAR_DIR/run"
LOG_DIR="$VAR_DIR/log"
export INFRA_DIR REPO_ROOT CACHE_DIR VAR_DIR RUN_DIR LOG_DIR

# All services the scripts know, in start order.
ALL_SERVICES=(redis cassandra localstack)
# Tools: installed by infra/install.sh when named (never started, stopped or reported by
# status): chromium for the ops console's browser test, prometheus for promtool (the alert
# rules' tests); `make test` asks for both. containers: podman, buildah, runc, mmdebstrap
# (`make image` and `make test-deploy` ask for it).
ALL_TOOLS=(chromium prometheus containers)

# --- messages (stderr, so stdout stays clean for callers that capture it) -----------------------

_ts() { date +%H:%M:%S; }
log()  { printf '[%s] %s\n' "$(_ts)" "$*" >&2; }
warn() { printf '[%s] WARNING: %s\n' "$(_ts)" "$*" >&2; }
die()  { printf '[%s] ERROR: %s\n' "$(_ts)" "$*" >&2; exit 1; }

# Seconds since the epoch with milliseconds, for timings.
now() { date +%s.%3N; }
# elapsed START -> "12.3"
elapsed() { awk -v s="$1" -v e="$(now)" 'BEGIN { printf "%.1f", e - s }'; }

ensure_dirs() { mkdir -p "$RUN_DIR" "$LOG_DIR"; }

# --- ports -------------------------------------------------------------------------------------

# url_port URL DEFAULT: the explicit port of URL (scheme://[user@]host:port/...), else DEFAULT.
url_port() {
    local rest="${1#*://}"
    rest="${rest%%/*}"
    rest="${rest##*@}"
    if [[ "$rest" =~ :([0-9]+)$ ]]; then echo "${BASH_REMATCH[1]}"; else echo "$2"; fi
}

# port_open PORT [HOST]: true if something accepts TCP connections on HOST:PORT (HOST defaults
# to 127.0.0.1; a ring node listens on 127.0.0.N). Uses bash's /dev/tcp so no extra tool is
# needed; the subshell bounds it with timeout(1).
port_open() {
    timeout 2 bash -c "exec 3<>/dev/tcp/${2:-127.0.0.1}/$1" 2>/dev/null
}

# --- PID files ---------------------------------------------------------------------------------
# A PID file is only trusted if the process is alive AND its command line still contains the
# service's marker string: a PID can be reused by an unrelated process after a reboot or crash,
# and down.sh must never signal anything that is not ours. The markers contain this checkout's
# path, so another checkout's instance (e.g. a CI clone) never passes for ours either.

pid_file() { printf '%s/%s.pid' "$RUN_DIR" "$1"; }
# The port a running instance was started with (its PID file's companion): the configured port
# may have changed since, and a running instance must then not pass for the requested one.
port_file() { printf '%s/%s.port' "$RUN_DIR" "$1"; }
read_port() {
    local f
    f="$(port_file "$1")"
    [[ -f "$f" ]] && tr -dc '0-9' <"$f"
    return 0
}

# read_pid NAME: print the PID from the PID file (empty if none or garbage).
read_pid() {
    local f pid
    f="$(pid_file "$1")"
    [[ -f "$f" ]] || return 0
    pid="$(tr -dc '0-9' <"$f" 2>/dev/null || true)"
    printf '%s' "$pid"
}

# pid_matches PID MARKER: process PID is alive and its command line contains MARKER.
pid_matches() {
    local pid="$1" marker="$2" cmdline
    [[ -n "$pid" && -r "/proc/$pid/cmdline" ]] || return 1
    cmdline="$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null || true)"
    [[ "$cmdline" == *"$marker"* ]]
}

# our_pid NAME MARKER: print our live PID for NAME, or nothing (and remove a stale PID file).
our_pid() {
    local name="$1" marker="$2" pid
    pid="$(read_pid "$name")"
    if [[ -n "$pid" ]] && pid_matches "$pid" "$marker"; then
        printf '%s' "$pid"
        return 0
    fi
    rm -f "$(pid_file "$name")" "$(port_file "$name")"
    return 0
}

# rotate_log FILE: keep exactly one previous log, so each start's log is small and the tail
# printed on a timeout belongs to this start.
rotate_log() {
    if [[ -s "$1" ]]; then
        mv -f "$1" "$1.1"
    fi
}

# print_log_tail NAME FILE: the last 40 lines of a service log, to stderr. Lines are cut at
# 500 characters (Cassandra logs its classpath as one line of several KB).
print_log_tail() {
    local name="$1" file="$2"
    {
        printf -- '----- last 40 lines of %s (%s) -----\n' "$name" "$file"
        if [[ -f "$file" ]]; then tail -n 40 "$file" | cut -c1-500; else echo "(no log file)"; fi
        printf -- '----- end of %s log -----\n' "$name"
    } >&2
}

# stop_pid NAME MARKER: TERM our process, wait up to 30 s, then KILL. Removes the PID file.
stop_pid() {
    local name="$1" marker="$2" pid i
    pid="$(our_pid "$name" "$marker")"
    if [[ -z "$pid" ]]; then
        log "$name: not running (no live PID file)"
        return 0
    fi
    log "$name: stopping pid $pid (TERM)"
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 300; i++)); do
        pid_matches "$pid" "$marker" || break
        sleep 0.1
    done
    if pid_matches "$pid" "$marker"; then
        warn "$name: pid $pid still alive after 30 s, sending KILL"
        kill -KILL "$pid" 2>/dev/null || true
        for ((i = 0; i < 50; i++)); do
            pid_matches "$pid" "$marker" || break
            sleep 0.1
        done
    fi
    rm -f "$(pid_file "$name")" "$(port_file "$name")"
    log "$name: stopped"
}

# spawn_detached NAME LOGFILE CMD...: start CMD in its own session (so it outlives the calling
# shell and its terminal), stdout+stderr appended to LOGFILE, PID written to var/run/NAME.pid.
# The small sh wrapper writes its own PID and then execs the command, so the PID file holds the
# service's real PID (no intermediate process to get wrong).
spawn_detached() {
    local name="$1" logfile="$2"
    shift 2
    local pidf
    pidf="$(pid_file "$name")"
    rm -f "$pidf"
    # 9>&-: don't hand the infra lock (fd 9, see take_lock) to a long-lived service.
    # shellcheck disable=SC2016 # $$ and $@ are for the inner sh
    setsid sh -c 'echo $$ > "$0"; exec "$@"' "$pidf" "$@" >>"$logfile" 2>&1 </dev/null 9>&- &
    # Wait (briefly) for the wrapper to have written the PID file.
    local i
    for ((i = 0; i < 50; i++)); do
        [[ -s "$pidf" ]] && return 0
        sleep 0.1
    done
    die "$name: process did not write its PID file $pidf"
}

# run_parallel FN ARG...: run "FN ARG" for every ARG at once in background subshells, wait for
# all of them, and fail (after all have finished) if any failed.
run_parallel() {
    local fn="$1"
    shift
    local -a pids=() names=()
    local arg pid i failed=()
    for arg in "$@"; do
        ( "$fn" "$arg" ) &
        pids+=("$!")
        names+=("$arg")
    done
    for i in "${!pids[@]}"; do
        if ! wait "${pids[$i]}"; then
            failed+=("${names[$i]}")
        fi
    done
    if ((${#failed[@]})); then
        printf '[%s] ERROR: failed: %s\n' "$(_ts)" "${failed[*]}" >&2
        return 1
    fi
}

# apt_install LOGNAME PKG...: `apt-get update` (at most once per infra script run) and
# `apt-get install` of PKG as root (or through sudo). Installs run one at a time (a lock file;
# apt's own lock fails instead of waiting), so several components may call this in parallel.
# apt's chatter goes to var/log/install-LOGNAME.log, shown only if something fails.
APT_RUN_ID="${APT_RUN_ID:-$$}"
export APT_RUN_ID
apt_install() {
    local name="$1"
    shift
    local sudo=()
    if [[ "$(id -u)" != 0 ]]; then
        command -v sudo >/dev/null 2>&1 || die "$name: $* missing and we are not root (no sudo either)"
        sudo=(sudo)
    fi
    ensure_dirs
    local aptlog="$LOG_DIR/install-$name.log" stamp="$RUN_DIR/.apt-updated"
    local apt=("${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -q -o DPkg::Lock::Timeout=600)
    if ! (
        exec 8>"$RUN_DIR/.apt.lock"
        flock -w 900 8 || exit 1
        if [[ "$(cat "$stamp" 2>/dev/null)" != "$APT_RUN_ID" ]]; then
            "${apt[@]}" update && echo "$APT_RUN_ID" >"$stamp"
        fi &&
            "${apt[@]}" install -y --no-install-recommends "$@"
    ) >"$aptlog" 2>&1 9>&-; then
        print_log_tail "apt-get" "$aptlog"
        die "$name: apt-get failed (full output: $aptlog)"
    fi
}

# --- the secure variants (infra/secure.sh): throwaway TLS material and credentials -------------
# One CA and one server certificate (IP SANs 127.0.0.1 and the secure Cassandra's address, so a
# client that checks hostnames accepts either service) and the passwords, made once under
# var/secure/ and reused by every later start. Never for production: the CA key sits beside it.

SECURE_DIR="$VAR_DIR/secure"
SECURE_CASSANDRA_ADDRESS="${CASSANDRA_SECURE_ADDRESS:-127.0.0.9}"
export SECURE_DIR SECURE_CASSANDRA_ADDRESS

# secure_secret NAME: a random password kept in var/secure/NAME (made on first use), printed.
secure_secret() {
    local f="$SECURE_DIR/$1"
    if [[ ! -s "$f" ]]; then
        mkdir -p "$SECURE_DIR"
        (umask 077 && openssl rand -hex 16 >"$f.tmp" && mv -f "$f.tmp" "$f")
    fi
    cat "$f"
}

# secure_tls: var/secure/{ca.pem,server.pem,server.key,server.p12} exist (made if missing; the
# PKCS12 keystore, for Cassandra, is locked with the password in var/secure/keystore-password).
secure_tls() {
    local d="$SECURE_DIR"
    [[ -s "$d/ca.pem" && -s "$d/server.pem" && -s "$d/server.key" && -s "$d/server.p12" ]] && return 0
    command -v openssl >/dev/null 2>&1 || die "secure: openssl not found (it makes the throwaway CA)"
    mkdir -p "$d"
    local tmp="$d/tls.tmp" pass
    pass="$(secure_secret keystore-password)"
    rm -rf "$tmp"
    mkdir -p "$tmp"
    (
        umask 077
        cd "$tmp" || exit 1
        openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=trigger-service local test CA" \
            -keyout ca.key -out ca.pem &&
            openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" -keyout server.key -out server.csr &&
            printf 'subjectAltName=IP:127.0.0.1,IP:%s,DNS:localhost\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' \
                "$SECURE_CASSANDRA_ADDRESS" >server.ext &&
            openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 3650 \
                -extfile server.ext -out server.pem &&
            openssl pkcs12 -export -in server.pem -inkey server.key -name server \
                -passout "pass:$pass" -out server.p12
    ) >"$LOG_DIR/secure-tls.log" 2>&1 || {
        print_log_tail openssl "$LOG_DIR/secure-tls.log"
        die "secure: could not make the TLS material"
    }
    mv -f "$tmp"/{ca.key,ca.pem,server.key,server.pem,server.p12} "$d/"
    rm -rf "$tmp"
    log "secure: made a throwaway CA and server certificate in $d"
}

# Service definitions: each file defines <name>_install, <name>_installed, <name>_start,
# <name>_ready, <name>_marker, <name>_port, <name>_timeout and <name>_log.
for _svc in "${ALL_SERVICES[@]}"; do
    # shellcheck source=/dev/null
    source "$INFRA_DIR/services/$_svc.sh"
done
unset _svc
# Tool definitions: each file defines <name>_install and <name>_installed.
for _tool in "${ALL_TOOLS[@]}"; do
    # shellcheck source=/dev/null
    source "$INFRA_DIR/tools/$_tool.sh"
done
unset _tool

# check_service_name NAME: die unless NAME is a known service.
check_service_name() {
    local s
    for s in "${ALL_SERVICES[@]}"; do
        [[ "$s" == "$1" ]] && return 0
    done
    die "unknown service '$1' (known: ${ALL_SERVICES[*]} all)"
}

# service_state NAME: print running | starting | stopped | foreign.
#   running  - our PID is alive and the service answers its readiness check (on the port it
#              was started with, see port_file)
#   starting - our PID is alive but not (yet) ready
#   foreign  - no process of ours, but something else listens on the configured port
#   stopped  - nothing
service_state() {
    local name="$1" pid port
    pid="$(our_pid "$name" "$("${name}_marker")")"
    if [[ -n "$pid" ]]; then
        port="$(read_port "$name")"
        if "${name}_ready" ${port:+"$port"} >/dev/null 2>&1; then echo running; else echo starting; fi
    elif port_open "$("${name}_port")"; then
        echo foreign
    else
        echo stopped
    fi
}

# take_lock: serialize the infra scripts (two concurrent up.sh runs must not both start a
# service; install must not run twice into the same folder). Held until the script exits.
take_lock() {
    ensure_dirs
    exec 9>"$RUN_DIR/.infra.lock"
    if ! flock -n 9; then
        log "waiting for another infra script to finish (lock $RUN_DIR/.infra.lock)"
        flock -w 900 9 || die "could not take $RUN_DIR/.infra.lock within 15 min"
    fi
}

# services_from_args ARG...: expand "all" (or nothing) to every service, check the names.
services_from_args() {
    local a
    if (($# == 0)); then
        printf '%s\n' "${ALL_SERVICES[@]}"
        return 0
    fi
    for a in "$@"; do
        if [[ "$a" == all ]]; then
            printf '%s\n' "${ALL_SERVICES[@]}"
        else
            check_service_name "$a"
            printf '%s\n' "$a"
        fi
    done | awk '!seen[$0]++'
}

# read_service_args HELP_LINES ARGS...: for -h/--help print lines HELP_LINES of the calling
# script (its header comment) and exit; otherwise fill the array `services` from ARGS. An
# unknown name stops the script (services_from_args dies in the command substitution).
read_service_args() {
    local lines="$1" list
    shift
    case "${1:-}" in
        -h | --help)
            sed -n "${lines}p" "$0" | sed 's/^# \{0,1\}//'
            exit 0
            ;;
    esac
    list="$(services_from_args "$@")" || exit 1
    mapfile -t services <<<"$list"
}
