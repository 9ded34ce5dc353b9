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
