"""``make bench``'s ``priority`` mode: one caller's 20 high-priority triggers beside its own
herd of N (5,000) low-priority ones, all due at one instant.

The caller (``dev``) registers the herd through the batch route with ``"priority": "low"``,
then the 20 with ``"priority": "high"``, last, so that on the queue and in the dispatcher they
come behind the herd. Its receiver answers each herd callback 50 ms after it arrives
(``bench/receiver.py``'s ``/slow/50/``), so the caller's bulkhead (100 sends at once) takes
about 2.5 s to drain the herd: without priority, a high one's lateness would be wherever it
falls in that queue. Reports the high ones' lateness (p50 / p99 / max; target p99 <= 1 s)
and the herd's (p50 / last), from the first arrival of each, in ms after the due time.
"""

from __future__ import annotations

import time
from typing import Any

import aiohttp

from bench.common import (
    TOKEN,
    first_arrivals,
    lag_stats,
    now_ms,
    reset_receiver,
    summarize_first,
    wait_for_arrivals,
)
from bench.fairness_bench import lateness, register

HIGH_COUNT = 20
HERD_ANSWER_MS = 50
TARGET_P99_MS = 1_000


async def priority_mode(session: aiohttp.ClientSession, n: int) -> dict[str, Any]:
    await reset_receiver(session)
    start = now_ms()
    # Registration (about 1,000-2,000 a second through batches here) is over well before.
    due_ms = start + 30_000 + n * 3
    t0 = time.perf_counter()
    herd, refused_low = await register(session, TOKEN, f"slow/{HERD_ANSWER_MS}/low", n, due_ms,
                                       {"priority": "low"})
    high, refused_high = await register(session, TOKEN, "cb/high", HIGH_COUNT, due_ms,
                                        {"priority": "high"})
    reg_s = time.perf_counter() - t0
    print(f"[priority] registered {len(herd)} low + {len(high)} high in {reg_s:.1f}s; due in "
          f"{(due_ms - now_ms()) / 1000:.0f}s", flush=True)
    due = herd | high
    arrivals = await wait_for_arrivals(session, len(due), due_ms, patience_ms=180_000)
    first, total = first_arrivals(due, arrivals)
    summary, _ = summarize_first(due, first, total)
    high_late, low_late = lateness(high, first), lateness(herd, first)
    high_stats, low_stats = lag_stats(high_late), lag_stats(low_late)
    p99 = high_stats["p99"]
    return {"mode": "priority", "triggers": n + HIGH_COUNT, "registered": len(due),
            "registration_errors": refused_low + refused_high,
            "registration_per_s": round(len(due) / reg_s, 1), **summary,
            "low_triggers": n, "high_triggers": HIGH_COUNT, "low_answer_ms": HERD_ANSWER_MS,
            "high_delivered": len(high_late), "low_delivered": len(low_late),
            "high_lateness_ms": {k: high_stats[k] for k in ("p50", "p99", "max")},
            "low_lateness_ms": {"p50": low_stats["p50"], "last": low_stats["max"]},
            "target_high_p99_ms": TARGET_P99_MS,
            "target_met": p99 is not None and p99 <= TARGET_P99_MS
            and len(high_late) == HIGH_COUNT}
