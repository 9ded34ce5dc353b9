"""The numbers of a run: computed from what the client was answered and what the receiver got,
printed as a table and saved as JSON. ``misses`` says which targets were missed."""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.chaos.faults import Fault
from bench.chaos.load import KeyResult
from bench.chaos.receiver import Delivery

HEAL_WINDOW_MS = 10_000
MAX_LAG_MS = 30_000
MAX_DUPLICATE_PCT = 0.1
# A duplicate is at-least-once at work when its first delivery happened just before a
# dispatcher was SIGKILLed (the receiver answered, FIRED was not written yet). The window
# covers the receiver's answer travelling back and the FIRED batch's write, which under the
# run's own load on a 2-core machine has been seen to take over 2 s.
KILL_WINDOW_MS = 5_000
SAMPLES = 20
# Outcomes of an attempt after which the occurrence is sent again (or given up on).
_NOT_DELIVERED = frozenset({"retry", "failed", "dead_lettered"})


@dataclass
class RunData:
    t0_ms: int
    results: list[KeyResult]
    deliveries: list[Delivery]
    faults: list[Fault]
    direct_max_delay_s: float
    # The attempt history (``GET /v1/triggers/{id}/attempts`` items) of each trigger that
    # arrived more than once, read before the run's processes stopped.
    histories: dict[str, list[dict[str, Any]]] = field(default_factory=dict)


