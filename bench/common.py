"""What every benchmark shares: where the API and the receiver are, time in ms, percentiles,
restarting the service's processes, waiting for the receiver and summarising lags.

The receiver (``bench/receiver.py``) is a separate process on 127.0.0.1:``BENCH_RECEIVER_PORT``
(9100); lag is always ``arrival_ms - due_ms`` of the first arrival per id, measured there.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
API = f"http://{os.environ.get('TRIGGER_API_HOST', '127.0.0.1')}:" \
      f"{os.environ.get('TRIGGER_API_PORT', '8080')}"
TOKEN = os.environ.get("BENCH_TOKEN", "dev-token")
RECEIVER_PORT = int(os.environ.get("BENCH_RECEIVER_PORT", "9100"))
RECEIVER = f"http://127.0.0.1:{RECEIVER_PORT}"
CONCURRENCY = 32

# Through the sweeper: anything more than 30 s out waits in Cassandra for it (the default is
# 15 minutes, too long for a benchmark); the wheel hands triggers to SQS 15 s ahead.
SWEEP_ENV = {
    "TRIGGER_DIRECT_MAX_DELAY_S": "30",
    "TRIGGER_SWEEP_HORIZON_S": "25",
    "TRIGGER_SWEEP_INTERVAL_S": "2",
    "TRIGGER_SWEEP_PROMOTE_AHEAD_S": "15",
}

# One receiver arrival: [trigger_id, attempt, arrival_ms, occurrence_id] (bench/receiver.py).
Arrival = tuple[str, int, int, str]


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def iso_ms(ms: int) -> str:
    t = time.gmtime(ms // 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", t) + f".{ms % 1000:03d}Z"


def pct(values: list[int], p: float) -> float:
    """The ``p`` quantile (0..1) by linear interpolation; NaN for no values."""
    if not values:
        return float("nan")
    s = sorted(values)
    k = (len(s) - 1) * p
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


async def register_all(session: aiohttp.ClientSession, fire_times: list[int],
                       extra: dict[str, Any] | None = None) -> tuple[dict[str, int], float, int]:
    """Register every trigger (``CONCURRENCY`` clients in this process, no idempotency key);
    returns {trigger_id: fire_at_ms}, seconds taken, errors."""
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


def restart_app(env: dict[str, str]) -> None:
    """Restart the service's processes with these settings on top of the caller's."""
    full = {**os.environ, "TRIGGER_ENV": "development", **env}  # production is the default
    subprocess.run([str(ROOT / "infra" / "app.sh"), "down"], check=True, env=full,
                   stderr=subprocess.DEVNULL)
    subprocess.run([str(ROOT / "infra" / "app.sh"), "up"], check=True, env=full,
                   stderr=subprocess.DEVNULL)
    time.sleep(3)  # sweepers share out the shards


def app_pid(name: str) -> int | None:
    """The pid ``infra/app.sh`` recorded for ``name`` (``sweeper-1``...), if it is alive."""
    try:
        pid = int((ROOT / "var" / "run" / f"{name}.pid").read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if Path(f"/proc/{pid}").exists() else None


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


async def reset_receiver(session: aiohttp.ClientSession) -> None:
    async with session.post(f"{RECEIVER}/reset") as r:
        r.raise_for_status()


async def arrivals_count(session: aiohttp.ClientSession) -> int:
    async with session.get(f"{RECEIVER}/stats") as r:
        return int((await r.json())["arrivals"])


async def wait_for_arrivals(session: aiohttp.ClientSession, expected: int, last_due_ms: int,
                            patience_ms: int = 90_000, settle_s: float = 2.0) -> list[Arrival]:
    """Poll the receiver until ``expected`` arrivals (and 3 s past the last due time) or
    ``patience_ms`` past the last due time; then ``settle_s`` more for late duplicates.
    Returns every arrival recorded since the last reset."""
    deadline = last_due_ms + patience_ms
    while now_ms() < deadline:
        if await arrivals_count(session) >= expected and now_ms() > last_due_ms + 3_000:
            break
        await asyncio.sleep(0.5)
    await asyncio.sleep(settle_s)
    async with session.get(f"{RECEIVER}/dump") as r:
        return [tuple(a) for a in await r.json()]


def first_arrivals(due: dict[str, int], arrivals: Iterable[Arrival]) -> tuple[dict[str, int], int]:
    """The first arrival time per id of ``due``, and how many arrivals were for those ids."""
    first: dict[str, int] = {}
    total = 0
    for tid, _attempt, at, _occ in arrivals:
        if tid in due:
            total += 1
            first[tid] = min(at, first.get(tid, at))
    return first, total


def lag_stats(lags: list[int]) -> dict[str, Any]:
    return {"p50": round(pct(lags, 0.50), 1), "p90": round(pct(lags, 0.90), 1),
            "p95": round(pct(lags, 0.95), 1), "p99": round(pct(lags, 0.99), 1),
            "max": max(lags) if lags else None,
            "mean": round(statistics.fmean(lags), 1) if lags else None}


def summarize(due: dict[str, int], arrivals: Iterable[Arrival]) -> tuple[dict[str, Any],
                                                                          list[int]]:
    """Delivered / missing / duplicates / early and the lag percentiles (ms) of the first
    arrival per id; also the lags themselves (for plots)."""
    return summarize_first(due, *first_arrivals(due, arrivals))


def summarize_first(due: dict[str, int], first: dict[str, int],
                    total: int) -> tuple[dict[str, Any], list[int]]:
    """``summarize`` from ``first_arrivals``' answer (for a caller that also needs it)."""
    lags = [first[t] - due[t] for t in first]
    return {
        "delivered": len(first),
        "missing": len(due) - len(first),
        "duplicates": total - len(first),
        "early": sum(1 for lag in lags if lag < 0),
        "lag_ms": lag_stats(lags),
    }, lags
