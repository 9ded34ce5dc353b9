#!/usr/bin/env bash
# Fuzz the live API with schemathesis against its own contract (GET /openapi.json): every
# operation, negative data too, and the stateful links (create -> get -> patch -> cancel),
# with hostile values weighted into the fields whose cost depends on their content.
#   infra/fuzz.sh [BASE_URL] [MAX_EXAMPLES] [MAX_TIME_S]
# `make fuzz` runs it against `make up` (several thousand cases); the test suite runs a short
# form (tests/integration/test_fuzz.py). Checks: no 5xx, only statuses and content types the
# spec lists, responses and headers conforming to it, at most 1 CPU-s of the API per request. Reports go to var/fuzz/.
set -euo pipefail
source "$(dirname -- "${BASH_SOURCE[0]}")/lib.sh"

BASE="${1:-http://${TRIGGER_API_HOST:-127.0.0.1}:${TRIGGER_API_PORT:-8080}}"
EXAMPLES="${2:-${FUZZ_EXAMPLES:-100}}"
MAX_TIME="${3:-${FUZZ_MAX_TIME_S:-900}}"
TOKEN="${FUZZ_TOKEN:-dev-token}"
mkdir -p "$VAR_DIR/fuzz"
# Hostile when/rrule/cron/flowControl values weighted in, and each request's CPU on the API's
# side checked (infra/fuzz_hooks.py): the API's process ids, `make up`'s unless given.
if [[ -z "${FUZZ_API_PIDS:-}" ]]; then
    FUZZ_API_PIDS="$(cat "$RUN_DIR"/api*.pid 2>/dev/null | paste -sd, || true)"
fi
export FUZZ_API_PIDS
export SCHEMATHESIS_HOOKS=infra.fuzz_hooks PYTHONPATH="$REPO_ROOT${PYTHONPATH:+:$PYTHONPATH}"
exec "$REPO_ROOT/.venv/bin/schemathesis" run "$BASE/openapi.json" \
    --header "Authorization: Bearer $TOKEN" \
    --checks not_a_server_error,api_cpu_bounded,status_code_conformance,content_type_conformance,response_schema_conformance,response_headers_conformance \
    --phases examples,coverage,fuzzing,stateful \
    --max-examples "$EXAMPLES" --max-time "$MAX_TIME" --seed "${FUZZ_SEED:-20261123}" \
    --generation-codec utf-8 --request-timeout 30 --workers "${FUZZ_WORKERS:-1}" \
    --report junit --report-dir "$VAR_DIR/fuzz" --continue-on-failure
