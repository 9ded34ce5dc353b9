"""The newer ``make bench`` modes (``bench/run.py`` runs them, with CPU accounting):

- ``register``: N=5,000 registrations with ``Idempotency-Key`` from 64 concurrent clients in
  an independent process (``bench/loadgen.py``): registrations/s and request latency p50/p99;
  each trigger fires 20-50 s after its own registration (``delaySeconds``), lag reported too.
- ``sustained``: 1,000 fires/s for 60 s (60,000 triggers registered ahead of time with keys,
  fire times uniform): the per-second delivery timeline over the due window (min / median /
  max), whether the rate was held, lag p50/p99. ``--scale`` shortens the window, not the rate.
- ``sqs-purge``: a spread run (2,000 over 30 s) whose main SQS queue is purged halfway through
  the fire window: the messages not yet received are gone; the sweepers' due-scan re-sends
  whatever is still PENDING ``TRIGGER_HEAL_OVERDUE_GRACE_S`` after its time. Reports how many
  arrived late and how late.
- ``sweeper-kill``: a ``long`` run (40-70 s out, every trigger through the sweepers) with
  ``sweeper-1`` SIGKILLed halfway through its sweeping; ``sweeper-2`` takes its shards over
  when their leases expire. Reports lag p99/max and lost. ``sweeper-1`` is started again
  (``infra/app.sh up``) after the run.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import boto3

from bench.common import (
    ROOT,
    SWEEP_ENV,
    app_pid,
    first_arrivals,
    now_ms,
    pct,
    register_all,
    reset_receiver,
    summarize,
    wait_for_arrivals,
)
from trigger_service.adapters import schema
from trigger_service.config.sqs import SqsSettings

REGISTER_CLIENTS = 64
SUSTAINED_RATE_PER_S = 1000
# Late = more than this past the due time (the purge's victims come back a grace later).
LATE_MS = 1000


def lead_ms(n: int) -> int:
    """From the start of registration to the first fire time: registration must be over by
    then even at 100/s (a busy shared machine), else it measures registration."""
    return 20_000 + n * 10


def run_loadgen(n: int, first_ms: int, spread_ms: int, concurrency: int,
                delay_s: float | None = None) -> dict[str, Any]:
    """``bench/loadgen.py`` in its own process; its JSON result."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "load.json"
        delay = [] if delay_s is None else ["--delay-s", str(delay_s)]
        subprocess.run([sys.executable, str(ROOT / "bench" / "loadgen.py"), "--n", str(n),
                        "--first-ms", str(first_ms), "--spread-ms", str(spread_ms),
                        "--concurrency", str(concurrency), "--out", str(out), *delay],
                       check=True)
        result: dict[str, Any] = json.loads(out.read_text())
        return result


def registration_stats(load: dict[str, Any]) -> dict[str, Any]:
    lat = load["latencies_ms"]
    return {"registered": len(load["registered"]), "registration_errors": load["errors"],
            "registration_per_s": round(len(load["registered"]) / load["elapsed_s"], 1),
            "request_ms": {"p50": round(pct(lat, 0.5), 1), "p99": round(pct(lat, 0.99), 1),
                           "max": round(max(lat), 1) if lat else None},
            "clients": REGISTER_CLIENTS}


async def register_mode(session: aiohttp.ClientSession, n: int) -> dict[str, Any]:
    await reset_receiver(session)
    start = now_ms()
    # delaySeconds 20-50 s: each fires after its own registration, however long that takes
    # (the fires overlap the registration, as in steady use).
    load = await asyncio.to_thread(run_loadgen, n, start, 30_000, REGISTER_CLIENTS, 20.0)
    print(f"[register] {len(load['registered'])} in {load['elapsed_s']:.1f}s", flush=True)
    due: dict[str, int] = load["registered"]
    arrivals = await wait_for_arrivals(session, len(due), max(due.values(), default=start))
    summary, _ = summarize(due, arrivals)
    return {"mode": "register", "triggers": n, **registration_stats(load), **summary}


