#!/usr/bin/env bash
# Flame graphs of the API and the dispatcher during a burst (bench/run.py burst: 5,000
# triggers registered from 32 clients, all due 40 s after the start), with py-spy (the
# `bench` extra). The API is sampled while the triggers are registered, the dispatcher while
# the herd is delivered. SVGs in bench/results/profiles/ (the burst's own JSON goes there
# too, not over bench/results/burst.json). Needs the stack `make up` started; run as a user
# allowed to ptrace the service's processes (root here).
#   bench/profile.sh [SCALE]     SCALE multiplies the 5,000 (default 1)
set -euo pipefail
ROOT="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd -P)"
OUT="$ROOT/bench/results/profiles"
PY="$ROOT/.venv/bin/python"
PYSPY="$ROOT/.venv/bin/py-spy"
SCALE="${1:-1}"
mkdir -p "$OUT"

pid_of() { # the pid infra/app.sh recorded for NAME, if alive
    local pid
    pid="$(tr -dc '0-9' <"$ROOT/var/run/$1.pid" 2>/dev/null || true)"
    [[ -n "$pid" && -d "/proc/$pid" ]] && echo "$pid"
}
API_PID="$(pid_of api)" || { echo "no api running: make up first" >&2; exit 1; }
DISPATCHER_PID="$(pid_of dispatcher-1)" || { echo "no dispatcher-1 running" >&2; exit 1; }

"$PY" "$ROOT/bench/run.py" burst --scale "$SCALE" --results "$OUT" &
BENCH=$!
# The bench warms up (~15 s) and measures the idle CPU (10 s) before it starts registering;
# registration takes ~10 s.
sleep 23
"$PYSPY" record --nonblocking --rate 200 --duration 12 --pid "$API_PID" \
    --output "$OUT/api-burst.svg" >/dev/null 2>&1 &
API_SPY=$!
# The herd falls due 40 s after registration began: sample from just before it to the end.
sleep 35
"$PYSPY" record --nonblocking --rate 200 --duration 25 --pid "$DISPATCHER_PID" \
    --output "$OUT/dispatcher-burst.svg" >/dev/null 2>&1 &
DISPATCHER_SPY=$!
wait "$API_SPY" "$DISPATCHER_SPY" "$BENCH"
echo "flame graphs: $OUT/api-burst.svg, $OUT/dispatcher-burst.svg"
