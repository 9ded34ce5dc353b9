"""``make bench``'s ``hostile`` mode: what one caller's costliest inputs do to another caller.

Caller B (``bench-b``) sends, over and over for the run, the ``when`` phrases, never-matching
RRULEs and impossible crons that once stalled an API worker (``tests/hostile_inputs.py``, the
list tests/integration/test_hostile_caller.py sends too), single and 1,000 to a batch, from 8
concurrent clients. Meanwhile caller A (``dev``) registers N triggers one at a time from 4 clients
(``HOSTILE_B=cheap``: B sends cheap 400s instead, ``none``: nothing, for comparison). Reports
A's latency p50/p99/max and statuses, B's statuses (a 5xx counted as an error), and the API's
CPU per B request. The target: A's p99 under 100 ms.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import time
from collections import Counter
from typing import Any

import aiohttp

from bench.common import API, RECEIVER, TOKEN, lag_stats
from bench.fairness_bench import B_TOKEN
from tests.hostile_inputs import IMPOSSIBLE_CRONS, NEVER_RRULES, WORST_WHENS

B_CLIENTS = 8  # in a process of their own
# HOSTILE_B=cheap: B sends as many requests, each a cheap 400 (a missing callbackUrl): what
# its request rate alone costs A. HOSTILE_B=none: A alone.
B_KIND = os.environ.get("HOSTILE_B", "hostile")
A_CLIENTS = 4
BATCH_EVERY = 10  # one in ten of B's requests is a batch of 1,000
# A's triggers fire a week out: not during the session that measured them (an hour out, a
# run's 2,000 came due in the middle of later measurements and test runs).
A_DELAY_S = 7 * 86_400


def b_bodies() -> list[dict[str, Any]]:
    if B_KIND == "cheap":
        return [{"payload": {"b": 1}, "delaySeconds": 60}]
    cb = {"callbackUrl": RECEIVER + "/cb/b", "payload": {"b": 1}}
    local = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(time.time() - 2 * 86400))
    return ([{**cb, "when": w} for w in WORST_WHENS]
            + [{**cb, "rrule": r, "localTime": local, "timeZone": "UTC"} for r in NEVER_RRULES]
            + [{**cb, "cron": c, "localTime": local, "timeZone": "UTC"}
               for c in IMPOSSIBLE_CRONS])


def _attack(stop: Any, out: Any) -> None:
    """B, in a process of its own (B is another user's machine: its clients' JSON work must
    not sit on A's event loop): send until ``stop`` is set, then put B's statuses in ``out``.
    At nice 10: B's own client work (building and reading batches of 1,000) would be another
    machine's CPU in production, here it shares the two cores with the service under test;
    the service still answers every request B sends."""
    os.nice(10)
    out.put(asyncio.run(_attacking(stop)))


async def _attacking(stop: Any) -> tuple[dict[int, int], int]:
    bodies = b_bodies()
    b_status: Counter[int] = Counter()
    sent = 0

    async def b_client(session: aiohttp.ClientSession, k: int) -> None:
        nonlocal sent
        headers = {"Authorization": f"Bearer {B_TOKEN}"}
        i = k
        while not stop.is_set():
            i += 1
            if i % BATCH_EVERY == 0:
                path, body = "/v1/triggers/batch", {
                    "items": [bodies[j % len(bodies)] for j in range(1000)]}
            else:
                path, body = "/v1/triggers", bodies[i % len(bodies)]
            async with session.post(API + path, json=body, headers=headers) as resp:
                await resp.read()
                b_status[resp.status] += 1
                sent += 1

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session:
        await asyncio.gather(*(b_client(session, k) for k in range(B_CLIENTS)))
    return dict(b_status), sent


async def hostile_mode(session: aiohttp.ClientSession, n: int) -> dict[str, Any]:
    a_status: Counter[int] = Counter()
    a_ms: list[float] = []
    spawn = multiprocessing.get_context("spawn")
    stop, out = spawn.Event(), spawn.Queue()
    attacker = spawn.Process(target=_attack, args=(stop, out), daemon=True)
    if B_KIND != "none":
        attacker.start()

    async def a_client(k: int, count: int) -> None:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        for j in range(count):
            body = {"callbackUrl": RECEIVER + "/cb/a", "delaySeconds": A_DELAY_S,
                    "payload": {"a": k, "j": j}}
            started = time.perf_counter()
            async with session.post(API + "/v1/triggers", json=body, headers=headers) as resp:
                await resp.read()
                a_status[resp.status] += 1
            a_ms.append((time.perf_counter() - started) * 1000)

    await asyncio.sleep(3.0)  # the attack is running before A's first request
    started = time.monotonic()
    await asyncio.gather(*(a_client(k, n // A_CLIENTS) for k in range(A_CLIENTS)))
    elapsed_s = time.monotonic() - started
    stop.set()
    b_status, b_sent = ({}, 0) if B_KIND == "none" else await asyncio.to_thread(out.get)
    if B_KIND != "none":
        attacker.join()
    latency = lag_stats(sorted(round(ms) for ms in a_ms))
    return {
        # The table's columns: "lag" is A's request latency here, "miss" A's non-201 answers;
        # nothing is delivered (A's triggers are a week out, B's all refused).
        "triggers": len(a_ms), "registered": a_status.get(201, 0), "delivered": 0,
        "missing": len(a_ms) - a_status.get(201, 0), "duplicates": 0, "early": 0,
        "registration_per_s": round(len(a_ms) / elapsed_s, 1),
        "lag_ms": latency, "request_ms": latency,
        "a_statuses": dict(a_status), "b_requests": b_sent, "b_statuses": b_status,
        "b_5xx": sum(c for s, c in b_status.items() if s >= 500),
        "b_kind": B_KIND, "target": "A's p99 under 100 ms while B attacks",
    }
