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

from typing import Any

import aiohttp

from bench.common import (
    TOKEN,
    lag_stats,
)
from bench.fairness_bench import herd_then_few, register

HIGH_COUNT = 20
HERD_ANSWER_MS = 50
TARGET_P99_MS = 1_000


async def priority_mode(session: aiohttp.ClientSession, n: int) -> dict[str, Any]:
    run = await herd_then_few(
        session, "priority", n,
        lambda due_ms: register(session, TOKEN, f"slow/{HERD_ANSWER_MS}/low", n, due_ms,
                                {"priority": "low"}),
        lambda due_ms: register(session, TOKEN, "cb/high", HIGH_COUNT, due_ms,
                                {"priority": "high"}))
    high_stats, low_stats = lag_stats(run.few_late), lag_stats(run.herd_late)
    p99 = high_stats["p99"]
    return {"mode": "priority", "triggers": n + HIGH_COUNT, "registered": run.registered,
            "registration_errors": run.refused,
            "registration_per_s": round(run.registered / run.reg_s, 1), **run.summary,
            "low_triggers": n, "high_triggers": HIGH_COUNT, "low_answer_ms": HERD_ANSWER_MS,
            "high_delivered": len(run.few_late), "low_delivered": len(run.herd_late),
            "high_lateness_ms": {k: high_stats[k] for k in ("p50", "p99", "max")},
            "low_lateness_ms": {"p50": low_stats["p50"], "last": low_stats["max"]},
            "target_high_p99_ms": TARGET_P99_MS,
            "target_met": p99 is not None and p99 <= TARGET_P99_MS
            and len(run.few_late) == HIGH_COUNT}
