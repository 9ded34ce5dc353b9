# shellcheck shell=bash
# Apache Cassandra 5.0 run straight from the Maven artifacts (no tarball, no package: none can be
# downloaded here): one node, or a local ring of CASSANDRA_NODES (2..3) nodes. Sourced by
# infra/lib.sh.
#
# Single node (CASSANDRA_NODES unset or 1): 127.0.0.1, data in var/cassandra, var/run/cassandra.pid,
#   var/log/cassandra.log.
# Ring (CASSANDRA_NODES=N, 2..3): node i listens on 127.0.0.i with the same native and storage
#   ports as the single node would, data in var/cassandra-ring/node<i>, var/run/cassandra-<i>.pid,
#   var/log/cassandra-<i>.log, a smaller heap (CASSANDRA_RING_HEAP, default -Xms512m -Xmx768m).
#   infra/up.sh starts the nodes that are not running (together) and waits until every node
#   answers CQL and sees all N nodes NORMAL with one schema version.
#   CASSANDRA_NODE=i limits infra/down.sh (and infra/up.sh) to node i; infra/down.sh without it
#   stops every node of ours, single or ring, whatever CASSANDRA_NODES says.

CASSANDRA_PORT="${TRIGGER_CASSANDRA_PORT:-9042}"
CASSANDRA_STORAGE_PORT="${CASSANDRA_STORAGE_PORT:-7000}"
CASSANDRA_NODES="${CASSANDRA_NODES:-1}"
CASSANDRA_NODE="${CASSANDRA_NODE:-}"
CASSANDRA_RING_MAX=3
CASSANDRA_RING_HEAP="${CASSANDRA_RING_HEAP:--Xms512m -Xmx768m}"
CASSANDRA_SECURE_HEAP="${CASSANDRA_SECURE_HEAP:--Xms256m -Xmx512m}"
CASSANDRA_CONF_SRC="$INFRA_DIR/cassandra"
CASSANDRA_LIB="$CACHE_DIR/cassandra/lib"
CASSANDRA_STAMP="$CACHE_DIR/cassandra/.installed-version"
CASSANDRA_HOME_DIR="$VAR_DIR/cassandra"
CASSANDRA_RING_DIR="$VAR_DIR/cassandra-ring"
# Java 17 exactly: Cassandra 5.0 supports 11 and 17 only, and this machine also has a newer JDK,
# so neither PATH nor JAVA_HOME decides. Debian's OpenJDK 17 (any architecture) unless set.
if [[ -z "${CASSANDRA_JAVA:-}" ]]; then
    CASSANDRA_JAVA="$(compgen -G '/usr/lib/jvm/java-17-openjdk-*/bin/java' | head -n 1 || true)"
    CASSANDRA_JAVA="${CASSANDRA_JAVA:-/usr/lib/jvm/java-17-openjdk-amd64/bin/java}"
fi
# The project's venv provides cassandra-driver for the readiness probe.
PYTHON="${PYTHON:-$REPO_ROOT/.venv/bin/python}"

# --- nodes: index 0 is the single node, 1..N the ring's, "secure" the secure node -------------
# (infra/secure.sh: its own cluster on CASSANDRA_SECURE_ADDRESS, 127.0.0.9 by default, with
# PasswordAuthenticator and TLS-only client connections; see cassandra_secure_up.)

_cassandra_name() {
    case "$1" in 0) echo cassandra ;; secure) echo cassandra-secure ;; *) echo "cassandra-$1" ;; esac
}
_cassandra_home() {
    case "$1" in
        0) echo "$CASSANDRA_HOME_DIR" ;;
        secure) echo "$VAR_DIR/cassandra-secure" ;;
        *) echo "$CASSANDRA_RING_DIR/node$1" ;;
    esac
}
_cassandra_addr() {
    case "$1" in 0) echo 127.0.0.1 ;; secure) echo "$SECURE_CASSANDRA_ADDRESS" ;; *) echo "127.0.0.$1" ;; esac
}
_cassandra_node_log() { echo "$LOG_DIR/$(_cassandra_name "$1").log"; }
# Its command line names its config file, which lives in this checkout.
_cassandra_node_marker() { echo "-Dcassandra.config=file://$(_cassandra_home "$1")/conf/cassandra.yaml"; }
_cassandra_ring() { ((CASSANDRA_NODES > 1)); }

