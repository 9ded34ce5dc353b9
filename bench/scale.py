"""``make bench-scale``: does what is stored change what anything costs?

Measures, on the stack ``make up`` started, then again after storing ``--n`` (1,000,000)
pending reminders for the ``dev`` caller — 90 % one-time triggers 2 to 365 days ahead, 10 %
daily series in America/New_York that have fired once (stored at their next occurrence) —
written by a bulk loader through the store adapter (``CassandraStore.create``, as the API
writes them; the measured phases go through the HTTP API):

- the keyed registration rate (``bench/loadgen.py`` in its own process, 3,000 triggers);
- the ``spread`` mode's lag (2,000 triggers over 30 s through the API; nothing lost or early);
- the idle CPU of every process over 60 s with nothing due;
- the latency of the first page of ``GET /v1/triggers?status=PENDING`` and of the unfiltered
  list (limit 50), median of 20, and whether each page was full.

Target: every figure after within 20 % of before (idle CPU within 1.2x + 2 % of a core).
Run it on a fresh store (``make clean-data && make up``) for a true "before". Writes
``bench/results/scale.json`` and prints a table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import run as bench_run
from bench.common import API, RECEIVER_PORT, RESULTS, ROOT, TOKEN, now_ms, reset_receiver
from bench.cpu import COMPONENTS, CpuMeter
from trigger_service.adapters.cassandra.store import CassandraStore
from trigger_service.adapters.crypto.keyring import open_cipher
from trigger_service.config.settings import Settings
from trigger_service.core.model import Route, Trigger, new_trigger_id, shard_of
from trigger_service.core.time.recurrence import Recurrence, RuleKind
from trigger_service.core.time.timing import DAY_MS

CALLER = "dev"
LOAD_CONCURRENCY = 384
IDLE_S = 60.0


async def load(n: int, settings: Settings) -> dict[str, Any]:
    """``n`` pending reminders through the store adapter; returns the rate."""
    store = await CassandraStore.connect(
        settings.cassandra, await open_cipher(settings.encryption, settings.sqs),
        seal_payloads=settings.encryption.payloads)
    rng = random.Random(7)
    start = now_ms()
    series = Recurrence(RuleKind.RRULE, "FREQ=DAILY;BYHOUR=9;BYMINUTE=0;BYSECOND=0",
                        "America/New_York", datetime(2026, 1, 1, 9, 0))
    tomorrow_9 = datetime.now(UTC).replace(hour=14, minute=0, second=0, microsecond=0) \
        + timedelta(days=1)
    next_ms = int(tomorrow_9.timestamp() * 1000)
    done = 0
    t0 = time.perf_counter()

    def make(i: int) -> Trigger:
        created = start + i // 1000  # distinct ids, creation times never in the future
        tid = new_trigger_id(created)
        base = Trigger(trigger_id=tid, caller=CALLER,
                       callback_url=f"http://127.0.0.1:{RECEIVER_PORT}/cb/scale-{i}",
                       payload_json=f'{{"i": {i}}}', fire_at_ms=0, created_at_ms=created,
                       shard=shard_of(tid, settings.shards), route=Route.SWEEP)
        if i % 10 == 0:  # a daily series that fired once: stored at its next occurrence
            return replace(base, schedule=series, fire_at_ms=next_ms, occurrence_index=1,
                           occurrence_seq=1, occurrences_fired=1, tzdata_version="2025b")
        return replace(base, fire_at_ms=start + 2 * DAY_MS + rng.randrange(363 * DAY_MS))

    async def worker(first: int) -> None:
        nonlocal done
        for i in range(first, n, LOAD_CONCURRENCY):
            t = make(i)
            await store.create(t, settings.index_ttl_s(t.fire_at_ms, start))
            done += 1
            if done % 100_000 == 0:
                print(f"  loaded {done:,} ({done / (time.perf_counter() - t0):,.0f}/s)",
                      flush=True)

    try:
        await asyncio.gather(*(worker(k) for k in range(LOAD_CONCURRENCY)))
    finally:
        await store.close()
    elapsed = time.perf_counter() - t0
    return {"stored": n, "seconds": round(elapsed, 1), "per_s": round(n / elapsed)}


def keyed_registration_rate(n: int = 3000) -> dict[str, Any]:
    """``bench/loadgen.py`` in its own process: far-future keyed registrations."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "load.json"
        subprocess.run([sys.executable, str(ROOT / "bench" / "loadgen.py"), "--n", str(n),
                        "--first-ms", str(now_ms() + 3 * DAY_MS), "--spread-ms", str(DAY_MS),
                        "--concurrency", "64", "--seed", str(now_ms()), "--out", str(out)],
                       check=True)
        got = json.loads(out.read_text())
    return {"n": n, "per_s": round(len(got["registered"]) / got["elapsed_s"]),
            "errors": got["errors"]}


async def spread() -> dict[str, Any]:
    connector = aiohttp.TCPConnector(limit=64)
    async with aiohttp.ClientSession(connector=connector) as session:
        await reset_receiver(session)
        result, _ = await bench_run.measure_mode("spread", 2000, session)
    return {k: result[k] for k in ("delivered", "missing", "duplicates", "early", "lag_ms")}


