"""``make bench``'s ``fairness`` mode: caller A's herd and caller B's few, due at one instant.

A (``dev``) registers N (20,000) triggers due at one instant, through the batch route, and
its receiver answers each 50 ms after it arrives (``bench/receiver.py``'s ``/slow/50/``);
then B (``bench-b``, a dev-only caller of ``config/callers.dev.toml``) registers 20 due at the
same instant. B's messages are behind A's on the queue. Reports B's lateness (p50 / p99 /
max) and A's (p50 / last), from the first arrival of each, in ms after the due time.

Before fair shares (``dispatcher.fair_share``) A's held messages filled the dispatcher's
in-flight cap and B's were received only after A's herd was mostly sent.
"""

from __future__ import annotations

import time
from typing import Any

import aiohttp

from bench.common import (
    API,
    RECEIVER_PORT,
    TOKEN,
    first_arrivals,
    iso_ms,
    now_ms,
    pct,
    reset_receiver,
    summarize,
    wait_for_arrivals,
)

B_TOKEN = "bench-b-token"  # config/callers.dev.toml's bench-b: public, development only
B_COUNT = 20
A_ANSWER_MS = 50
BATCH_ITEMS = 1000


async def register(session: aiohttp.ClientSession, token: str, path: str, n: int,
                   due_ms: int) -> tuple[dict[str, int], int]:
    """``n`` triggers due at ``due_ms``, 1,000 a batch request, one request at a time (so
    that A's messages are all sent before B's): {trigger_id: due_ms} and refused items."""
    registered: dict[str, int] = {}
    refused = 0
    for start in range(0, n, BATCH_ITEMS):
        items = [{"callbackUrl": f"http://127.0.0.1:{RECEIVER_PORT}/{path}/{i}",
                  "payload": {"i": i}, "fireAt": iso_ms(due_ms)}
                 for i in range(start, min(n, start + BATCH_ITEMS))]
        async with session.post(f"{API}/v1/triggers/batch", json={"items": items},
                                headers={"Authorization": f"Bearer {token}"}) as resp:
            answer = await resp.json()
        if resp.status != 200:
            print(f"[fairness] {resp.status}: {answer}", flush=True)
            refused += len(items)
            continue
        for item in answer["items"]:
            if item["status"] == 201:
                registered[item["triggerId"]] = due_ms
            else:
                refused += 1
    return registered, refused


def lateness(due: dict[str, int], first: dict[str, int]) -> list[int]:
    return [first[t] - due[t] for t in due if t in first]


async def fairness_mode(session: aiohttp.ClientSession, n: int) -> dict[str, Any]:
    await reset_receiver(session)
    start = now_ms()
    # Registration (about 200-1,000 a second on a busy 2-core machine) is over well before.
    due_ms = start + 30_000 + n * 3
    t0 = time.perf_counter()
    herd, refused_a = await register(session, TOKEN, f"slow/{A_ANSWER_MS}/a", n, due_ms)
    few, refused_b = await register(session, B_TOKEN, "cb/b", B_COUNT, due_ms)
    reg_s = time.perf_counter() - t0
    print(f"[fairness] registered {len(herd)} + {len(few)} in {reg_s:.1f}s; due in "
          f"{(due_ms - now_ms()) / 1000:.0f}s", flush=True)
    due = herd | few
    arrivals = await wait_for_arrivals(session, len(due), due_ms, patience_ms=180_000)
    summary, _ = summarize(due, arrivals)
    first, _ = first_arrivals(due, arrivals)
    b_late, a_late = lateness(few, first), lateness(herd, first)
    return {"mode": "fairness", "triggers": n + B_COUNT, "registered": len(due),
            "registration_errors": refused_a + refused_b,
            "registration_per_s": round(len(due) / reg_s, 1), **summary,
            "a_triggers": n, "b_triggers": B_COUNT, "a_answer_ms": A_ANSWER_MS,
            "b_delivered": len(b_late), "a_delivered": len(a_late),
            "b_lateness_ms": {"p50": round(pct(b_late, 0.5), 1),
                              "p99": round(pct(b_late, 0.99), 1),
                              "max": max(b_late, default=None)},
            "a_lateness_ms": {"p50": round(pct(a_late, 0.5), 1),
                              "last": max(a_late, default=None)}}
