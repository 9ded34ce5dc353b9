"""Micro-benchmark: recurrence expansion (what ``POST /v1/triggers/preview`` and every series
step compute), in-process, no I/O.

Usage::

    python bench/preview_bench.py [--rounds 50] [--out bench/results/preview.json]

Cases: a year of a daily 09:00 rule in America/New_York (365 occurrences across both DST
transitions), a year of weekday 09:00 reminders, and one occurrence after 300 days of a daily
rule (the cost of one series step late in a long series; `bench/step_bench.py` measures
steps against the series' age).
Reports occurrences per second (median of ``--rounds`` runs).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from datetime import datetime
from pathlib import Path

from trigger_service.core.time.recurrence import (
    Recurrence,
    RuleKind,
    first_occurrences,
    next_occurrence,
    parse_rule,
)
from trigger_service.core.time.timing import parse_rfc3339_ms
from trigger_service.core.time.zones import DstPolicy, Overlap, load_zone

ZONE = "America/New_York"
START = datetime(2027, 1, 1, 9, 0)
LIMIT = datetime(2040, 1, 1)


def rec(rule: str) -> Recurrence:
    return Recurrence(RuleKind.RRULE, parse_rule(RuleKind.RRULE, rule, load_zone(ZONE), START),
                      ZONE, START, DstPolicy(overlap=Overlap.BOTH))


def timed(fn: object, rounds: int) -> float:
    assert callable(fn)
    runs = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - t0)
    return statistics.median(runs)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=50)
    p.add_argument("--out", default="bench/results/preview.json")
    args = p.parse_args()
    daily, weekdays = rec("FREQ=DAILY"), rec("FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR")
    after = (parse_rfc3339_ms("2027-10-28T13:00:00Z"), 300, False)
    cases = {
        "daily_year_365": (lambda: first_occurrences(daily, 365, limit=LIMIT), 365),
        "weekdays_year_261": (lambda: first_occurrences(weekdays, 261, limit=LIMIT), 261),
        "next_after_300_days": (lambda: next_occurrence(daily, after, LIMIT), 1),
    }
    results = {}
    for name, (fn, n) in cases.items():
        s = timed(fn, args.rounds)
        results[name] = {"occurrences": n, "median_ms": round(s * 1000, 3),
                         "occurrences_per_s": round(n / s)}
        print(f"{name:>22}: {s * 1000:8.2f} ms  ({n / s:,.0f} occurrences/s)")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"bench": "preview", "zone": ZONE,
                                          "rounds": args.rounds, "results": results}, indent=2))


if __name__ == "__main__":
    main()
