"""An independent load generator: registers triggers through the HTTP API from its own OS
process, so the client's CPU is not the measuring process's (the ``register`` and
``sustained`` modes of ``bench/run.py``).

``python bench/loadgen.py --n N --first-ms T --spread-ms S --concurrency C --out FILE``:
N triggers, fire times ``T + uniform[0, S)`` ms (seed fixed) as ``fireAt``; or, with
``--delay-s D``, ``delaySeconds`` = D + uniform[0, S) ms after each one's own registration
(the fire time is then read from the answer's ``fireAt``). Each POST carries an
``Idempotency-Key`` (the callers' normal path) from C concurrent clients on one connection
pool; a request answered with a 5xx or a connection error is retried with the same key (up to
3 times). Writes JSON to FILE: ``registered`` (trigger id -> fire_at_ms), ``latencies_ms``
(per successful request, the last try), ``errors``, ``elapsed_s``, ``started_ms``,
``ended_ms``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import API, RECEIVER_PORT, TOKEN, iso_ms, now_ms


def parse_iso_ms(text: str) -> int:
    """``2026-11-23T16:45:32.513Z`` (the API's format) -> epoch ms."""
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


async def register(n: int, fire_times: list[int], concurrency: int, key_prefix: str,
                   delays_ms: list[int] | None = None) -> dict[str, Any]:
    registered: dict[str, int] = {}
    latencies: list[float] = []
    errors = 0
    next_i = 0
    headers = {"Authorization": f"Bearer {TOKEN}"}

    async def client(session: aiohttp.ClientSession) -> None:
        nonlocal errors, next_i
        while next_i < n:
            i = next_i
            next_i += 1
            when: dict[str, Any] = ({"delaySeconds": delays_ms[i] / 1000} if delays_ms
                                    else {"fireAt": iso_ms(fire_times[i])})
            body = {"callbackUrl": f"http://127.0.0.1:{RECEIVER_PORT}/cb/{i}",
                    "payload": {"i": i}, **when}
            hdrs = {**headers, "Idempotency-Key": f"{key_prefix}-{i}"}
            for _ in range(3):
                t0 = time.perf_counter()
                try:
                    async with session.post(f"{API}/v1/triggers", json=body,
                                            headers=hdrs) as resp:
                        data = await resp.json()
                        status = resp.status
                except aiohttp.ClientError:
                    errors += 1  # retried with the same key: a repeat is harmless
                    continue
                if status in (200, 201):
                    latencies.append((time.perf_counter() - t0) * 1000)
                    registered[data["triggerId"]] = parse_iso_ms(data["fireAt"])
                    break
                errors += 1
                if status < 500:
                    break  # a refusal is not retried

    connector = aiohttp.TCPConnector(limit=concurrency)
    started = now_ms()
    t0 = time.perf_counter()
    async with aiohttp.ClientSession(connector=connector) as session:
        await asyncio.gather(*(client(session) for _ in range(concurrency)))
    return {"registered": registered, "latencies_ms": [round(x, 2) for x in latencies],
            "errors": errors, "elapsed_s": round(time.perf_counter() - t0, 3),
            "started_ms": started, "ended_ms": now_ms()}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, required=True)
    p.add_argument("--first-ms", type=int, required=True, help="earliest fire time (epoch ms)")
    p.add_argument("--spread-ms", type=int, required=True)
    p.add_argument("--delay-s", type=float, default=None,
                   help="delaySeconds from this plus uniform[0, spread) instead of fireAt")
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    rng = random.Random(args.seed)
    fire_times = [args.first_ms + rng.randrange(max(1, args.spread_ms)) for _ in range(args.n)]
    delays = (None if args.delay_s is None else
              [int(args.delay_s * 1000) + rng.randrange(max(1, args.spread_ms))
               for _ in range(args.n)])
    key_prefix = f"bench-{args.first_ms}-{args.seed}"
    result = asyncio.run(register(args.n, fire_times, args.concurrency, key_prefix, delays))
    args.out.write_text(json.dumps(result))


if __name__ == "__main__":
    main()
