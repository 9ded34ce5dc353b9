"""``make bench-peers`` (``python -m bench.peers``): the same loads, in the same run and on the
same machine, against our service (through its HTTP API, the stack ``make up`` started) and
against Celery ETA tasks on the same Redis (db 5), lag measured identically on one receiver.

1. ``spread`` (2,000 due uniformly over 30 s) and ``burst`` (5,000 due at one instant), ours
   first, then Celery's with the same fire-time pattern: lag p50/p95/p99/max, early, lost,
   registration throughput (ours: HTTP POSTs from 32 concurrent clients; Celery's:
   ``apply_async(eta=...)`` one after the other from one process).
2. Duplicates for delays longer than Celery's visibility timeout: 200 due 25-40 s out, the
   Celery worker restarted with ``visibility_timeout`` 10 s, once with kombu's default scan
   for expired reservations (every 100 s) and once with the scan every 10 s (kombu's advice
   for a low timeout); deliveries counted per id on the receiver until 30 s after the last
   due time, duplicates per 1,000.

Writes ``bench/results/peers.json``, ``peers.md`` (the ratios ours / Celery) and
``peers.png`` (CDFs of the lags). The Celery worker is started and stopped here.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import random
import subprocess
import sys
import time
from typing import Any

import aiohttp

from bench.common import (
    API,
    CONCURRENCY,
    RECEIVER_PORT,
    RESULTS,
    ROOT,
    now_ms,
    register_all,
    reset_receiver,
    summarize,
    wait_for_arrivals,
)
from bench.peers import celery_app, celery_side, report
from bench.run import fire_times_for, measure_mode, warm_up

MODES = {"spread": 2000, "burst": 5000}
DUP_N = 200
DUP_VISIBILITY_TIMEOUT_S = 10
DUP_AFTER_S = 30  # counted until this long after the last due time
# Every fire time this much later than bench/run.py's pattern (both systems): on a shared
# 2-core machine our HTTP registration of 2,000 can take longer than run.py's 20 s lead, and
# a trigger registered after its fire time would measure registration, not scheduling.
SHIFT_MS = 40_000


def session() -> aiohttp.ClientSession:
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=CONCURRENCY * 2))


async def ours(mode: str, n: int) -> dict[str, Any]:
    async with session() as s:
        result, lags = await measure_mode(mode, n, s, SHIFT_MS)
    return {**result, "system": "ours", "lags_ms": lags}


async def celery(mode: str, n: int, concurrency: int) -> dict[str, Any]:
    """The same fire-time pattern as ``measure_mode`` gives ours, as Celery ETA tasks."""
    celery_side.flush_peer_db()
    with celery_side.worker(concurrency) as pid:
        async with session() as s:
            await reset_receiver(s)
            cpu0 = celery_side.cpu_seconds(pid)
            fire_times = fire_times_for(mode, n, now_ms() + SHIFT_MS, random.Random(42))
            due = {f"celery-{mode}-{i}": t for i, t in enumerate(fire_times)}
            pub_s = await asyncio.to_thread(celery_side.publish, due)
            print(f"[celery {mode}] published {n} in {pub_s:.1f}s; waiting...", flush=True)
            arrivals = await wait_for_arrivals(s, n, max(fire_times))
            cpu_s = celery_side.cpu_seconds(pid) - cpu0
    summary, lags = summarize(due, arrivals)
    return {"system": "celery", "mode": mode, "triggers": n, "registered": n,
            "registration_errors": 0, "registration_per_s": round(n / pub_s, 1), **summary,
            "worker_cpu_s": round(cpu_s, 2), "lags_ms": lags}


def per_id_counts(due: dict[str, int], arrivals: list[Any]) -> dict[str, Any]:
    counts: dict[str, int] = {}
    for tid, *_ in arrivals:
        if tid in due:
            counts[tid] = counts.get(tid, 0) + 1
    dups = sum(c - 1 for c in counts.values())
    return {"ids": len(due), "delivered_ids": len(counts), "deliveries": sum(counts.values()),
            "duplicates": dups, "duplicates_per_1000": round(dups * 1000 / len(due), 1),
            "max_deliveries_per_id": max(counts.values(), default=0),
            "lost": len(due) - len(counts)}


async def dup_ours(n: int) -> dict[str, Any]:
    async with session() as s:
        await reset_receiver(s)
        start = now_ms()
        rng = random.Random(7)
        fire_times = [start + 25_000 + rng.randrange(15_000) for _ in range(n)]
        due, _, _ = await register_all(s, fire_times)
        arrivals = await wait_for_arrivals(s, n * 10, max(fire_times),
                                           patience_ms=DUP_AFTER_S * 1000, settle_s=0)
    return {"system": "ours", **per_id_counts(due, arrivals)}


async def dup_celery(n: int, concurrency: int, restore_throttle: int | None) -> dict[str, Any]:
    """``restore_throttle`` None: kombu's default scan for expired reservations (every
    10 x 10 s); 1: every 10 s, as kombu advises with a low visibility timeout."""
    celery_side.flush_peer_db()
    with celery_side.worker(concurrency, DUP_VISIBILITY_TIMEOUT_S, restore_throttle):
        async with session() as s:
            await reset_receiver(s)
            start = now_ms()
            rng = random.Random(7)
            due = {f"celery-dup-{i}": start + 25_000 + rng.randrange(15_000) for i in range(n)}
            await asyncio.to_thread(celery_side.publish, due)
            arrivals = await wait_for_arrivals(s, n * 10, max(due.values()),
                                               patience_ms=DUP_AFTER_S * 1000, settle_s=0)
    return {"system": "celery", "visibility_timeout_s": DUP_VISIBILITY_TIMEOUT_S,
            "unacked_restore_throttle": restore_throttle or "kombu default (10)",
            **per_id_counts(due, arrivals)}


async def api_ready() -> None:
    async with session() as s, s.get(f"{API}/readyz") as r:
        if r.status != 200:
            sys.exit(f"the API at {API} is not ready ({r.status}): run `make up` first")


def run_all(scale: float, concurrency: int, dup_n: int) -> dict[str, Any]:
    asyncio.run(api_ready())
    asyncio.run(warm_up())
    runs: list[dict[str, Any]] = []
    for mode, n in MODES.items():
        n = max(1, int(n * scale))
        for system in ("ours", "celery"):
            load = os.getloadavg()[0]
            run = asyncio.run(ours(mode, n) if system == "ours" else celery(mode, n, concurrency))
            # Other users of the machine show here: the same run on a quiet machine is faster.
            run["loadavg_1m"] = {"before": round(load, 2), "after": round(os.getloadavg()[0], 2)}
            runs.append(run)
    print(f"[duplicates] {dup_n} due 25-40 s out, each system in turn...", flush=True)
    dups = {"ours": asyncio.run(dup_ours(dup_n)),
            "celery": asyncio.run(dup_celery(dup_n, concurrency, None)),
            "celery_scan_10s": asyncio.run(dup_celery(dup_n, concurrency, 1))}
    return {"runs": runs, "duplicates": dups}


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.peers")
    p.add_argument("--scale", type=float, default=1.0, help="multiply the trigger counts")
    p.add_argument("--celery-concurrency", type=int, default=celery_side.DEFAULT_CONCURRENCY)
    p.add_argument("--dup-n", type=int, default=DUP_N)
    args = p.parse_args()
    print(f"Celery worker: prefork pool, concurrency {args.celery_concurrency}, broker "
          f"{celery_app.REDIS_URL}; duplicate test with visibility_timeout "
          f"{DUP_VISIBILITY_TIMEOUT_S} s", flush=True)
    receiver = subprocess.Popen([sys.executable, str(ROOT / "bench" / "receiver.py"),
                                 "--port", str(RECEIVER_PORT)])
    try:
        time.sleep(1.0)
        data = run_all(args.scale, args.celery_concurrency, args.dup_n)
    finally:
        receiver.terminate()
        receiver.wait(10)
    data["setup"] = {
        "celery_pool": "prefork", "celery_concurrency": args.celery_concurrency,
        "celery_broker": celery_app.REDIS_URL,
        "dup_visibility_timeout_s": DUP_VISIBILITY_TIMEOUT_S, "scale": args.scale,
        "python": platform.python_version(), "cpus": os.cpu_count(),
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    RESULTS.mkdir(parents=True, exist_ok=True)
    table = report.ratios(data)
    report.write(data, table, RESULTS)
    print(report.markdown(data, table))
    print(f"\nJSON, table and plot: {RESULTS.relative_to(ROOT)}/peers.json, peers.md, peers.png")


if __name__ == "__main__":
    main()
