# shellcheck shell=bash
# Apache Cassandra 5.0, single node, run straight from the Maven artifacts (no tarball, no
# package: none can be downloaded here). Sourced by infra/lib.sh.

CASSANDRA_PORT="${TRIGGER_CASSANDRA_PORT:-9042}"
CASSANDRA_STORAGE_PORT="${CASSANDRA_STORAGE_PORT:-7000}"
CASSANDRA_CONF_SRC="$INFRA_DIR/cassandra"
CASSANDRA_LIB="$CACHE_DIR/cassandra/lib"
CASSANDRA_STAMP="$CACHE_DIR/cassandra/.installed-version"
CASSANDRA_HOME_DIR="$VAR_DIR/cassandra"
# Java 17 exactly: Cassandra 5.0 supports 11 and 17 only, and this machine also has a newer JDK,
# so neither PATH nor JAVA_HOME decides. Debian's OpenJDK 17 (any architecture) unless set.
if [[ -z "${CASSANDRA_JAVA:-}" ]]; then
    CASSANDRA_JAVA="$(compgen -G '/usr/lib/jvm/java-17-openjdk-*/bin/java' | head -n 1 || true)"
    CASSANDRA_JAVA="${CASSANDRA_JAVA:-/usr/lib/jvm/java-17-openjdk-amd64/bin/java}"
fi
# The project's venv provides cassandra-driver for the readiness probe.
PYTHON="${PYTHON:-$REPO_ROOT/.venv/bin/python}"

# Its command line names its config file, which lives in this checkout.
cassandra_marker()  { echo "-Dcassandra.config=file://$CASSANDRA_HOME_DIR/conf/cassandra.yaml"; }
cassandra_port()    { echo "$CASSANDRA_PORT"; }
cassandra_timeout() { echo "${CASSANDRA_START_TIMEOUT:-180}"; }
cassandra_log()     { echo "$LOG_DIR/cassandra.log"; }

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

_cassandra_render_yaml() {
    local out="$1"
    sed -e "s|@DATA_ROOT@|$CASSANDRA_HOME_DIR|g" \
        -e "s|@NATIVE_PORT@|$CASSANDRA_PORT|g" \
        -e "s|@STORAGE_PORT@|$CASSANDRA_STORAGE_PORT|g" \
        "$CASSANDRA_CONF_SRC/cassandra.yaml.in" >"$out.tmp"
    mv -f "$out.tmp" "$out"
}

cassandra_start() {
    # The inter-node port is bound too; a clash there would only show up in the log.
    if port_open "$CASSANDRA_STORAGE_PORT"; then
        die "cassandra: storage port $CASSANDRA_STORAGE_PORT on 127.0.0.1 is in use by another process (set CASSANDRA_STORAGE_PORT)"
    fi
    local conf="$CASSANDRA_HOME_DIR/conf"
    mkdir -p "$conf" "$CASSANDRA_HOME_DIR"/{data,commitlog,saved_caches,hints,cdc_raw,triggers,tmp}
    _cassandra_render_yaml "$conf/cassandra.yaml"
    rotate_log "$(cassandra_log)"

    local jamm
    jamm="$(compgen -G "$CASSANDRA_LIB/jamm-*.jar" | head -n 1)"

    # JVM options file: one or two words per line, only lines starting with '-' (as Cassandra's
    # own launcher reads its jvm*.options). Extra options from the environment come last, so
    # e.g. CASSANDRA_JVM_EXTRA_OPTS="-Xmx2g" wins over the file.
    # (read -a splits "--add-opens X" into its two words without glob expansion.)
    local -a jvm_opts=() words=() extra=()
    local line
    while read -r line || [[ -n "$line" ]]; do
        [[ "$line" == -* ]] || continue
        read -r -a words <<<"$line"
        jvm_opts+=("${words[@]}")
    done <"$CASSANDRA_CONF_SRC/jvm17.options"
    read -r -a extra <<<"${CASSANDRA_JVM_EXTRA_OPTS:-}"

    # cwd = the node's own folder and java.io.tmpdir below it (native libraries such as lz4's are
    # unpacked there), so the node writes nothing outside var/cassandra and var/log.
    (
        cd "$CASSANDRA_HOME_DIR" || exit 1
        spawn_detached cassandra "$(cassandra_log)" \
            "$CASSANDRA_JAVA" \
            "${jvm_opts[@]}" \
            "-javaagent:$jamm" \
            "-XX:ErrorFile=$LOG_DIR/cassandra-hs_err_pid%p.log" \
            "-Dcassandra.config=file://$conf/cassandra.yaml" \
            "-Dlogback.configurationFile=file://$CASSANDRA_CONF_SRC/logback.xml" \
            "-Dcassandra.logdir=$LOG_DIR" \
            "-Dcassandra.storagedir=$CASSANDRA_HOME_DIR" \
            "-Dcassandra.triggers_dir=$CASSANDRA_HOME_DIR/triggers" \
            "-Djava.io.tmpdir=$CASSANDRA_HOME_DIR/tmp" \
            "-Dcassandra-foreground=yes" \
            "${extra[@]}" \
            -cp "$CASSANDRA_LIB/*" \
            org.apache.cassandra.service.CassandraDaemon
    )
}
