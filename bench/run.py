"""``make bench``: end-to-end delivery benchmarks against the stack ``make up`` started.

Modes (sized like the peer measurements in the README):

- ``spread``: 2,000 triggers registered through the HTTP API, fire times uniform over 30 s;
- ``burst``:  5,000 triggers all due at the same instant;
- ``long``:   2,000 triggers uniform over 30 s (40-70 s out), every one through the sweeper;
- ``hot``:    20,000 triggers due within the same second, through the sweeper.

The long-delay modes restart the service's processes (``infra/app.sh``) with a small
``TRIGGER_DIRECT_MAX_DELAY_S`` so that "far future" is tens of seconds, not 15 minutes; the
stack is put back to its defaults at the end. A receiver process on 127.0.0.1:9100 records
arrivals. Prints a table and writes JSON to ``bench/results/<mode>.json``. Exit status 0 even
if targets are missed (it is a measurement).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
API = f"http://{os.environ.get('TRIGGER_API_HOST', '127.0.0.1')}:" \
      f"{os.environ.get('TRIGGER_API_PORT', '8080')}"
TOKEN = os.environ.get("BENCH_TOKEN", "dev-token")
RECEIVER_PORT = int(os.environ.get("BENCH_RECEIVER_PORT", "9100"))
CONCURRENCY = 32


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def iso_ms(ms: int) -> str:
    t = time.gmtime(ms // 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", t) + f".{ms % 1000:03d}Z"


def pct(values: list[int], p: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    k = (len(s) - 1) * p
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


async def register_all(session: aiohttp.ClientSession, fire_times: list[int],
                       extra: dict[str, Any] | None = None) -> tuple[dict[str, int], float, int]:
    """Register every trigger; returns {trigger_id: fire_at_ms}, seconds taken, errors."""
    out: dict[str, int] = {}
    errors = 0
    extra = extra or {}
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(len(fire_times)):
        queue.put_nowait(i)
    headers = {"Authorization": f"Bearer {TOKEN}"}

    async def worker() -> None:
        nonlocal errors
        while not queue.empty():
            i = queue.get_nowait()
            body = {"callbackUrl": f"http://127.0.0.1:{RECEIVER_PORT}/cb/{i}",
                    "payload": {"i": i}, "fireAt": iso_ms(fire_times[i]), **extra}
            for _ in range(3):
                async with session.post(f"{API}/v1/triggers", json=body,
                                        headers=headers) as resp:
                    data = await resp.json()
                    if resp.status == 201:
                        out[data["triggerId"]] = fire_times[i]
                        break
                    errors += 1

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
    return out, time.perf_counter() - t0, errors


# Through the sweeper: anything more than 30 s out waits in Cassandra for it (the default is
# 15 minutes, too long for a benchmark); the wheel hands triggers to SQS 15 s ahead.
SWEEP_ENV = {
    "TRIGGER_DIRECT_MAX_DELAY_S": "30",
    "TRIGGER_SWEEP_HORIZON_S": "25",
    "TRIGGER_SWEEP_INTERVAL_S": "2",
    "TRIGGER_SWEEP_PROMOTE_AHEAD_S": "15",
}
MODES: dict[str, dict[str, Any]] = {
    "spread": {"n": 2000, "env": {}},
    "burst": {"n": 5000, "env": {}},
    "long": {"n": 2000, "env": SWEEP_ENV},
    "hot": {"n": 20000, "env": SWEEP_ENV},
    # 1,000 series, each every 2 s for a minute (30 occurrences): 30,000 deliveries.
    "recurring": {"n": 1000, "env": {"TRIGGER_MIN_RECURRENCE_INTERVAL_S": "1"}},
}
RECURRING_COUNT = 30
RECURRING_EVERY_MS = 2000


def fire_times_for(mode: str, n: int, start: int, rng: random.Random) -> list[int]:
    if mode == "spread":  # registration (~7 s) ends well before the first fire time
        return [start + 20_000 + rng.randrange(30_000) for _ in range(n)]
    if mode == "burst":
        return [start + 40_000] * n
    if mode == "recurring":  # first occurrences spread over one interval
        return [start + 15_000 + rng.randrange(RECURRING_EVERY_MS) for _ in range(n)]
    if mode == "long":  # 40-70 s out: every one beyond the 30 s direct limit
        return [start + 40_000 + rng.randrange(30_000) for _ in range(n)]
    # hot: registering 20,000 takes about 30-40 s; all fall due within one second after,
    # still beyond the direct limit for the last one registered
    due = start + 40_000 + n * 3
    return [due + rng.randrange(1000) for _ in range(n)]


def restart_app(env: dict[str, str]) -> None:
    """Restart the service's processes with these settings on top of the caller's."""
    full = {**os.environ, **env}
    subprocess.run([str(ROOT / "infra" / "app.sh"), "down"], check=True, env=full,
                   stderr=subprocess.DEVNULL)
    subprocess.run([str(ROOT / "infra" / "app.sh"), "up"], check=True, env=full,
                   stderr=subprocess.DEVNULL)
    time.sleep(3)  # sweepers share out the shards


async def run_mode(mode: str, n: int, session: aiohttp.ClientSession) -> dict[str, Any]:
    rng = random.Random(42)
    await session.post(f"http://127.0.0.1:{RECEIVER_PORT}/reset")
    start = now_ms()
    fire_times = fire_times_for(mode, n, start, rng)
    extra = ({"rrule": f"FREQ=SECONDLY;INTERVAL={RECURRING_EVERY_MS // 1000};"
                       f"COUNT={RECURRING_COUNT}"} if mode == "recurring" else {})
    registered, reg_s, reg_errors = await register_all(session, fire_times, extra)
    if mode == "recurring":
        return await recurring_result(session, registered, reg_s, reg_errors, n)
    last_fire = max(fire_times)
    print(f"[{mode}] registered {len(registered)} in {reg_s:.1f}s "
          f"({len(registered) / reg_s:.0f}/s); waiting for deliveries...", flush=True)
    deadline = last_fire + 90_000
    while now_ms() < deadline:
        async with session.get(f"http://127.0.0.1:{RECEIVER_PORT}/stats") as r:
            count = (await r.json())["arrivals"]
        if count >= len(registered) and now_ms() > last_fire + 3_000:
            break
        await asyncio.sleep(0.5)
    await asyncio.sleep(2)  # late duplicates
    async with session.get(f"http://127.0.0.1:{RECEIVER_PORT}/dump") as r:
        arrivals = await r.json()

    first: dict[str, int] = {}
    total_for_ours = 0
    for tid, _attempt, at, _occ in arrivals:
        if tid not in registered:
            continue
        total_for_ours += 1
        first[tid] = min(at, first.get(tid, at))
    lags = [first[t] - registered[t] for t in first]
    early = sum(1 for lag in lags if lag < 0)
    result: dict[str, Any] = {
        "mode": mode,
        "triggers": n,
        "registered": len(registered),
        "registration_errors": reg_errors,
        "registration_per_s": round(len(registered) / reg_s, 1),
        "delivered": len(first),
        "missing": len(registered) - len(first),
        "duplicates": total_for_ours - len(first),
        "early": early,
        "lag_ms": {
            "p50": round(pct(lags, 0.50), 1), "p90": round(pct(lags, 0.90), 1),
            "p99": round(pct(lags, 0.99), 1), "max": max(lags) if lags else None,
            "mean": round(statistics.fmean(lags), 1) if lags else None,
        },
    }
    if mode in ("burst", "hot") and first:
        # From the first fire time to the last arrival: how long the whole herd took.
        result["drain_ms"] = max(first.values()) - min(fire_times)
    return result


async def recurring_result(session: aiohttp.ClientSession, registered: dict[str, int],
                           reg_s: float, reg_errors: int, n: int) -> dict[str, Any]:
    """Wait for every occurrence of every series; lag = arrival - that occurrence's time
    (the n-th occurrence of a series is due (n - 1) intervals after its first)."""
    expected = len(registered) * RECURRING_COUNT
    deadline = max(registered.values(), default=now_ms()) + (
        RECURRING_COUNT * RECURRING_EVERY_MS) + 90_000
    while now_ms() < deadline:
        async with session.get(f"http://127.0.0.1:{RECEIVER_PORT}/stats") as r:
            if (await r.json())["arrivals"] >= expected:
                break
        await asyncio.sleep(1)
    await asyncio.sleep(2)
    async with session.get(f"http://127.0.0.1:{RECEIVER_PORT}/dump") as r:
        arrivals = await r.json()
    first: dict[str, int] = {}
    total = 0
    for tid, _attempt, at, occ in arrivals:
        if tid in registered:
            total += 1
            first[occ] = min(at, first.get(occ, at))
    lags = []
    for occ, at in first.items():
        tid, _, number = occ.rpartition(".")
        lags.append(at - (registered[tid] + (int(number) - 1) * RECURRING_EVERY_MS))
    return {
        "mode": "recurring", "triggers": n, "registered": len(registered),
        "registration_errors": reg_errors,
        "registration_per_s": round(len(registered) / reg_s, 1),
        "expected_occurrences": expected, "delivered": len(first),
        "missing": expected - len(first), "duplicates": total - len(first),
        "early": sum(1 for lag in lags if lag < 0),
        "lag_ms": {"p50": round(pct(lags, 0.50), 1), "p90": round(pct(lags, 0.90), 1),
                   "p99": round(pct(lags, 0.99), 1), "max": max(lags) if lags else None},
    }


async def run_one(mode: str, n: int) -> dict[str, Any]:
    connector = aiohttp.TCPConnector(limit=CONCURRENCY * 2)
    async with aiohttp.ClientSession(connector=connector) as session:
        async with session.get(f"{API}/readyz") as r:
            if r.status != 200:
                sys.exit(f"the API at {API} is not ready ({r.status}): run `make up` first")
        return await run_mode(mode, n, session)


def wait_until_settled(timeout_s: float = 180) -> None:
    """Freshly started processes scan: the reconciler's first pass reads hours of the index
    and each sweeper reads its lookback. Measure after those, not during."""
    log = ROOT / "var" / "log" / "reconciler-1.log"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if log.exists() and "reconcile_pass" in log.read_text():
            return
        time.sleep(1)
    print("warning: the reconciler's first pass did not finish; measuring anyway", flush=True)


async def warm_up(n: int = 300) -> None:
    """Connections, JIT and caches warm before the first measured registration."""
    connector = aiohttp.TCPConnector(limit=CONCURRENCY * 2)
    async with aiohttp.ClientSession(connector=connector) as session:
        start = now_ms()
        await register_all(session, [start + 8_000] * n)
    await asyncio.sleep(10)  # let them fire before anything is measured


def run_modes(modes: list[str], scale: float) -> list[dict[str, Any]]:
    results = []
    current_env: dict[str, str] | None = None
    try:
        for mode in modes:
            env = MODES[mode]["env"]
            if env != current_env and (current_env is not None or env):
                restart_app(env)
            if env != current_env:
                wait_until_settled()
                asyncio.run(warm_up())
            current_env = env
            results.append(asyncio.run(run_one(mode, max(1, int(MODES[mode]["n"] * scale)))))
    finally:
        if current_env:
            restart_app({})  # leave the stack as `make up` made it
    return results


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("modes", nargs="*", metavar="MODE",
                   help=f"any of {', '.join(MODES)} (default: all, in that order)")
    p.add_argument("--scale", type=float, default=1.0, help="multiply trigger counts")
    args = p.parse_args()
    receiver = subprocess.Popen([sys.executable, str(ROOT / "bench" / "receiver.py"),
                                 "--port", str(RECEIVER_PORT)])
    try:
        time.sleep(1.0)
        unknown = sorted(set(args.modes) - set(MODES))
        if unknown:
            p.error(f"unknown mode(s): {', '.join(unknown)}")
        results = run_modes(args.modes or list(MODES), args.scale)
    finally:
        receiver.terminate()
        receiver.wait(10)
    RESULTS.mkdir(parents=True, exist_ok=True)
    machine = {"python": platform.python_version(), "cpus": os.cpu_count(),
               "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    print(f"\n{'mode':8} {'n':>6} {'reg/s':>7} {'deliv':>6} {'miss':>5} {'dup':>4} {'early':>5} "
          f"{'p50':>7} {'p90':>7} {'p99':>7} {'max':>7} {'drain':>7}")
    for r in results:
        lag = r["lag_ms"]
        print(f"{r['mode']:8} {r['triggers']:>6} {r['registration_per_s']:>7} "
              f"{r['delivered']:>6} {r['missing']:>5} {r['duplicates']:>4} {r['early']:>5} "
              f"{lag['p50']:>7} {lag['p90']:>7} {lag['p99']:>7} {lag['max']!s:>7} "
              f"{r.get('drain_ms', '-')!s:>7}")
        (RESULTS / f"{r['mode']}.json").write_text(json.dumps(r | {"machine": machine},
                                                              indent=2) + "\n")
    print(f"\nlag = callback arrival - fireAt, in ms; drain = last arrival - first fire time; "
          f"JSON in {RESULTS.relative_to(ROOT)}/")


if __name__ == "__main__":
    main()
