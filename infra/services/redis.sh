# shellcheck shell=bash
# Redis: Debian's redis-server package, run as a private, memory-only instance on 127.0.0.1.
# Sourced by infra/lib.sh.

# The port comes from the service's own setting, so one variable moves both.
REDIS_PORT="$(url_port "${TRIGGER_REDIS_URL:-}" 6379)"
REDIS_DIR="$VAR_DIR/redis"

# redis rewrites its process title; --proc-title-template (redis_start) puts this tag in it.
redis_marker()  { echo "trigger-infra:$REDIS_DIR"; }
redis_port()    { echo "$REDIS_PORT"; }
redis_timeout() { echo "${REDIS_START_TIMEOUT:-10}"; }
redis_log()     { echo "$LOG_DIR/redis.log"; }

redis_installed() { command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1; }

redis_install() {
    if redis_installed; then
        return 0
    fi
    log "redis: installing Debian package redis-server (apt-get update + install)"
    # The image's policy-rc.d keeps apt from starting the system redis service; if one gets
    # started anyway, up.sh refuses to share its port (it only uses ports it did not find taken).
    apt_install redis redis-server
    redis_installed || die "redis: apt-get install finished but redis-server/redis-cli are still missing"
    log "redis: installed $(redis-server --version | sed -n 's/.* v=\([^ ]*\).*/\1/p')"
}

# redis_ready [PORT]: PING answers PONG.
redis_ready() { [[ "$(timeout 3 redis-cli -h 127.0.0.1 -p "${1:-$REDIS_PORT}" ping 2>/dev/null)" == PONG ]]; }

redis_start() {
    mkdir -p "$REDIS_DIR"
    rotate_log "$(redis_log)"
    # redis-server daemonizes itself and writes its own PID file. Paths must be absolute:
    # redis chdirs to --dir before it writes the PID file and the log. 9>&-: the daemon must not
    # inherit the infra lock (see take_lock). Its stdout/stderr only carry errors from before
    # it daemonizes (e.g. a bad option); they go to the same log.
    # shellcheck disable=SC2094
    if ! redis-server \
        --daemonize yes \
        --bind 127.0.0.1 \
        --port "$REDIS_PORT" \
        --save '' \
        --appendonly no \
        --maxmemory "${REDIS_MAXMEMORY:-256mb}" \
        --maxmemory-policy volatile-lru \
        --pidfile "$(pid_file redis)" \
        --logfile "$(redis_log)" \
        --dir "$REDIS_DIR" \
        --loglevel notice \
        --proc-title-template "{title} {listen-addr} $(redis_marker)" \
        >>"$(redis_log)" 2>&1 </dev/null 9>&-; then
        print_log_tail redis "$(redis_log)"
        die "redis: redis-server failed to start"
    fi
    # With --daemonize the parent exits at once; the PID file appears a moment later.
    local i
    for ((i = 0; i < 50; i++)); do
        [[ -s "$(pid_file redis)" ]] && return 0
        sleep 0.1
    done
    die "redis: redis-server did not write $(pid_file redis)"
}

# --- the secure instance (infra/secure.sh) -------------------------------------------------------
# A second redis-server on 127.0.0.1:REDIS_SECURE_PORT (6380), TLS only (no plaintext port), with
# the server certificate of var/secure/ (secure_tls in infra/lib.sh); the default user is off
# and the ACL user `trigger` (password in var/secure/redis-password) may run every command but
# the @dangerous ones. Memory only; var/redis-secure holds its config, var/run/redis-secure.pid.

REDIS_SECURE_PORT="${REDIS_SECURE_PORT:-6380}"
REDIS_SECURE_DIR="$VAR_DIR/redis-secure"

_redis_secure_marker() { echo "trigger-infra:$REDIS_SECURE_DIR"; }

# _redis_secure_ready: the ACL user PINGs over TLS, the server verified against the CA.
_redis_secure_ready() {
    [[ "$(REDISCLI_AUTH="$(secure_secret redis-password)" timeout 3 redis-cli --tls \
        --cacert "$SECURE_DIR/ca.pem" -h 127.0.0.1 -p "$REDIS_SECURE_PORT" --user trigger \
        ping 2>/dev/null)" == PONG ]]
}