async def first_pages(rounds: int = 20) -> dict[str, Any]:
    """Median and max latency of each list's first page, and whether every page was full."""
    headers = {"Authorization": f"Bearer {TOKEN}"}
    out: dict[str, Any] = {}
    async with aiohttp.ClientSession() as session:
        for label, query in (("pending", "?status=PENDING&limit=50"), ("all", "?limit=50")):
            times, sizes = [], []
            for _ in range(rounds):
                t0 = time.perf_counter()
                async with session.get(f"{API}/v1/triggers{query}", headers=headers) as r:
                    body = await r.json()
                    assert r.status == 200, body
                times.append((time.perf_counter() - t0) * 1000)
                sizes.append(len(body["items"]))
            out[label] = {"median_ms": round(statistics.median(times), 1),
                          "max_ms": round(max(times), 1), "full": min(sizes) == 50,
                          "items": sizes[0]}
    return out


def idle_cpu(seconds: float | None = None) -> dict[str, float]:
    """CPU seconds per second of each component over ``seconds`` with nothing due."""
    seconds = IDLE_S if seconds is None else seconds
    meter = CpuMeter()
    meter.start()
    time.sleep(seconds)
    return {k: round(v / seconds, 4) for k, v in meter.stop().items()}


def settle(limit_s: float = 600) -> float:
    """Wait for the load's aftermath (Cassandra's flushes and compactions) to pass: until
    Cassandra's CPU over 15 s is below 20 % of a core, at most ``limit_s``."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit_s:
        if idle_cpu(15.0).get("cassandra", 0.0) < 0.2:
            break
    return round(time.monotonic() - t0)


def measure(label: str) -> dict[str, Any]:
    print(f"[{label}] idle CPU over {IDLE_S:.0f} s", flush=True)
    idle = idle_cpu()
    print(f"[{label}] keyed registrations", flush=True)
    rate = keyed_registration_rate()
    print(f"[{label}] spread", flush=True)
    lag = asyncio.run(spread())
    # After the registrations: even on a fresh store the caller then has pending ones.
    print(f"[{label}] first pages", flush=True)
    pages = asyncio.run(first_pages())
    return {"idle_cpu_s_per_s": idle, "first_page": pages, "keyed_registration": rate,
            "spread": lag}


def verdict(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """Each figure's ratio after/before and whether it is within its target."""
    out: dict[str, Any] = {}
    rb, ra = before["keyed_registration"]["per_s"], after["keyed_registration"]["per_s"]
    out["keyed_registration"] = {"ratio": round(ra / rb, 3), "ok": ra >= 0.8 * rb}
    pb, pa = before["spread"]["lag_ms"]["p99"], after["spread"]["lag_ms"]["p99"]
    out["spread_p99"] = {"ratio": round(pa / pb, 3), "ok": pa <= 1.2 * pb}
    for label in ("pending", "all"):
        b = before["first_page"][label]["median_ms"]
        a = after["first_page"][label]["median_ms"]
        out[f"first_page_{label}"] = {"ratio": round(a / b, 3), "ok": a <= 1.2 * b,
                                      "full": after["first_page"][label]["full"]}
    for k in COMPONENTS:
        b, a = before["idle_cpu_s_per_s"].get(k, 0.0), after["idle_cpu_s_per_s"].get(k, 0.0)
        out[f"idle_{k}"] = {"before": b, "after": a, "ok": a <= 1.2 * b + 0.02}
    s = after["spread"]
    out["nothing_lost_or_early"] = s["missing"] == 0 and s["early"] == 0
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=1_000_000, help="reminders to store")
    p.add_argument("--idle-s", type=float, default=60.0, help="idle CPU window (s)")
    args = p.parse_args()
    global IDLE_S
    IDLE_S = args.idle_s
    settings = Settings.from_env()
    receiver = subprocess.Popen([sys.executable, str(ROOT / "bench" / "receiver.py"),
                                 "--port", str(RECEIVER_PORT)])
    try:
        time.sleep(1.0)
        asyncio.run(bench_run.warm_up())
        before = measure("before")
        print(f"[load] storing {args.n:,} pending reminders", flush=True)
        loaded = asyncio.run(load(args.n, settings))
        print(f"[load] {loaded}; settling", flush=True)
        loaded["settle_s"] = settle()
        after = measure("after")
    finally:
        receiver.terminate()
        receiver.wait(10)
    result = {"before": before, "load": loaded, "after": after,
              "verdict": verdict(before, after),
              "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "scale.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["verdict"], indent=2))
    for label in ("before", "after"):
        r = result[label]
        print(f"{label:7} keyed reg/s {r['keyed_registration']['per_s']:>6}  spread p99 "
              f"{r['spread']['lag_ms']['p99']:>7} ms  PENDING page "
              f"{r['first_page']['pending']['median_ms']:>6} ms  list page "
              f"{r['first_page']['all']['median_ms']:>6} ms  idle "
              + " ".join(f"{k} {v:.3f}" for k, v in r["idle_cpu_s_per_s"].items()))
    print(f"JSON in {RESULTS / 'scale.json'}")


if __name__ == "__main__":
    main()