# The generic service interface (infra/lib.sh) describes the single node; the ring has its own
# cassandra_up / cassandra_down / cassandra_status.
cassandra_marker()  { _cassandra_node_marker 0; }
cassandra_port()    { echo "$CASSANDRA_PORT"; }
cassandra_timeout() { echo "${CASSANDRA_START_TIMEOUT:-180}"; }
cassandra_log()     { _cassandra_node_log 0; }

# The version comes from the pom, so bumping it there is all it takes to re-resolve.
_cassandra_version() {
    sed -n 's:.*<cassandra.version>\(.*\)</cassandra.version>.*:\1:p' "$CASSANDRA_CONF_SRC/pom.xml"
}

cassandra_installed() {
    [[ -f "$CASSANDRA_STAMP" && "$(cat "$CASSANDRA_STAMP")" == "$(_cassandra_version)" ]] &&
        compgen -G "$CASSANDRA_LIB/cassandra-all-*.jar" >/dev/null &&
        compgen -G "$CASSANDRA_LIB/jamm-*.jar" >/dev/null
}

cassandra_install() {
    if cassandra_installed; then
        return 0
    fi
    local version
    version="$(_cassandra_version)"
    [[ -n "$version" ]] || die "cassandra: no <cassandra.version> in $CASSANDRA_CONF_SRC/pom.xml"
    command -v mvn >/dev/null 2>&1 || die "cassandra: mvn (Maven) not found"
    [[ -x "$CASSANDRA_JAVA" ]] || die "cassandra: Java 17 not found at $CASSANDRA_JAVA (set CASSANDRA_JAVA)"
    log "cassandra: resolving cassandra-all $version and its dependencies with Maven (first run downloads ~100 MB)"
    # Resolve into a fresh folder and swap it in, so an interrupted run never leaves a
    # half-populated lib/ that looks installed, and an old version's jars never linger.
    local tmp="$CACHE_DIR/cassandra/lib.tmp"
    rm -rf "$tmp"
    mkdir -p "$tmp"
    # Maven uses the platform JDK (17 here). Its output (Debian's Maven 3.8 prints stray colour
    # codes even with -q -B) goes to a log file that is shown only if it fails.
    ensure_dirs
    local mvnlog="$LOG_DIR/install-cassandra.log"
    if ! mvn -B -f "$CASSANDRA_CONF_SRC/pom.xml" dependency:copy-dependencies \
        -DoutputDirectory="$tmp" >"$mvnlog" 2>&1; then
        print_log_tail "mvn" "$mvnlog"
        die "cassandra: Maven failed (full output: $mvnlog)"
    fi
    compgen -G "$tmp/cassandra-all-$version.jar" >/dev/null ||
        die "cassandra: Maven finished but cassandra-all-$version.jar is missing"
    compgen -G "$tmp/jamm-*.jar" >/dev/null || die "cassandra: Maven finished but the jamm jar is missing"
    rm -rf "$CASSANDRA_LIB"
    mv "$tmp" "$CASSANDRA_LIB"
    echo "$version" >"$CASSANDRA_STAMP"
    log "cassandra: installed $version ($(find "$CASSANDRA_LIB" -name '*.jar' | wc -l) jars)"
    if [[ -n "$(our_pid cassandra "$(cassandra_marker)")" ]]; then
        warn "cassandra: a node is still running from the previous jars; restart it to use $version (infra/down.sh cassandra && infra/up.sh)"
    fi
}

# cassandra_ready [PORT]: a CQL query succeeds (port: the configured one by default).
cassandra_ready() {
    local port="${1:-$CASSANDRA_PORT}"
    [[ -x "$PYTHON" ]] || return 1
    port_open "$port" || return 1
    "$PYTHON" "$CASSANDRA_CONF_SRC/cql_probe.py" "$port" >/dev/null
}