def pct(values: list[int], p: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    k = (len(s) - 1) * p
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return round(s[lo] + (s[hi] - s[lo]) * (k - lo), 1)


def deliveries_by_id(deliveries: list[Delivery]) -> dict[str, list[Delivery]]:
    by_id: dict[str, list[Delivery]] = defaultdict(list)
    for d in deliveries:
        by_id[d.trigger_id].append(d)
    return by_id


def forced_by_unanswered_attempts(arrived: list[int], history: list[dict[str, Any]]) -> bool:
    """Whether the arrivals of one occurrence (their attempt numbers, in arrival order) are
    at-least-once at work: each attempt number arrived once, and every attempt that was
    followed by another is in the dispatcher's history as not delivered with no answer (a
    timeout or a broken connection: the receiver got the request, the answer never reached
    the dispatcher, so it was sent again). Two arrivals of one attempt (one claim sending
    twice) or a later attempt with no such record (a claim taken over) are not."""
    if len(set(arrived)) != len(arrived):
        return False
    recorded = {(a.get("attempt"), a.get("outcome"), a.get("statusCode")) for a in history}
    return all(any((k, outcome, None) in recorded for outcome in _NOT_DELIVERED)
               for k in sorted(arrived)[:-1])


def trigger_counts(data: RunData) -> dict[str, Any]:
    """Registered, delivered, lost, duplicates, early, lag, keys with two triggers."""
    fire_at = {t: r.fire_at_ms for r in data.results for t in r.trigger_ids
               if r.fire_at_ms is not None}
    by_id = deliveries_by_id(data.deliveries)
    first = {t: min(d.at_ms for d in ds) for t, ds in by_id.items() if t in fire_at}
    lags = {t: first[t] - fire_at[t] for t in first}
    lost = sorted(set(fire_at) - set(first))
    dup = sum(len(by_id[t]) - 1 for t in first)
    kills = [f.injected_ms for f in data.faults
             if f.kind == "kill_dispatcher" and f.status == "injected"]
    twice = sorted(t for t in first if len(by_id[t]) > 1)
    at_kill = {t for t in twice if any(k - KILL_WINDOW_MS <= first[t] <= k for k in kills)}
    unanswered = {t for t in twice if forced_by_unanswered_attempts(
        [d.attempt for d in sorted(by_id[t], key=lambda d: d.at_ms)],
        data.histories.get(t, []))}
    unexplained = [t for t in twice if t not in at_kill | unanswered]
    early = sorted(t for t, lag in lags.items() if lag < 0)
    ids_by_key: dict[str, set[str]] = defaultdict(set)
    for r in data.results:
        ids_by_key[r.key] |= r.trigger_ids
    for d in data.deliveries:
        if d.key is not None:
            ids_by_key[d.key].add(d.trigger_id)
    multi = {k: sorted(v) for k, v in ids_by_key.items() if len(v) > 1}
    registered = sum(1 for r in data.results if r.trigger_ids)
    lag_values = list(lags.values())
    return {
        "registered": registered,
        "delivered": len(first),
        "lost": len(lost),
        "lost_ids": lost[:SAMPLES],
        "duplicates": dup,
        "duplicates_pct": round(100 * dup / registered, 3) if registered else 0.0,
        "duplicate_ids": twice[:SAMPLES],
        "duplicates_at_a_kill": len(at_kill),
        # sent again after an attempt whose answer never came back (a callback timeout)
        "duplicates_after_unanswered_attempts": len(unanswered - at_kill),
        # neither: one claim sending twice, or a live claim taken over
        "duplicates_unexplained": len(unexplained),
        "duplicates_unexplained_samples": [
            {"id": t, "fire_at_ms": fire_at[t],
             "arrivals": [[d.at_ms - fire_at[t], d.attempt] for d in by_id[t]],
             "history": data.histories.get(t, [])} for t in unexplained[:SAMPLES]],
        "early": len(early),
        "early_samples": [{"id": t, "lag_ms": lags[t]} for t in early[:SAMPLES]],
        "lag_ms": {"p50": pct(lag_values, 0.5), "p99": pct(lag_values, 0.99),
                   "max": max(lag_values) if lag_values else None},
        "late_over_30s": sum(1 for v in lag_values if v > MAX_LAG_MS),
        "keys_with_several_triggers": len(multi),
        "keys_with_several_triggers_samples": dict(list(multi.items())[:SAMPLES]),
        "unknown_deliveries": sum(1 for d in data.deliveries if d.trigger_id not in fire_at),
        "deliveries_total": len(data.deliveries),
    }


def registration_counts(data: RunData) -> dict[str, Any]:
    errors = [r for r in data.results if not r.trigger_ids]
    direct = sum(1 for r in data.results if r.fire_at_ms is not None and r.answered_ms
                 is not None and r.fire_at_ms - r.answered_ms <= data.direct_max_delay_s * 1000)
    latencies = [r.answered_ms - r.sent_ms for r in data.results if r.answered_ms is not None]
    return {
        "keys": len(data.results),
        "unanswered_keys": len(errors),
        "unanswered_samples": [{"key": r.key, "error": r.error} for r in errors[:SAMPLES]],
        "attempts": sum(r.attempts for r in data.results),
        "replayed_answers": sum(r.replays for r in data.results),
        "replays_with_another_fire_at": sum(r.fire_at_mismatch for r in data.results),
        "direct_route_approx": direct,
        "sweep_route_approx": sum(1 for r in data.results if r.trigger_ids) - direct,
        "answer_ms": {"p50": pct(latencies, 0.5), "p99": pct(latencies, 0.99),
                      "max": max(latencies) if latencies else None},
    }


def fault_rows(data: RunData) -> list[dict[str, Any]]:
    """Per fault: when, how long until the component was back, and the time to heal: the
    largest lag among triggers whose fire time fell within the 10 s after it."""
    fire_at = {t: r.fire_at_ms for r in data.results for t in r.trigger_ids
               if r.fire_at_ms is not None}
    first = {t: min(d.at_ms for d in ds)
             for t, ds in deliveries_by_id(data.deliveries).items() if t in fire_at}
    rows = []
    for f in data.faults:
        window = [t for t, fa in fire_at.items()
                  if f.injected_ms <= fa < f.injected_ms + HEAL_WINDOW_MS]
        lags = [first[t] - fire_at[t] for t in window if t in first]
        undelivered = sum(1 for t in window if t not in first)
        rows.append({
            "kind": f.kind, "status": f.status, "detail": f.detail,
            "at_s": round((f.injected_ms - data.t0_ms) / 1000, 1) if f.injected_ms else None,
            "back_s": round((f.back_ms - f.injected_ms) / 1000, 2) if f.back_ms else None,
            "heal_max_lag_s": round(max(lags) / 1000, 2) if lags else None,
            "fired_in_window": len(window), "undelivered_in_window": undelivered,
        })
    return rows


def misses(report: dict[str, Any]) -> list[str]:
    t = report["triggers"]
    out = []
    if t["lost"] > 0:
        out.append(f"{t['lost']} lost")
    if t["early"] > 0:
        out.append(f"{t['early']} early")
    if t["keys_with_several_triggers"] > 0:
        out.append(f"{t['keys_with_several_triggers']} keys with more than one trigger")
    if t["duplicates_pct"] > MAX_DUPLICATE_PCT:
        out.append(f"duplicates {t['duplicates_pct']} % > {MAX_DUPLICATE_PCT} %")
    if t["lag_ms"]["max"] is not None and t["lag_ms"]["max"] > MAX_LAG_MS:
        out.append(f"max lag {t['lag_ms']['max']} ms > {MAX_LAG_MS} ms")
    if report["registration"]["unanswered_keys"] > 0:
        out.append(f"{report['registration']['unanswered_keys']} keys never answered")
    if report["registration"]["replays_with_another_fire_at"] > 0:
        out.append(f"{report['registration']['replays_with_another_fire_at']} replays "
                   "answered another fireAt")
    if report.get("stray_processes"):
        out.append(f"harness: {len(report['stray_processes'])} service processes no PID file "
                   "names (started twice?)")
    if t["registered"] == 0:
        out.append("nothing registered")
    return out


def build(data: RunData, extra: dict[str, Any]) -> dict[str, Any]:
    report: dict[str, Any] = {**extra, "triggers": trigger_counts(data),
                              "registration": registration_counts(data),
                              "faults": fault_rows(data)}
    report["misses"] = misses(report)
    report["passed"] = not report["misses"]
    return report


def save(report: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2, sort_keys=False) + "\n")


