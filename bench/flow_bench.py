"""``make bench``'s ``flow`` mode: a herd for one flow-control key, spread to its rate.

N (2,000) triggers due at one instant share ``flowControl {"key": "bench-flow",
"ratePerSecond": 100, "parallelism": 10}`` (registered through the batch route); the
receiver answers each 30 ms after it arrives (``bench/receiver.py``'s ``/slow/30/``).
Reports, as the receiver saw them: the first and last arrival after the due time (the herd
takes (N - 1) / 100 s: about 20 s), the most arrivals in any one second (at most 100), the
most requests open at once (at most 10), and none early, missing or duplicated.
"""

from __future__ import annotations

from typing import Any

import aiohttp

from bench.batch_bench import register_batches
from bench.common import (
    RECEIVER,
    first_arrivals,
    now_ms,
    reset_receiver,
    summarize_first,
    wait_for_arrivals,
)

KEY = "bench-flow"
RATE_PER_S = 100
PARALLELISM = 10
ANSWER_MS = 30


def most_in_window(times_ms: list[int], window_ms: int = 1000) -> int:
    """The most of the sorted ``times_ms`` in any window of ``window_ms`` (sliding, not
    calendar seconds)."""
    best, i = 0, 0
    for j, at in enumerate(times_ms):
        while at - times_ms[i] >= window_ms:
            i += 1
        best = max(best, j - i + 1)
    return best


async def flow_mode(session: aiohttp.ClientSession, n: int) -> dict[str, Any]:
    await reset_receiver(session)
    due_ms = now_ms() + 20_000 + n * 3  # registration is over well before
    flow = {"key": KEY, "ratePerSecond": RATE_PER_S, "parallelism": PARALLELISM}
    registered, reg_s, refused, _ = await register_batches(
        session, [due_ms] * n, None, path=f"slow/{ANSWER_MS}/flow",
        extra={"flowControl": flow})
    print(f"[flow] registered {len(registered)} in {reg_s:.1f}s; due in "
          f"{(due_ms - now_ms()) / 1000:.0f}s", flush=True)
    spread_ms = (len(registered) - 1) * 1000 // RATE_PER_S
    arrivals = await wait_for_arrivals(session, len(registered), due_ms + spread_ms,
                                       patience_ms=120_000)
    first, total = first_arrivals(registered, arrivals)
    summary, _ = summarize_first(registered, first, total)
    times = sorted(at for tid, _attempt, at, _occ in arrivals if tid in registered)
    async with session.get(f"{RECEIVER}/stats") as r:
        max_open = int((await r.json())["max_open"])
    return {"mode": "flow", "triggers": n, "registered": len(registered),
            "registration_errors": refused, "registration_per_s": round(len(registered) / reg_s, 1),
            **summary, "flow_control": flow, "answer_ms": ANSWER_MS,
            "first_after_due_ms": times[0] - due_ms if times else None,
            "last_after_due_ms": times[-1] - due_ms if times else None,
            "spread_s": round((times[-1] - times[0]) / 1000, 1) if times else None,
            "least_spread_s": spread_ms / 1000,
            "most_arrivals_in_any_1s": most_in_window(times),
            "most_open_at_receiver": max_open}