# cassandra_preflight: what up.sh checks before starting or waiting, because without it the
# readiness wait could only time out.
cassandra_preflight() {
    [[ -x "$PYTHON" ]] || die "cassandra: $PYTHON not found: the readiness check needs the project venv with cassandra-driver (create .venv, or set PYTHON)"
    "$PYTHON" -c 'import cassandra.cluster' 2>/dev/null ||
        die "cassandra: $PYTHON cannot import cassandra-driver (install the project's dependencies into it)"
    [[ -x "$CASSANDRA_JAVA" ]] || die "cassandra: Java 17 not found at $CASSANDRA_JAVA (set CASSANDRA_JAVA)"
    "$CASSANDRA_JAVA" -version 2>&1 | grep -q 'version "17[."]' ||
        die "cassandra: $CASSANDRA_JAVA is not Java 17 (Cassandra 5.0 runs on 11 or 17; the flags here are for 17)"
}

# _cassandra_render_yaml NODE OUT: the node's cassandra.yaml from the template.
_cassandra_render_yaml() {
    local node="$1" out="$2" cluster=trigger-service-local seeds bootstrap=true hints=false j
    seeds="127.0.0.1:$CASSANDRA_STORAGE_PORT"
    if [[ "$node" == secure ]]; then
        # Its own one-node cluster: it never gossips with the single node or the ring.
        cluster=trigger-service-secure
        seeds="$SECURE_CASSANDRA_ADDRESS:$CASSANDRA_STORAGE_PORT"
    elif ((node > 0)); then
        cluster=trigger-service-ring
        bootstrap=false
        hints=true
        seeds=""
        for ((j = 1; j <= CASSANDRA_NODES; j++)); do
            seeds+="${seeds:+,}$(_cassandra_addr "$j"):$CASSANDRA_STORAGE_PORT"
        done
    fi
    sed -e "s|@CLUSTER_NAME@|$cluster|g" \
        -e "s|@ADDRESS@|$(_cassandra_addr "$node")|g" \
        -e "s|@SEEDS@|$seeds|g" \
        -e "s|@AUTO_BOOTSTRAP@|$bootstrap|g" \
        -e "s|@HINTED_HANDOFF@|$hints|g" \
        -e "s|@DATA_ROOT@|$(_cassandra_home "$node")|g" \
        -e "s|@NATIVE_PORT@|$CASSANDRA_PORT|g" \
        -e "s|@STORAGE_PORT@|$CASSANDRA_STORAGE_PORT|g" \
        "$CASSANDRA_CONF_SRC/cassandra.yaml.in" >"$out.tmp"
    [[ "$node" != secure ]] || _cassandra_secure_yaml "$out.tmp"
    mv -f "$out.tmp" "$out"
}

cassandra_start() { _cassandra_start_node 0; }

# _cassandra_start_node NODE: render the node's yaml and spawn its JVM (no wait).
_cassandra_start_node() {
    local node="$1" home addr name logf
    home="$(_cassandra_home "$node")"
    addr="$(_cassandra_addr "$node")"
    name="$(_cassandra_name "$node")"
    logf="$(_cassandra_node_log "$node")"
    # The inter-node port is bound too; a clash there would only show up in the log.
    if port_open "$CASSANDRA_STORAGE_PORT" "$addr"; then
        die "$name: storage port $CASSANDRA_STORAGE_PORT on $addr is in use by another process (set CASSANDRA_STORAGE_PORT)"
    fi
    local conf="$home/conf"
    mkdir -p "$conf" "$home"/{data,commitlog,saved_caches,hints,cdc_raw,triggers,tmp}
    _cassandra_render_yaml "$node" "$conf/cassandra.yaml"
    rotate_log "$logf"

    local jamm
    jamm="$(compgen -G "$CASSANDRA_LIB/jamm-*.jar" | head -n 1)"

    # JVM options file: one or two words per line, only lines starting with '-' (as Cassandra's
    # own launcher reads its jvm*.options). A ring node's smaller heap comes next; extra options
    # from the environment come last, so e.g. CASSANDRA_JVM_EXTRA_OPTS="-Xmx2g" wins over both.
    # (read -a splits "--add-opens X" into its two words without glob expansion.)
    local -a jvm_opts=() words=() extra=() heap=()
    local line
    while read -r line || [[ -n "$line" ]]; do
        [[ "$line" == -* ]] || continue
        read -r -a words <<<"$line"
        jvm_opts+=("${words[@]}")
    done <"$CASSANDRA_CONF_SRC/jvm17.options"
    case "$node" in
        0) ;;
        secure) read -r -a heap <<<"$CASSANDRA_SECURE_HEAP" ;;
        *) read -r -a heap <<<"$CASSANDRA_RING_HEAP" ;;
    esac
    read -r -a extra <<<"${CASSANDRA_JVM_EXTRA_OPTS:-}"

    # cwd = the node's own folder and java.io.tmpdir below it (native libraries such as lz4's are
    # unpacked there), so the node writes nothing outside its folder and var/log.
    (
        cd "$home" || exit 1
        spawn_detached "$name" "$logf" \
            "$CASSANDRA_JAVA" \
            "${jvm_opts[@]}" \
            "${heap[@]}" \
            "-javaagent:$jamm" \
            "-XX:ErrorFile=$LOG_DIR/$name-hs_err_pid%p.log" \
            "-Dcassandra.config=file://$conf/cassandra.yaml" \
            "-Dlogback.configurationFile=file://$CASSANDRA_CONF_SRC/logback.xml" \
            "-Dcassandra.logdir=$LOG_DIR" \
            "-Dcassandra.storagedir=$home" \
            "-Dcassandra.triggers_dir=$home/triggers" \
            "-Djava.io.tmpdir=$home/tmp" \
            "-Dcassandra-foreground=yes" \
            "${extra[@]}" \
            -cp "$CASSANDRA_LIB/*" \
            org.apache.cassandra.service.CassandraDaemon
    )
}

