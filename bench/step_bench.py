"""Micro-benchmark: one series step (``core.time.series.next_after``, what the dispatcher computes
when an occurrence finishes) against the series' age, in-process, no I/O.

Usage::

    python bench/step_bench.py [--steps 30] [--out bench/results/step.json]

A series whose DTSTART is 1, 30 or 365 days back, in America/New_York, stepped minute by
minute as it fires: ``cold`` is the first step of a schedule stored without an anchor (a row
written before anchors, or a rule registered with an old DTSTART); ``warm`` the median of the
next ``--steps`` steps, each from the schedule the previous one stored. Rules: a plain
minutely RRULE (fixed-step: its anchor is computed), the same minutes spelled with BYSECOND
(expanded once, then anchored) and a cron expression (likewise). Only ``next_after`` and the
model are used, so the same script measures a release before anchors (``PYTHONPATH``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from trigger_service.core.model import Route, Trigger
from trigger_service.core.time.recurrence import Recurrence, RuleKind
from trigger_service.core.time.series import next_after
from trigger_service.core.time.timing import datetime_to_ms

ZONE = "America/New_York"
NOW = datetime(2026, 11, 26, 17, 0)  # wall time in ZONE, a whole minute (a past DST change)
RULES = {"rrule_minutely": (RuleKind.RRULE, "FREQ=MINUTELY"),
         "rrule_minutely_bysecond": (RuleKind.RRULE, "FREQ=MINUTELY;BYSECOND=0"),
         "cron_every_minute": (RuleKind.CRON, "* * * * *")}
AGES_DAYS = (1, 30, 365)


def series_at(kind: RuleKind, rule: str, age_days: int) -> Trigger:
    """A series started ``age_days`` before NOW, its cursor on the occurrence at NOW."""
    start = NOW - timedelta(days=age_days)
    rec = Recurrence(kind, rule, ZONE, start)
    at = datetime_to_ms(NOW.replace(tzinfo=rec.zone).astimezone(UTC))
    index = int((NOW - start) / timedelta(minutes=1))
    return Trigger(trigger_id="bench", caller="bench", callback_url="http://bench",
                   payload_json="{}", fire_at_ms=at, created_at_ms=at, shard=0,
                   route=Route.SWEEP, schedule=rec, occurrence_index=index)


def step(t: Trigger) -> tuple[Trigger, float]:
    now_ms = t.fire_at_ms + 1000  # it fired a second late
    t0 = time.perf_counter()
    nxt = next_after(t, fired=True, now_ms=now_ms, horizon_days=365, direct_max_delay_s=60)
    spent = time.perf_counter() - t0
    assert nxt is not None and nxt.fire_at_ms == t.fire_at_ms + 60_000, "a minute later"
    assert nxt.occurrence_index == t.occurrence_index + 1
    return nxt, spent


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--out", default="bench/results/step.json")
    args = p.parse_args()
    results: dict[str, dict[str, dict[str, float]]] = {}
    for name, (kind, rule) in RULES.items():
        for age in AGES_DAYS:
            t, cold = step(series_at(kind, rule, age))
            runs = []
            for _ in range(args.steps):
                t, spent = step(t)
                runs.append(spent)
            warm = statistics.median(runs)
            results.setdefault(name, {})[f"{age}d"] = {
                "cold_ms": round(cold * 1000, 3), "warm_ms": round(warm * 1000, 3)}
            print(f"{name:>24} {age:>4} days: cold {cold * 1000:9.2f} ms"
                  f"  warm {warm * 1000:8.3f} ms/step")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"bench": "step", "zone": ZONE, "steps": args.steps,
                                          "results": results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
