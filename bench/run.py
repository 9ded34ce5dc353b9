"""``make bench``: end-to-end delivery benchmarks against the stack ``make up`` started.

Modes (sized like the peer measurements in docs/measuring.md):

- ``spread``: 2,000 triggers registered through the HTTP API, fire times uniform over 30 s;
- ``burst``:  5,000 triggers all due at the same instant;
- ``long``:   2,000 triggers uniform over 30 s (40-70 s out), every one through the sweeper;
- ``hot``:    20,000 triggers due within the same second, through the sweeper.

The long-delay modes restart the service's processes (``infra/app.sh``) with a small
``TRIGGER_DIRECT_MAX_DELAY_S`` so that "far future" is tens of seconds, not 15 minutes; the
stack is put back to its defaults at the end. A receiver process on 127.0.0.1:9100 records
arrivals. Prints a table and writes JSON to ``bench/results/<mode>.json``. Exit status 0 even
if targets are missed (it is a measurement).

The modes ``register``, ``sustained``, ``sqs-purge`` and ``sweeper-kill`` are in
``bench/modes.py``, ``batch`` (``POST /v1/triggers/batch``) in ``bench/batch_bench.py``,
``fairness`` (caller A's herd of 20,000 and caller B's 20 due at one instant: B's
lateness) and ``fairness-capped`` (the same, A's herd deferred on SQS) in
``bench/fairness_bench.py``, ``flow`` (2,000 due at one instant for one flow-control key at
100/s and 10 open: how they were spread) in ``bench/flow_bench.py``, ``retry`` (N triggers
each failing once, a 1 s backoff: how late the retries start) in ``bench/retry_bench.py``,
``hostile`` (caller A's registrations while caller B sends the costliest ``when``, RRULE and
cron inputs: A's latency) in ``bench/hostile_bench.py``, ``priority`` (one caller's 20 high
beside its 5,000 low due at one instant: the high ones' lateness) in
``bench/priority_bench.py``.
Every mode also reports the CPU seconds each component (API, dispatcher, sweepers,
reconciler, Cassandra, LocalStack, Redis) consumed over the run, per 1,000 deliveries
(``bench/cpu.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import (
    batch_bench,
    cassandra_work,
    fairness_bench,
    flow_bench,
    hostile_bench,
    modes,
    priority_bench,
    retry_bench,
)
from bench.common import (
    API,
    CONCURRENCY,
    RECEIVER_PORT,
    RESULTS,
    ROOT,
    SWEEP_ENV,
    first_arrivals,
    now_ms,
    pct,
    register_all,
    reset_receiver,
    restart_app,
    summarize,
    wait_for_arrivals,
    wait_until_settled,
)
from bench.cpu import CpuMeter, cpu_table_header, cpu_table_row, per_1000

__all__ = ["API", "RESULTS", "pct", "restart_app"]  # bench/channels_bench.py uses these

MODES: dict[str, dict[str, Any]] = {
    "spread": {"n": 2000, "env": {}},
    "burst": {"n": 5000, "env": {}},
    "long": {"n": 2000, "env": SWEEP_ENV},
    "hot": {"n": 20000, "env": SWEEP_ENV},
    # 1,000 series, each every 2 s for a minute (30 occurrences): 30,000 deliveries.
    "recurring": {"n": 1000, "env": {"TRIGGER_API_MIN_RECURRENCE_INTERVAL_S": "1"}},
    # bench/modes.py
    "register": {"n": 5000, "env": {}},
    "sustained": {"n": 60000, "env": {}},
    "sqs-purge": {"n": 2000, "env": {}},
    "sweeper-kill": {"n": 2000, "env": SWEEP_ENV},
    # bench/batch_bench.py: N far-future triggers, then N/4 direct ones, 1,000 a request
    "batch": {"n": 20000, "env": {}},
    # bench/fairness_bench.py: caller A's herd of N, caller B's 20, due at one instant
    "fairness": {"n": 20000, "env": {}},
    # The same with A at 5 deliveries at once and a dispatcher cap of 500: most of A's herd
    # is deferred on SQS (over its share, or past its full bulkhead queue) until its turn.
    # bench/flow_bench.py: N due at one instant for one flow-control key, 100/s, 10 open
    "flow": {"n": 2000, "env": {}},
    "fairness-capped": {"n": 5000, "env": {
        "TRIGGER_DISPATCH_MAX_INFLIGHT": "500",
        "TRIGGER_API_CALLERS_FILE": str(Path(__file__).resolve().parent / "callers.capped.toml")}},
    # bench/retry_bench.py: N triggers answered 500 once, retried after 1 s (lag = lateness)
    "retry": {"n": 60, "env": retry_bench.ENV},
    # bench/hostile_bench.py: caller A's N registrations while caller B sends the costliest
    # when/rrule/cron inputs, single and 1,000 to a batch
    "hostile": {"n": 2000, "env": {}},
    # bench/priority_bench.py: one caller's N low-priority and 20 high-priority triggers
    # due at one instant (the high ones registered last)
    "priority": {"n": 5000, "env": {}},
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


async def measure_mode(mode: str, n: int, session: aiohttp.ClientSession, shift_ms: int = 0
                       ) -> tuple[dict[str, Any], list[int]]:
    """One of the original modes (spread, burst, long, hot, recurring): its result and,
    except for ``recurring``, the lag (ms) of every delivered trigger. ``shift_ms`` moves
    every fire time later (room for a slow registration on a busy machine)."""
    rng = random.Random(42)
    await reset_receiver(session)
    start = now_ms() + shift_ms
    fire_times = fire_times_for(mode, n, start, rng)
    extra = ({"rrule": f"FREQ=SECONDLY;INTERVAL={RECURRING_EVERY_MS // 1000};"
                       f"COUNT={RECURRING_COUNT}"} if mode == "recurring" else {})
    registered, reg_s, reg_errors = await register_all(session, fire_times, extra)
    if mode == "recurring":
        return await recurring_result(session, registered, reg_s, reg_errors, n), []
    last_fire = max(fire_times)
    print(f"[{mode}] registered {len(registered)} in {reg_s:.1f}s "
          f"({len(registered) / reg_s:.0f}/s); waiting for deliveries...", flush=True)
    arrivals = await wait_for_arrivals(session, len(registered), last_fire)
    summary, lags = summarize(registered, arrivals)
    result: dict[str, Any] = {
        "mode": mode,
        "triggers": n,
        "registered": len(registered),
        "registration_errors": reg_errors,
        "registration_per_s": round(len(registered) / reg_s, 1),
        **summary,
    }
    if mode in ("burst", "hot") and summary["delivered"]:
        # From the first fire time to the last arrival: how long the whole herd took.
        first, _ = first_arrivals(registered, arrivals)
        result["drain_ms"] = max(first.values()) - min(fire_times)
    return result, lags


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


NEW_MODES: dict[str, Callable[[aiohttp.ClientSession, int], Awaitable[dict[str, Any]]]] = {
    "register": modes.register_mode, "sustained": modes.sustained_mode,
    "sqs-purge": modes.sqs_purge_mode, "sweeper-kill": modes.sweeper_kill_mode,
    "batch": batch_bench.batch_mode, "fairness": fairness_bench.fairness_mode,
    "fairness-capped": fairness_bench.fairness_mode, "flow": flow_bench.flow_mode,
    "retry": retry_bench.retry_mode, "hostile": hostile_bench.hostile_mode,
    "priority": priority_bench.priority_mode,
}


async def run_one(mode: str, n: int) -> dict[str, Any]:
    """One mode with CPU accounting around it (registration, delivery and the waits)."""
    connector = aiohttp.TCPConnector(limit=CONCURRENCY * 2)
    async with aiohttp.ClientSession(connector=connector) as session:
        async with session.get(f"{API}/readyz") as r:
            if r.status != 200:
                sys.exit(f"the API at {API} is not ready ({r.status}): run `make up` first")
        idle_s_per_s = await asyncio.to_thread(idle_cpu)
        work_before = await asyncio.to_thread(cassandra_work.snapshot)
        meter = CpuMeter()
        meter.start()
        started = time.monotonic()
        try:
            if mode in NEW_MODES:
                result = await NEW_MODES[mode](session, n)
                result["mode"] = mode  # (two modes share the fairness run)
            else:
                result, _ = await measure_mode(mode, n, session)
        finally:
            cpu_s = meter.stop()
        wall_s = time.monotonic() - started
        work_after = await asyncio.to_thread(cassandra_work.snapshot)
        result["wall_s"] = round(wall_s, 1)
        result["cpu_s"] = cpu_s
        result["cpu_s_per_1000_deliveries"] = per_1000(cpu_s, result["delivered"])
        # What the stack spends idle (sweepers' scans, the reconciler, Cassandra's own
        # housekeeping) over as long, subtracted: the cost the triggers themselves caused.
        result["idle_cpu_s_per_s"] = idle_s_per_s
        result["cpu_s_per_1000_deliveries_idle_subtracted"] = per_1000(
            {k: round(max(0.0, v - idle_s_per_s.get(k, 0.0) * wall_s), 2)
             for k, v in cpu_s.items()}, result["delivered"])
        result["cassandra_work_per_delivery"] = cassandra_work.per_delivery(
            work_before, work_after, result["delivered"])
        return result


def idle_cpu(seconds: float = 10.0) -> dict[str, float]:
    """CPU seconds per second each component spends with no load (measured just before a
    mode starts, after the previous one settled)."""
    meter = CpuMeter()
    meter.start()
    time.sleep(seconds)
    return {k: round(v / seconds, 4) for k, v in meter.stop().items()}


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


def print_table(results: list[dict[str, Any]]) -> None:
    print(f"\n{'mode':12} {'n':>6} {'reg/s':>7} {'deliv':>6} {'miss':>5} {'dup':>4} "
          f"{'early':>5} {'p50':>7} {'p90':>7} {'p99':>7} {'max':>7} {'drain':>7}")
    for r in results:
        lag = r["lag_ms"]
        print(f"{r['mode']:12} {r['triggers']:>6} {r['registration_per_s']:>7} "
              f"{r['delivered']:>6} {r['missing']:>5} {r['duplicates']:>4} {r['early']:>5} "
              f"{lag['p50']:>7} {lag['p90']:>7} {lag['p99']:>7} {lag['max']!s:>7} "
              f"{r.get('drain_ms', '-')!s:>7}")
    print(f"\n{cpu_table_header()}")
    for r in results:
        print(cpu_table_row(r["mode"], r["cpu_s_per_1000_deliveries"]))
    print("\nthe same, idle subtracted")
    for r in results:
        print(cpu_table_row(r["mode"], r["cpu_s_per_1000_deliveries_idle_subtracted"]))
    for r in results:
        top = dict(list(r["cassandra_work_per_delivery"].items())[:12])
        print(f"{r['mode']}: cassandra per delivery {json.dumps(top)}")
    for r in results:
        extra = {k: r[k] for k in ("request_ms", "delivered_per_s", "rate_held", "late_count",
                                   "late_max_ms", "all_delivered", "killed", "b_lateness_ms",
                                   "a_lateness_ms", "b_statuses", "b_5xx") if k in r}
        if "delivered_per_s" in extra:
            extra["delivered_per_s"] = {k: v for k, v in extra["delivered_per_s"].items()
                                        if k != "timeline"}
        if extra:
            print(f"{r['mode']}: {json.dumps(extra)}")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("modes", nargs="*", metavar="MODE",
                   help=f"any of {', '.join(MODES)} (default: all, in that order)")
    p.add_argument("--scale", type=float, default=1.0, help="multiply trigger counts")
    p.add_argument("--results", type=Path, default=RESULTS,
                   help="where the JSON goes (default bench/results)")
    args = p.parse_args()
    unknown = sorted(set(args.modes) - set(MODES))
    if unknown:
        p.error(f"unknown mode(s): {', '.join(unknown)}")
    receiver = subprocess.Popen([sys.executable, str(ROOT / "bench" / "receiver.py"),
                                 "--port", str(RECEIVER_PORT)])
    try:
        time.sleep(1.0)
        results = run_modes(args.modes or list(MODES), args.scale)
    finally:
        receiver.terminate()
        receiver.wait(10)
    args.results.mkdir(parents=True, exist_ok=True)
    machine = {"python": platform.python_version(), "cpus": os.cpu_count(),
               "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
               "scale": args.scale, "loadavg_1m_at_end": round(os.getloadavg()[0], 2)}
    print_table(results)
    for r in results:
        (args.results / f"{r['mode']}.json").write_text(json.dumps(r | {"machine": machine},
                                                              indent=2) + "\n")
    print(f"\nlag = callback arrival - fireAt, in ms; drain = last arrival - first fire time; "
          f"cpu = CPU seconds per 1,000 deliveries; JSON in {args.results}/")


if __name__ == "__main__":
    main()