# --- the ring: infra/up.sh, down.sh and status.sh call these hooks --------------------------------

# _cassandra_check_args: CASSANDRA_NODES within 1..3, CASSANDRA_NODE a node of that ring.
_cassandra_check_args() {
    [[ "$CASSANDRA_NODES" =~ ^[1-9]$ ]] && ((CASSANDRA_NODES <= CASSANDRA_RING_MAX)) ||
        die "cassandra: CASSANDRA_NODES=$CASSANDRA_NODES: must be 1..$CASSANDRA_RING_MAX"
    [[ -z "$CASSANDRA_NODE" ]] && return 0
    [[ "$CASSANDRA_NODE" =~ ^[1-9]$ ]] && ((CASSANDRA_NODE <= CASSANDRA_RING_MAX)) ||
        die "cassandra: CASSANDRA_NODE=$CASSANDRA_NODE: must be a ring node, 1..$CASSANDRA_RING_MAX"
}

# _cassandra_pid NODE: our live PID of that node, or nothing.
_cassandra_pid() { our_pid "$(_cassandra_name "$1")" "$(_cassandra_node_marker "$1")"; }

# _cassandra_clash NODE: die if another node of ours (single or ring) already holds NODE's
# address and native port, naming it (the generic check could only say "a foreign process").
_cassandra_clash() {
    local node="$1" other
    for ((other = 0; other <= CASSANDRA_RING_MAX; other++)); do
        ((other != node)) || continue
        [[ "$(_cassandra_addr "$other")" == "$(_cassandra_addr "$node")" ]] || continue
        [[ -n "$(_cassandra_pid "$other")" ]] || continue
        [[ "$(read_port "$(_cassandra_name "$other")")" == "$CASSANDRA_PORT" ]] || continue
        if ((other == 0)); then
            die "cassandra: the single node runs on 127.0.0.1:$CASSANDRA_PORT; stop it first (infra/down.sh cassandra)"
        fi
        die "cassandra: ring node $other runs on 127.0.0.1:$CASSANDRA_PORT; stop the ring first (infra/down.sh cassandra), or use it: CASSANDRA_NODES=$(tr -dc '0-9' <"$CASSANDRA_RING_DIR/size" 2>/dev/null || echo 3)"
    done
}

