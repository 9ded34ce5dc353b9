"""The benchmarks' own arithmetic, without services: lag summaries, the per-second delivery
timeline, CPU accounting from /proc, and the peer comparison's ratios and table."""

from __future__ import annotations

import math
import os

from bench.common import summarize
from bench.cpu import COMPONENTS, CpuMeter, cpu_ticks, per_1000
from bench.flow_bench import most_in_window
from bench.modes import lateness, timeline
from bench.peers import report


def test_summary_counts_first_arrivals_duplicates_early_and_missing() -> None:
    due = {"a": 1000, "b": 2000, "c": 3000}
    arrivals = [("a", 1, 1010, ""), ("a", 2, 1500, ""), ("b", 1, 1990, ""),
                ("other", 1, 5, "")]
    got, lags = summarize(due, arrivals)
    assert (got["delivered"], got["missing"], got["duplicates"], got["early"]) == (2, 1, 1, 1)
    assert sorted(lags) == [-10, 10]
    assert got["lag_ms"]["max"] == 10


def test_timeline_buckets_first_arrivals_by_second_of_the_window() -> None:
    first = {"a": 10_000, "b": 10_999, "c": 11_000, "d": 13_500, "late": 20_000}
    assert timeline(first, 10_000, 14_000) == [2, 1, 0, 1]


def test_the_most_in_any_second_slides_across_calendar_seconds() -> None:
    # 4 within [600, 1599], though no calendar second holds more than 2.
    assert most_in_window([600, 900, 1100, 1300, 2600]) == 4
    assert most_in_window([0, 1000, 2000]) == 1
    assert most_in_window([]) == 0


def test_lateness_counts_only_those_due_after_the_purge_and_late_by_more_than_a_second() -> None:
    due = {"before": 1_000, "ontime": 5_000, "late": 6_000}
    arrivals = [("before", 1, 9_000, ""), ("ontime", 1, 5_100, ""), ("late", 1, 18_000, "")]
    got = lateness(due, arrivals, after_ms=4_000)
    assert got["late_count"] == 1
    assert got["late_max_ms"] == 12_000


def test_cpu_ticks_of_this_process_grow_with_work_and_gone_pids_read_none() -> None:
    before = cpu_ticks(os.getpid())
    assert before is not None
    x = 0
    while (cpu_ticks(os.getpid()) or 0) <= before:  # burn CPU until a tick passes
        x += sum(range(10_000))
    assert cpu_ticks(2**22 + 12345) is None


def test_a_meter_reports_every_component_and_per_1000_scales_by_deliveries() -> None:
    meter = CpuMeter(interval_s=0.05)
    meter.start()
    got = meter.stop()
    assert set(got) == set(COMPONENTS)
    assert all(v >= 0 for v in got.values())
    assert per_1000({"api": 2.0, "redis": 0.5}, 4000) == {"api": 0.5, "redis": 0.125}
    assert per_1000({"api": 2.0}, 0) == {"api": None}


def test_ratios_say_when_a_ratio_is_not_a_number() -> None:
    assert report.ratio(10, 4) == 2.5
    assert report.ratio(0, 0) == "equal (0)"
    assert report.ratio(3, 0) == "inf (Celery 0)"
    assert report.ratio(math.nan, 1) == "n/a"


def run(system: str, p50: float, reg: float) -> dict[str, object]:
    return {"system": system, "mode": "spread", "registered": 2,
            "lag_ms": {"p50": p50, "p95": p50, "p99": p50, "max": p50}, "early": 0,
            "missing": 0, "registration_per_s": reg, "lags_ms": [1, 2]}


def test_the_peer_table_has_a_row_per_metric_and_the_duplicates() -> None:
    data = {"runs": [run("ours", 4, 100), run("celery", 2, 1000)],
            "duplicates": {"ours": {"duplicates_per_1000": 0.0, "lost": 0},
                           "celery": {"duplicates_per_1000": 1000.0, "lost": 0}},
            "setup": {"when": "t", "cpus": 2, "python": "3.11", "scale": 1,
                      "celery_pool": "prefork", "celery_concurrency": 2,
                      "celery_broker": "redis://x/5", "dup_visibility_timeout_s": 10}}
    rows = report.ratios(data)
    by = {(r["mode"], r["metric"]): r["ratio"] for r in rows}
    assert by["spread", "lag p50 (ms)"] == 2.0
    assert by["spread", "registrations/s"] == 0.1
    assert by["25-40 s out, vs Celery's default scan", "duplicates per 1,000"] == 0.0
    table = report.markdown(data, rows)
    assert table.count("\n| spread |") == len(report.METRICS)