def save_raw(data: RunData, path: Path) -> None:
    """One line per registered trigger (key, id, fire time, arrivals relative to t0), for
    digging into a run."""
    by_id = deliveries_by_id(data.deliveries)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as out:
        for r in data.results:
            for t in sorted(r.trigger_ids) or [""]:
                out.write(json.dumps({
                    "key": r.key, "id": t, "t0_ms": data.t0_ms, "sent_ms": r.sent_ms,
                    "answered_ms": r.answered_ms, "fire_at_ms": r.fire_at_ms,
                    "attempts": r.attempts,
                    "arrivals": [[d.at_ms, d.attempt] for d in by_id.get(t, [])]}) + "\n")


def render(report: dict[str, Any]) -> str:
    t, reg = report["triggers"], report["registration"]
    lag = t["lag_ms"]
    lines = [
        f"registered {t['registered']} of {reg['keys']} keys "
        f"({reg['attempts']} requests, {reg['replayed_answers']} replayed answers; "
        f"~{reg['direct_route_approx']} DIRECT, ~{reg['sweep_route_approx']} SWEEP)",
        f"delivered  {t['delivered']}   lost {t['lost']}   early {t['early']}   "
        f"duplicates {t['duplicates']} ({t['duplicates_pct']} %, "
        f"{t['duplicates_at_a_kill']} at a dispatcher kill, "
        f"{t['duplicates_after_unanswered_attempts']} after an unanswered attempt, "
        f"{t['duplicates_unexplained']} neither)   "
        f"keys with >1 trigger {t['keys_with_several_triggers']}",
        f"lag ms     p50 {lag['p50']}   p99 {lag['p99']}   max {lag['max']}   "
        f"(> 30 s: {t['late_over_30s']})",
        "",
        f"{'fault':24} {'at s':>6} {'status':>8} {'back s':>7} {'heal s':>7} {'fired':>6}  detail",
    ]
    for f in report["faults"]:
        lines.append(f"{f['kind']:24} {f['at_s']!s:>6} {f['status']:>8} {f['back_s']!s:>7} "
                     f"{f['heal_max_lag_s']!s:>7} {f['fired_in_window']:>6}  {f['detail']}")
    lines += ["", f"load average (1 min) {report['load_average_1m']['start']} at the start, "
              f"{report['load_average_1m']['end']} at the end (2 cores)",
              "back s = until the process/service answered again; heal s = the largest lag "
              "of the triggers due within 10 s after the fault"]
    for d in t["duplicates_unexplained_samples"]:
        lines.append(f"duplicate {d['id']}: arrivals [lag ms, attempt] {d['arrivals']}; "
                     f"history {json.dumps(d['history'])}")
    lines.append("PASSED: every target met" if report["passed"]
                 else "FAILED: " + "; ".join(report["misses"]))
    return "\n".join(lines)