cassandra_up() {
    _cassandra_check_args
    if ! _cassandra_ring; then
        _cassandra_clash 0
        up_default cassandra
        return
    fi
    _cassandra_ring_size
    local -a want=() wait=()
    local node pid
    if [[ -n "$CASSANDRA_NODE" ]]; then want=("$CASSANDRA_NODE"); else mapfile -t want < <(seq 1 "$CASSANDRA_NODES"); fi
    local t0
    t0="$(now)"
    for ((node = 1; node <= CASSANDRA_NODES; node++)); do
        pid="$(_cassandra_pid "$node")"
        if [[ -n "$pid" ]]; then
            [[ "$(read_port "$(_cassandra_name "$node")")" == "$CASSANDRA_PORT" ]] ||
                die "cassandra-$node: already running (pid $pid) on another port ($(read_port "$(_cassandra_name "$node")")); stop it first: infra/down.sh cassandra"
            log "cassandra-$node: already running (pid $pid)"
            wait+=("$node")
        elif [[ " ${want[*]} " == *" $node "* ]]; then
            _cassandra_start_ring_node "$node"
            wait+=("$node")
        fi
    done
    _cassandra_ring_wait "$t0" "${wait[@]}"
}

# _cassandra_start_ring_node NODE: checks, then spawn (no wait). Every node is a seed and a
# ring starts empty, so nodes start together: nobody bootstraps or waits for another.
_cassandra_start_ring_node() {
    local node="$1" name addr pid
    name="$(_cassandra_name "$node")"
    addr="$(_cassandra_addr "$node")"
    _cassandra_clash "$node"
    if port_open "$CASSANDRA_PORT" "$addr"; then
        die "$name: port $CASSANDRA_PORT on $addr is in use by a process that infra/up.sh did not start (no live $(pid_file "$name")); stop it, or pick another TRIGGER_CASSANDRA_PORT"
    fi
    if [[ -f "$CASSANDRA_RING_DIR/size" && ! -d "$(_cassandra_home "$node")/data/system" ]] &&
        compgen -G "$CASSANDRA_RING_DIR/node*/data/system" >/dev/null; then
        warn "$name: has no data while other nodes have: it joins empty (no bootstrap); reset the ring if that matters (infra/down.sh cassandra && infra/reset-data.sh)"
    fi
    log "$name: starting on $addr:$CASSANDRA_PORT (log: $(_cassandra_node_log "$node"))"
    _cassandra_start_node "$node"
    pid="$(_cassandra_pid "$node")"
    [[ -n "$pid" ]] || {
        print_log_tail "$name" "$(_cassandra_node_log "$node")"
        die "$name: exited right after start"
    }
    echo "$CASSANDRA_PORT" >"$(port_file "$name")"
}

# _cassandra_ring_size: a ring keeps the size it was created with (its nodes share token
# ranges); a different CASSANDRA_NODES needs a fresh ring.
_cassandra_ring_size() {
    local f="$CASSANDRA_RING_DIR/size" size
    if [[ ! -f "$f" ]]; then
        mkdir -p "$CASSANDRA_RING_DIR"
        echo "$CASSANDRA_NODES" >"$f"
        return 0
    fi
    size="$(tr -dc '0-9' <"$f")"
    [[ "$size" == "$CASSANDRA_NODES" ]] ||
        die "cassandra: the ring in $CASSANDRA_RING_DIR has $size nodes, not $CASSANDRA_NODES; use CASSANDRA_NODES=$size, or start a new ring: infra/down.sh cassandra && infra/reset-data.sh"
}

# _cassandra_ring_wait T0 NODE...: until every NODE answers CQL and sees all of them NORMAL
# (cql_probe.py --ring); dies early if a node's process exits, or after the timeout.
_cassandra_ring_wait() {
    local t0="$1" node deadline line last="" hosts=()
    shift
    for node in "$@"; do hosts+=("$(_cassandra_addr "$node")"); done
    deadline=$(($(date +%s) + ${CASSANDRA_START_TIMEOUT:-300}))
    while :; do
        if line="$("$PYTHON" "$CASSANDRA_CONF_SRC/cql_probe.py" "$CASSANDRA_PORT" --ring "${hosts[@]}" 2>/dev/null)"; then
            echo "cassandra: ring of ${#hosts[@]} nodes ready on ${hosts[*]} port $CASSANDRA_PORT ($(elapsed "$t0") s)"
            return 0
        fi
        [[ "$line" == "$last" ]] || log "cassandra: $line ($(elapsed "$t0") s)"
        last="$line"
        for node in "$@"; do
            [[ -n "$(_cassandra_pid "$node")" ]] && continue
            print_log_tail "cassandra-$node" "$(_cassandra_node_log "$node")"
            die "cassandra-$node: process exited before the ring was ready"
        done
        if (($(date +%s) >= deadline)); then
            for node in "$@"; do print_log_tail "cassandra-$node" "$(_cassandra_node_log "$node")"; done
            "$PYTHON" "$CASSANDRA_CONF_SRC/cql_probe.py" "$CASSANDRA_PORT" --ring "${hosts[@]}" >/dev/null || true
            die "cassandra: ring not ready after ${CASSANDRA_START_TIMEOUT:-300} s (still running; infra/down.sh stops it)"
        fi
        sleep 1
    done
}

