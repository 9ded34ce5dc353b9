#!/usr/bin/env bash
# The secure variants of the stores, separate from `make up`'s instances (which stay as they are):
# a Cassandra node that requires a login and TLS, and a TLS-only Redis with an ACL user.
#   infra/secure.sh up|down|status|env [cassandra|redis]...   (default: both)
# up      start what is not running (idempotent) and wait until it answers; Cassandra ~60 s
# down    stop them (only processes this checkout started)
# status  one line each; exit 3 unless every one named is running
# env     print the TRIGGER_* settings that connect to them (passwords included), e.g.
#         set -a; source <(infra/secure.sh env); set +a
# Cassandra: CASSANDRA_SECURE_ADDRESS (127.0.0.9) with TRIGGER_CASSANDRA_PORT (9042), role
# `trigger`, data in var/cassandra-secure. Redis: 127.0.0.1:REDIS_SECURE_PORT (6380), user
# `trigger`. TLS material (a throwaway CA and server certificate) and passwords: var/secure/.
set -euo pipefail
source "$(dirname -- "${BASH_SOURCE[0]}")/lib.sh"

case "${1:-}" in
    up | down | status | env) action="$1" ;;
    -h | --help)
        sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'
        exit 0
        ;;
    *) die "usage: infra/secure.sh up|down|status|env [cassandra|redis]... (see --help)" ;;
esac
shift
targets=("$@")
((${#targets[@]})) || targets=(redis cassandra)
for t in "${targets[@]}"; do
    [[ "$t" == cassandra || "$t" == redis ]] || die "unknown secure service '$t' (known: cassandra redis)"
done

ensure_dirs
rc=0
case "$action" in
    up | down)
        take_lock
        # The certificate is made once, before the two starts that both read it.
        [[ "$action" == down ]] || secure_tls
        for t in "${targets[@]}"; do "${t}_secure_$action"; done
        ;;
    status) for t in "${targets[@]}"; do "${t}_secure_status" || rc=3; done ;;
    env) for t in "${targets[@]}"; do "${t}_secure_env"; done ;;
esac
exit "$rc"
