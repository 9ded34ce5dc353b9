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
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp

from bench.batch_bench import register_batches
from bench.common import (
    TOKEN,
    first_arrivals,
    lag_stats,
    now_ms,
    reset_receiver,
    summarize_first,
    wait_for_arrivals,
)

B_TOKEN = "bench-b-token"  # config/callers.dev.toml's bench-b: public, development only
B_COUNT = 20
A_ANSWER_MS = 50


async def register(session: aiohttp.ClientSession, token: str, path: str, n: int,
                   due_ms: int, extra: dict[str, Any] | None = None
                   ) -> tuple[dict[str, int], int]:
    """``n`` triggers due at ``due_ms`` (no idempotency key; ``extra``'s fields), 1,000 a
    batch request, one request at a time (so that A's messages are all sent before B's):
    {trigger_id: due_ms} and refused items."""
    registered, _, refused, _ = await register_batches(
        session, [due_ms] * n, None, token=token, clients=1, path=path, extra=extra)
    return registered, refused


def lateness(due: dict[str, int], first: dict[str, int]) -> list[int]:
    return [first[t] - due[t] for t in due if t in first]


Register = Callable[[int], Awaitable[tuple[dict[str, int], int]]]


@dataclass(frozen=True)
class HerdRun:
    """A herd and a few registered after it, due at one instant, and what arrived."""

    registered: int
    refused: int
    reg_s: float
    summary: dict[str, Any]
    herd_late: list[int]  # lateness (ms) of each herd trigger that arrived
    few_late: list[int]


async def herd_then_few(session: aiohttp.ClientSession, name: str, n: int,
                        herd_of: Register, few_of: Register) -> HerdRun:
    """``herd_of(due_ms)`` then ``few_of(due_ms)`` registered for one instant well ahead
    (registration is over before it on a busy 2-core machine); waits for every arrival and
    returns each group's lateness from its first arrivals."""
    await reset_receiver(session)
    due_ms = now_ms() + 30_000 + n * 3
    t0 = time.perf_counter()
    herd, refused_herd = await herd_of(due_ms)
    few, refused_few = await few_of(due_ms)
    reg_s = time.perf_counter() - t0
    print(f"[{name}] registered {len(herd)} + {len(few)} in {reg_s:.1f}s; due in "
          f"{(due_ms - now_ms()) / 1000:.0f}s", flush=True)
    due = herd | few
    arrivals = await wait_for_arrivals(session, len(due), due_ms, patience_ms=180_000)
    first, total = first_arrivals(due, arrivals)
    summary, _ = summarize_first(due, first, total)
    return HerdRun(len(due), refused_herd + refused_few, reg_s, summary,
                   lateness(herd, first), lateness(few, first))


async def fairness_mode(session: aiohttp.ClientSession, n: int) -> dict[str, Any]:
    run = await herd_then_few(
        session, "fairness", n,
        lambda due_ms: register(session, TOKEN, f"slow/{A_ANSWER_MS}/a", n, due_ms),
        lambda due_ms: register(session, B_TOKEN, "cb/b", B_COUNT, due_ms))
    b_stats, a_stats = lag_stats(run.few_late), lag_stats(run.herd_late)
    return {"mode": "fairness", "triggers": n + B_COUNT, "registered": run.registered,
            "registration_errors": run.refused,
            "registration_per_s": round(run.registered / run.reg_s, 1), **run.summary,
            "a_triggers": n, "b_triggers": B_COUNT, "a_answer_ms": A_ANSWER_MS,
            "b_delivered": len(run.few_late), "a_delivered": len(run.herd_late),
            "b_lateness_ms": {k: b_stats[k] for k in ("p50", "p99", "max")},
            "a_lateness_ms": {"p50": a_stats["p50"], "last": a_stats["max"]}}