# cassandra_down: CASSANDRA_NODE=i stops ring node i; otherwise every node of ours, together.
cassandra_down() {
    _cassandra_check_args
    if [[ -n "$CASSANDRA_NODE" ]]; then
        _cassandra_stop_node "$CASSANDRA_NODE"
        return
    fi
    local -a nodes=(0)
    local node
    for ((node = 1; node <= CASSANDRA_RING_MAX; node++)); do
        if [[ -f "$(pid_file "$(_cassandra_name "$node")")" ]] || { _cassandra_ring && ((node <= CASSANDRA_NODES)); }; then
            nodes+=("$node")
        fi
    done
    run_parallel _cassandra_stop_node "${nodes[@]}"
}

_cassandra_stop_node() { stop_pid "$(_cassandra_name "$1")" "$(_cassandra_node_marker "$1")"; }

# cassandra_status: the single node's line, or one line per ring node.
cassandra_status() {
    _cassandra_check_args
    local node name pid addr rc=0
    if ! _cassandra_ring; then
        status_default cassandra || rc=1
        for ((node = 1; node <= CASSANDRA_RING_MAX; node++)); do
            pid="$(_cassandra_pid "$node")"
            [[ -z "$pid" ]] || echo "cassandra-$node: ring node running (pid $pid, $(_cassandra_addr "$node"):$(read_port "$(_cassandra_name "$node")")); its status: CASSANDRA_NODES=N infra/status.sh cassandra"
        done
        return "$rc"
    fi
    for ((node = 1; node <= CASSANDRA_NODES; node++)); do
        name="$(_cassandra_name "$node")"
        addr="$(_cassandra_addr "$node")"
        pid="$(_cassandra_pid "$node")"
        if [[ -z "$pid" ]]; then
            rc=1
            if port_open "$CASSANDRA_PORT" "$addr"; then
                echo "$name: stopped (but $addr:$CASSANDRA_PORT is used by a process we did not start)"
            else
                echo "$name: stopped"
            fi
        elif "$PYTHON" "$CASSANDRA_CONF_SRC/cql_probe.py" "$(read_port "$name")" --host "$addr" >/dev/null 2>&1; then
            echo "$name: running (pid $pid, $addr:$(read_port "$name"))"
        else
            echo "$name: starting (pid $pid, $addr:$(read_port "$name") not ready yet)"
            rc=1
        fi
    done
    return "$rc"
}

# --- the secure node (infra/secure.sh) -----------------------------------------------------------
# One node on CASSANDRA_SECURE_ADDRESS (127.0.0.9) with the usual ports, data in
# var/cassandra-secure, var/run/cassandra-secure.pid, var/log/cassandra-secure.log, a small heap
# (CASSANDRA_SECURE_HEAP). PasswordAuthenticator + CassandraAuthorizer, and client connections
# TLS only (the server certificate of var/secure/, see secure_tls in infra/lib.sh). Once it
# answers, infra/cassandra/secure_setup.py gives the default superuser a random password and
# creates the role `trigger` (var/secure/cassandra-password) with every permission on every
# keyspace, and not superuser.

# _cassandra_secure_yaml FILE: the rendered yaml turned secure (the template's AllowAll lines
# replaced, client encryption appended).
_cassandra_secure_yaml() {
    local f="$1"
    sed -i -e 's|^authenticator: .*|authenticator: PasswordAuthenticator|' \
        -e 's|^authorizer: .*|authorizer: CassandraAuthorizer|' "$f"
    cat >>"$f" <<YAML

# --- the secure node: clients must log in and speak TLS (infra/secure.sh) ----------------------
client_encryption_options:
  enabled: true
  optional: false
  keystore: $SECURE_DIR/server.p12
  keystore_password: $(secure_secret keystore-password)
  store_type: PKCS12
  require_client_auth: false
YAML
}

