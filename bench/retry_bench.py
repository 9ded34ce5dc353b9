"""``make bench``'s ``retry`` mode: how late a short retry starts on an idle stack.

N (60) triggers due over 10 s, each answered 500 on its first attempt and 200 on the next
(``bench/receiver.py``'s ``/fail-once/``), with a 1 s backoff (``bench/run.py`` restarts the
service with ``TRIGGER_DISPATCH_RETRY_BACKOFF_S=1``). A retry is due 1 s after its failure;
its lateness is its arrival less the first attempt's arrival less that second, as the
receiver saw them (the failure is recorded a few ms after the first arrival, so this
overstates the lateness by those ms, never understates it). Reports the lateness
percentiles (``lag_ms``: the target is p99 under 1 s), the retries that never came
(``missing``) and any that came sooner than the backoff (``early``).

Keep N small enough that the receiver's origin does not see
``TRIGGER_DISPATCH_BREAKER_FAIL_MAX`` (20) failures in a row: at 600 over the 10 s the
circuit opens and the retries wait for it (that measures the breaker, not the retries).

Alone, against a stack already started with that backoff (the API at ``TRIGGER_API_HOST`` /
``TRIGGER_API_PORT``, its callers allowing the receiver's ``BENCH_RECEIVER_PORT``)::

    TRIGGER_DISPATCH_RETRY_BACKOFF_S=1 make up   # or any stack started so
    python bench/retry_bench.py [--n 60] [--out bench/results/retry.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.batch_bench import register_batches
from bench.common import (
    API,
    RECEIVER,
    RECEIVER_PORT,
    RESULTS,
    ROOT,
    Arrival,
    lag_stats,
    now_ms,
    reset_receiver,
)

BACKOFF_S = 1
ENV = {"TRIGGER_DISPATCH_RETRY_BACKOFF_S": str(BACKOFF_S)}
SPREAD_MS = 10_000
PATIENCE_MS = 60_000  # after the last due time: a retry later than this counts as missing


def retry_lateness(due: dict[str, int], arrivals: list[Arrival]) -> dict[str, Any]:
    """Each trigger's first two arrivals (attempts 1 and 2): the retry's lateness behind
    its backoff, in ms, summarised."""
    by_attempt: dict[tuple[str, int], int] = {}
    for tid, attempt, at, _occ in arrivals:
        if tid in due:
            by_attempt[(tid, attempt)] = min(at, by_attempt.get((tid, attempt), at))
    lateness = [by_attempt[(tid, 2)] - by_attempt[(tid, 1)] - BACKOFF_S * 1000
                for tid in due if (tid, 1) in by_attempt and (tid, 2) in by_attempt]
    return {
        "delivered": len(lateness),
        "missing": len(due) - len(lateness),
        "duplicates": sum(1 for tid, attempt, _at, _occ in arrivals
                          if tid in due and attempt <= 2) - 2 * len(lateness),
        "early": sum(1 for ms in lateness if ms < 0),
        "first_attempts_late_ms_max": max(
            (by_attempt[(tid, 1)] - due[tid] for tid in due if (tid, 1) in by_attempt),
            default=None),
        "lag_ms": lag_stats(lateness),
    }


async def retry_mode(session: aiohttp.ClientSession, n: int) -> dict[str, Any]:
    await reset_receiver(session)
    start = now_ms() + 15_000  # registration is over well before
    fire_times = [start + i * SPREAD_MS // max(1, n) for i in range(n)]
    registered, reg_s, refused, _ = await register_batches(
        session, fire_times, None, path="fail-once/retry")
    print(f"[retry] registered {len(registered)} in {reg_s:.1f}s; the first due in "
          f"{(start - now_ms()) / 1000:.0f}s", flush=True)
    deadline = max(fire_times) + BACKOFF_S * 1000 + PATIENCE_MS
    arrivals: list[Arrival] = []
    while now_ms() < deadline:
        async with session.get(f"{RECEIVER}/dump") as r:
            arrivals = [tuple(a) for a in await r.json()]
        if sum(1 for a in arrivals if a[0] in registered and a[1] == 2) >= len(registered):
            break
        await asyncio.sleep(0.5)
    result = {"mode": "retry", "triggers": n, "registered": len(registered),
              "registration_errors": refused,
              "registration_per_s": round(len(registered) / max(reg_s, 1e-9), 1),
              "backoff_s": BACKOFF_S, **retry_lateness(registered, arrivals)}
    lag = result["lag_ms"]
    print(f"[retry] {result['delivered']} retries, {result['missing']} missing, "
          f"{result['early']} early; lateness ms p50 {lag['p50']} p90 {lag['p90']} "
          f"p99 {lag['p99']} max {lag['max']}", flush=True)
    return result


async def _alone(n: int) -> dict[str, Any]:
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{API}/readyz") as r:
            if r.status != 200:
                sys.exit(f"the API at {API} is not ready ({r.status})")
        for _ in range(100):  # the receiver process is starting (its imports take a while)
            try:
                async with session.get(f"{RECEIVER}/stats") as r:
                    if r.status == 200:
                        break
            except aiohttp.ClientConnectionError:
                await asyncio.sleep(0.1)
        return await retry_mode(session, n)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=60)
    p.add_argument("--out", type=Path, default=RESULTS / "retry.json")
    args = p.parse_args()
    receiver = subprocess.Popen([sys.executable, str(ROOT / "bench" / "receiver.py"),
                                 "--port", str(RECEIVER_PORT)])
    try:
        result = asyncio.run(_alone(args.n))
    finally:
        receiver.terminate()
        receiver.wait(10)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