def timeline(first: dict[str, int], from_ms: int, to_ms: int) -> list[int]:
    """Deliveries (first arrivals) per whole second from ``from_ms`` to ``to_ms``."""
    counts = Counter((at - from_ms) // 1000 for at in first.values() if from_ms <= at < to_ms)
    return [counts.get(s, 0) for s in range((to_ms - from_ms) // 1000)]


async def sustained_mode(session: aiohttp.ClientSession, n: int) -> dict[str, Any]:
    await reset_receiver(session)
    start = now_ms()
    window_ms = max(1000, n * 1000 // SUSTAINED_RATE_PER_S)
    first = start + lead_ms(n)
    load = await asyncio.to_thread(run_loadgen, n, first, window_ms, REGISTER_CLIENTS)
    ended = load["ended_ms"]
    print(f"[sustained] {len(load['registered'])} in {load['elapsed_s']:.1f}s; window "
          f"{window_ms / 1000:.0f}s from {(first - ended) / 1000:.1f}s after", flush=True)
    due: dict[str, int] = load["registered"]
    arrivals = await wait_for_arrivals(session, len(due), first + window_ms,
                                       patience_ms=180_000)
    summary, _ = summarize(due, arrivals)
    firsts, _ = first_arrivals(due, arrivals)
    per_s = timeline(firsts, first, first + window_ms)
    target = len(due) * 1000 / window_ms
    median = statistics.median(per_s) if per_s else 0
    last = max(firsts.values(), default=first)
    return {"mode": "sustained", "triggers": n, **registration_stats(load), **summary,
            "target_per_s": round(target, 1), "window_s": window_ms / 1000,
            "registration_done_before_window": ended < first,
            "delivered_per_s": {"min": min(per_s, default=0), "median": median,
                                "max": max(per_s, default=0), "timeline": per_s},
            # Held: the median second delivered >= 95% of the target and lag p99 <= 1 s.
            "rate_held": median >= 0.95 * target and summary["lag_ms"]["p99"] <= 1000,
            "last_arrival_after_window_s": round((last - first - window_ms) / 1000, 1)}


def purge_main_queue() -> str:
    """``PurgeQueue`` on each lane of ``TRIGGER_SQS_QUEUE`` (LocalStack, the service's own
    settings)."""
    env = os.environ
    client = boto3.client(
        "sqs", endpoint_url=env.get("TRIGGER_SQS_ENDPOINT_URL", "http://127.0.0.1:4566"),
        region_name=env.get("TRIGGER_SQS_REGION", "us-east-1"),
        aws_access_key_id=env.get("TRIGGER_SQS_ACCESS_KEY_ID", "test"),
        aws_secret_access_key=env.get("TRIGGER_SQS_SECRET_ACCESS_KEY", "test"))
    name = env.get("TRIGGER_SQS_QUEUE", "triggers")
    for lane_name in schema.sqs_main_queues(
            name, int(env.get("TRIGGER_SQS_LANES", SqsSettings().lanes)),
            int(env.get("TRIGGER_SQS_HIGH_LANES", SqsSettings().high_lanes))):
        client.purge_queue(QueueUrl=client.get_queue_url(QueueName=lane_name)["QueueUrl"])
    return name


def lateness(due: dict[str, int], arrivals: list[Any], after_ms: int) -> dict[str, Any]:
    """Of the triggers due after ``after_ms``: how many arrived more than LATE_MS late, and
    those lags' p50 / max (ms)."""
    firsts, _ = first_arrivals(due, arrivals)
    late = [firsts[t] - due[t] for t in firsts
            if due[t] >= after_ms and firsts[t] - due[t] > LATE_MS]
    return {"late_count": len(late), "late_threshold_ms": LATE_MS,
            "late_p50_ms": round(pct(late, 0.5), 1) if late else None,
            "late_max_ms": max(late, default=None)}


async def register_spread(session: aiohttp.ClientSession, n: int, lead_ms: int,
                          spread_ms: int) -> tuple[dict[str, int], float, int]:
    start = now_ms()
    rng = random.Random(42)
    fire_times = [start + lead_ms + rng.randrange(spread_ms) for _ in range(n)]
    return await register_all(session, fire_times)


async def at(when_ms: int) -> None:
    delay = (when_ms - now_ms()) / 1000
    if delay > 0:
        await asyncio.sleep(delay)


async def sqs_purge_mode(session: aiohttp.ClientSession, n: int) -> dict[str, Any]:
    await reset_receiver(session)
    due, reg_s, reg_errors = await register_spread(session, n, lead_ms(n), 30_000)
    first_due, last_due = min(due.values()), max(due.values())
    purge_ms = (first_due + last_due) // 2
    await at(purge_ms)
    queue = await asyncio.to_thread(purge_main_queue)
    print(f"[sqs-purge] purged {queue} at +{(purge_ms - first_due) / 1000:.0f}s of the window",
          flush=True)
    arrivals = await wait_for_arrivals(session, len(due), last_due, patience_ms=120_000)
    summary, _ = summarize(due, arrivals)
    return {"mode": "sqs-purge", "triggers": n, "registered": len(due),
            "registration_errors": reg_errors,
            "registration_per_s": round(len(due) / reg_s, 1), **summary,
            "purged_queue": queue, "purged_at_s_into_window": (purge_ms - first_due) / 1000,
            "all_delivered": summary["missing"] == 0, **lateness(due, arrivals, purge_ms)}


async def sweeper_kill_mode(session: aiohttp.ClientSession, n: int) -> dict[str, Any]:
    await reset_receiver(session)
    # Every fire time beyond the 30 s direct limit even for the last one registered.
    due, reg_s, reg_errors = await register_spread(session, n, 40_000 + n * 15, 30_000)
    # Halfway through the window minus the promote-ahead: the sweepers hold about half.
    kill_ms = (min(due.values()) + max(due.values())) // 2 - 15_000
    await at(kill_ms)
    pid = app_pid("sweeper-1")
    if pid is not None:
        os.kill(pid, signal.SIGKILL)
    print(f"[sweeper-kill] SIGKILL sweeper-1 (pid {pid})", flush=True)
    arrivals = await wait_for_arrivals(session, len(due), max(due.values()),
                                       patience_ms=120_000)
    summary, _ = summarize(due, arrivals)
    await asyncio.to_thread(subprocess.run, [str(ROOT / "infra" / "app.sh"), "up"],
                            check=True, stderr=subprocess.DEVNULL,
                            env={**os.environ, "TRIGGER_ENV": "development", **SWEEP_ENV})
    return {"mode": "sweeper-kill", "triggers": n, "registered": len(due),
            "registration_errors": reg_errors,
            "registration_per_s": round(len(due) / reg_s, 1), **summary,
            "killed": "sweeper-1" if pid else None, "killed_pid": pid,
            "killed_at_s_before_window_middle": 15.0}