# _cassandra_secure_probe [--setup]: the role `trigger` logs in over TLS and reads (with
# --setup: first make the role and the superuser's password if they are not there yet).
_cassandra_secure_probe() {
    "$PYTHON" "$CASSANDRA_CONF_SRC/secure_setup.py" "$@" \
        --host "$SECURE_CASSANDRA_ADDRESS" --port "$CASSANDRA_PORT" --ca "$SECURE_DIR/ca.pem" \
        --secrets "$SECURE_DIR"
}

# cassandra_secure_up: start the secure node unless it runs (idempotent), wait until it answers,
# set up its roles. Timeout: CASSANDRA_START_TIMEOUT (180).
cassandra_secure_up() {
    local name=cassandra-secure marker pid t0 deadline logf
    marker="$(_cassandra_node_marker secure)"
    logf="$(_cassandra_node_log secure)"
    t0="$(now)"
    cassandra_installed || cassandra_install
    cassandra_preflight
    secure_tls
    secure_secret cassandra-password >/dev/null
    secure_secret cassandra-superuser-password >/dev/null
    pid="$(_cassandra_pid secure)"
    if [[ -z "$pid" ]]; then
        if port_open "$CASSANDRA_PORT" "$SECURE_CASSANDRA_ADDRESS"; then
            die "$name: $SECURE_CASSANDRA_ADDRESS:$CASSANDRA_PORT is in use by a process we did not start (set CASSANDRA_SECURE_ADDRESS)"
        fi
        log "$name: starting on $SECURE_CASSANDRA_ADDRESS:$CASSANDRA_PORT (log: $logf)"
        _cassandra_start_node secure
        pid="$(_cassandra_pid secure)"
        [[ -n "$pid" ]] || {
            print_log_tail "$name" "$logf"
            die "$name: exited right after start"
        }
        echo "$CASSANDRA_PORT" >"$(port_file "$name")"
    fi
    deadline=$(($(date +%s) + ${CASSANDRA_START_TIMEOUT:-180}))
    until _cassandra_secure_probe --setup >/dev/null 2>"$LOG_DIR/$name-probe.log"; do
        if ! pid_matches "$pid" "$marker"; then
            print_log_tail "$name" "$logf"
            die "$name: process $pid exited before it was ready"
        fi
        if (($(date +%s) >= deadline)); then
            print_log_tail "$name" "$logf"
            print_log_tail "$name probe" "$LOG_DIR/$name-probe.log"
            die "$name: not ready after ${CASSANDRA_START_TIMEOUT:-180} s (still running as pid $pid; infra/secure.sh down stops it)"
        fi
        sleep 1
    done
    echo "$name: ready on $SECURE_CASSANDRA_ADDRESS:$CASSANDRA_PORT, TLS + role trigger (pid $pid, $(elapsed "$t0") s)"
}

cassandra_secure_down() { _cassandra_stop_node secure; }

cassandra_secure_status() {
    local pid
    pid="$(_cassandra_pid secure)"
    if [[ -z "$pid" ]]; then
        echo "cassandra-secure: stopped"
        return 1
    fi
    if _cassandra_secure_probe >/dev/null 2>&1; then
        echo "cassandra-secure: running (pid $pid, $SECURE_CASSANDRA_ADDRESS:$CASSANDRA_PORT, TLS)"
    else
        echo "cassandra-secure: starting (pid $pid, $SECURE_CASSANDRA_ADDRESS:$CASSANDRA_PORT not ready yet)"
        return 1
    fi
}

# cassandra_secure_env: the TRIGGER_* settings that connect to the secure node.
cassandra_secure_env() {
    printf '%s\n' "TRIGGER_CASSANDRA_HOSTS=$SECURE_CASSANDRA_ADDRESS" \
        "TRIGGER_CASSANDRA_PORT=$CASSANDRA_PORT" \
        "TRIGGER_CASSANDRA_USERNAME=trigger" \
        "TRIGGER_CASSANDRA_PASSWORD=$(secure_secret cassandra-password)" \
        "TRIGGER_CASSANDRA_TLS_CA_FILE=$SECURE_DIR/ca.pem"
}
