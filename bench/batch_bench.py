"""``make bench``'s ``batch`` mode: registrations through ``POST /v1/triggers/batch``
(1,000 items a request, ``BATCH_CLIENTS`` requests at once, every item with its own
``idempotencyKey``), in two phases measured apart:

- ``sweep``: a campaign, N triggers due in 2-3 hours: route SWEEP, so a registration is
  Cassandra writes and Redis only (no SQS send). Nothing fires during the run.
- ``direct``: N/4 triggers due 60-90 s out (more for a slow registration): route DIRECT,
  so each also costs an SQS send (delayed), and each is delivered after the measured window
  (lag, missing and duplicates as in every mode).

Each phase reports triggers/s and CPU-ms per trigger by process (``bench/cpu.py``: the
service's processes of this checkout, Cassandra, LocalStack, Redis; the dependencies are
shared with whatever else runs on the machine). Run alone: ``python bench/run.py batch``.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from typing import Any

import aiohttp

from bench.common import (
    API,
    RECEIVER_PORT,
    TOKEN,
    iso_ms,
    now_ms,
    pct,
    reset_receiver,
    summarize,
    wait_for_arrivals,
)
from bench.cpu import CpuMeter

BATCH_ITEMS = 1000
BATCH_CLIENTS = 2  # concurrent batch requests: one per core of the machine
SWEEP_LEAD_MS = 2 * 3_600_000
IDLE_S = 5.0


def idle_cpu(seconds: float) -> dict[str, float]:
    """CPU seconds per second each component spends with no load of ours."""
    meter = CpuMeter()
    meter.start()
    time.sleep(seconds)
    return {k: round(v / seconds, 4) for k, v in meter.stop().items()}


async def register_batches(session: aiohttp.ClientSession, fire_times: list[int],
                           tag: str | None, *, token: str = TOKEN,
                           clients: int = BATCH_CLIENTS, path: str = "cb",
                           extra: dict[str, Any] | None = None,
                           ) -> tuple[dict[str, int], float, int, list[float]]:
    """Every trigger in batches (``clients`` requests at once, as ``token``'s caller), item
    ``i`` to the receiver's ``/{path}/{i}``, with the idempotency key ``bench-{tag}-{i}``
    (none if ``tag`` is None) and ``extra``'s fields; {trigger_id: fire_at_ms}, seconds,
    refused items and the requests' latencies (ms)."""
    bodies: list[dict[str, Any]] = [
        {"callbackUrl": f"http://127.0.0.1:{RECEIVER_PORT}/{path}/{i}", "payload": {"i": i},
         "fireAt": iso_ms(at), **(extra or {}),
         **({"idempotencyKey": f"bench-{tag}-{i}"} if tag is not None else {})}
        for i, at in enumerate(fire_times)]
    chunks = [bodies[i:i + BATCH_ITEMS] for i in range(0, len(bodies), BATCH_ITEMS)]
    registered: dict[str, int] = {}
    refused = 0
    latencies: list[float] = []
    headers = {"Authorization": f"Bearer {token}"}

    async def client() -> None:
        nonlocal refused
        while chunks:
            chunk = chunks.pop(0)
            t0 = time.perf_counter()
            async with session.post(f"{API}/v1/triggers/batch", json={"items": chunk},
                                    headers=headers) as resp:
                answer = await resp.json()
            latencies.append((time.perf_counter() - t0) * 1000)
            if resp.status != 200:
                refused += len(chunk)
                print(f"[batch] {resp.status}: {answer}", flush=True)
                continue
            for item, body in zip(answer["items"], chunk, strict=True):
                if item["status"] in (200, 201):
                    registered[item["triggerId"]] = fire_times[body["payload"]["i"]]
                else:
                    refused += 1

    t0 = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    return registered, time.perf_counter() - t0, refused, latencies


async def phase(session: aiohttp.ClientSession, name: str,
                fire_times: list[int]) -> tuple[dict[str, int], dict[str, Any]]:
    """One measured registration phase: its triggers and its numbers (CPU also with what
    each component spends idle, measured just before, subtracted: the machine is shared)."""
    idle_s_per_s = await asyncio.to_thread(idle_cpu, IDLE_S)
    meter = CpuMeter()
    meter.start()
    due, seconds, refused, latencies = await register_batches(
        session, fire_times, f"{name}-{uuid.uuid4().hex[:8]}")
    cpu_s = meter.stop()
    n = max(1, len(due))
    per_trigger = {k: round(v * 1000 / n, 3) for k, v in cpu_s.items()}
    idle_subtracted = {k: round(max(0.0, v - idle_s_per_s.get(k, 0.0) * seconds) * 1000 / n, 3)
                       for k, v in cpu_s.items()}
    stats = {"triggers": len(fire_times), "registered": len(due), "refused": refused,
             "seconds": round(seconds, 2), "per_s": round(len(due) / seconds, 1),
             "request_ms": {"p50": round(pct([round(x) for x in latencies], 0.5), 1),
                            "max": round(max(latencies, default=0.0), 1)},
             "cpu_ms_per_trigger": per_trigger,
             "cpu_ms_per_trigger_total": round(sum(per_trigger.values()), 3),
             "idle_cpu_s_per_s": idle_s_per_s,
             "cpu_ms_per_trigger_idle_subtracted": idle_subtracted,
             "cpu_ms_per_trigger_idle_subtracted_total": round(sum(idle_subtracted.values()),
                                                               3)}
    print(f"[batch:{name}] {len(due)} in {seconds:.1f}s = {stats['per_s']}/s; CPU-ms per "
          f"trigger {per_trigger} (total {stats['cpu_ms_per_trigger_total']}); idle "
          f"subtracted {idle_subtracted} (total "
          f"{stats['cpu_ms_per_trigger_idle_subtracted_total']})", flush=True)
    return due, stats


async def batch_mode(session: aiohttp.ClientSession, n: int) -> dict[str, Any]:
    await reset_receiver(session)
    rng = random.Random(26)
    start = now_ms()
    _, sweep = await phase(session, "sweep", [start + SWEEP_LEAD_MS + rng.randrange(3_600_000)
                                              for _ in range(n)])
    n_direct = max(1, n // 4)
    start = now_ms()
    lead_ms = 60_000 + n_direct * 5  # after the registration window even at 200/s
    due, direct = await phase(session, "direct", [start + lead_ms + rng.randrange(30_000)
                                                  for _ in range(n_direct)])
    arrivals = await wait_for_arrivals(session, len(due), max(due.values(), default=start))
    summary, _ = summarize(due, arrivals)
    return {"mode": "batch", "triggers": n_direct, "registration_per_s": direct["per_s"],
            "sweep": sweep, "direct": direct, **summary}