# _redis_secure_conf: the instance's config file (0600: it holds the ACL password).
_redis_secure_conf() {
    local conf="$REDIS_SECURE_DIR/redis.conf"
    mkdir -p "$REDIS_SECURE_DIR"
    (
        umask 077
        cat >"$conf.tmp" <<CONF
bind 127.0.0.1
port 0
tls-port $REDIS_SECURE_PORT
tls-cert-file $SECURE_DIR/server.pem
tls-key-file $SECURE_DIR/server.key
tls-ca-cert-file $SECURE_DIR/ca.pem
tls-auth-clients no
save ""
appendonly no
maxmemory ${REDIS_MAXMEMORY:-256mb}
maxmemory-policy volatile-lru
daemonize yes
pidfile $(pid_file redis-secure)
logfile $LOG_DIR/redis-secure.log
dir $REDIS_SECURE_DIR
loglevel notice
proc-title-template "{title} {listen-addr} $(_redis_secure_marker)"
user default off
user trigger on >$(secure_secret redis-password) ~* &* +@all -@dangerous
CONF
        mv -f "$conf.tmp" "$conf"
    )
    echo "$conf"
}

# redis_secure_up: start the secure instance unless it runs (idempotent), wait until it answers.
redis_secure_up() {
    local pid conf i
    redis_installed || redis_install
    secure_tls
    pid="$(our_pid redis-secure "$(_redis_secure_marker)")"
    if [[ -z "$pid" ]]; then
        port_open "$REDIS_SECURE_PORT" &&
            die "redis-secure: port $REDIS_SECURE_PORT is in use by a process we did not start (set REDIS_SECURE_PORT)"
        conf="$(_redis_secure_conf)"
        rotate_log "$LOG_DIR/redis-secure.log"
        redis-server "$conf" >>"$LOG_DIR/redis-secure.log" 2>&1 </dev/null 9>&- || {
            print_log_tail redis-secure "$LOG_DIR/redis-secure.log"
            die "redis-secure: redis-server failed to start"
        }
    fi
    # read_pid + pid_matches, not our_pid: redis writes its PID file a moment before it sets
    # the process title that carries the marker, and our_pid would delete the file meanwhile.
    for ((i = 0; i < ${REDIS_START_TIMEOUT:-10} * 10; i++)); do
        pid="$(read_pid redis-secure)"
        if [[ -n "$pid" ]] && pid_matches "$pid" "$(_redis_secure_marker)" && _redis_secure_ready; then
            echo "redis-secure: ready on 127.0.0.1:$REDIS_SECURE_PORT, TLS + ACL user trigger (pid $pid)"
            return 0
        fi
        sleep 0.1
    done
    print_log_tail redis-secure "$LOG_DIR/redis-secure.log"
    die "redis-secure: not ready after ${REDIS_START_TIMEOUT:-10} s"
}

redis_secure_down() { stop_pid redis-secure "$(_redis_secure_marker)"; }

redis_secure_status() {
    local pid
    pid="$(our_pid redis-secure "$(_redis_secure_marker)")"
    if [[ -z "$pid" ]]; then
        echo "redis-secure: stopped"
        return 1
    fi
    if _redis_secure_ready; then
        echo "redis-secure: running (pid $pid, 127.0.0.1:$REDIS_SECURE_PORT, TLS)"
    else
        echo "redis-secure: starting (pid $pid, 127.0.0.1:$REDIS_SECURE_PORT not ready yet)"
        return 1
    fi
}

# redis_secure_env: the TRIGGER_* settings that connect to the secure instance.
redis_secure_env() {
    printf '%s\n' "TRIGGER_REDIS_URL=rediss://trigger:$(secure_secret redis-password)@127.0.0.1:$REDIS_SECURE_PORT/0" \
        "TRIGGER_REDIS_TLS_CA_FILE=$SECURE_DIR/ca.pem"
}
