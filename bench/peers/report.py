"""``make bench-peers``'s report: the ratios ours / Celery (JSON and a Markdown table) and a
plot of both systems' lag distributions (CDFs, log-x), one panel per mode."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

# (row label, how to read it from a run's result); lower is better for all but throughput.
METRICS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("lag p50 (ms)", ("lag_ms", "p50")),
    ("lag p95 (ms)", ("lag_ms", "p95")),
    ("lag p99 (ms)", ("lag_ms", "p99")),
    ("lag max (ms)", ("lag_ms", "max")),
    ("early (count)", ("early",)),
    ("lost (count)", ("missing",)),
    ("registrations/s", ("registration_per_s",)),
)
FLOOR_MS = 0.5  # log-x: lags <= 0 ms are drawn here


def _get(run: dict[str, Any], path: tuple[str, ...]) -> Any:
    value: Any = run
    for key in path:
        value = value[key]
    return value


def ratio(ours: float | None, theirs: float | None) -> float | str:
    """ours / theirs, or a word when that is not a number (0 / 0 is 'equal')."""
    if ours is None or theirs is None or math.isnan(ours) or math.isnan(theirs):
        return "n/a"
    if theirs == 0:
        return "equal (0)" if ours == 0 else "inf (Celery 0)"
    return round(ours / theirs, 3)


def ratios(data: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per (mode, metric): ours, Celery's, ours / Celery; then the duplicates."""
    rows: list[dict[str, Any]] = []
    by = {(r["mode"], r["system"]): r for r in data["runs"]}
    for mode in dict.fromkeys(r["mode"] for r in data["runs"]):
        for label, path in METRICS:
            a, b = _get(by[mode, "ours"], path), _get(by[mode, "celery"], path)
            rows.append({"mode": mode, "metric": label, "ours": a, "celery": b,
                         "ratio": ratio(a, b)})
    d = data["duplicates"]
    for key, label in (("celery", "Celery's default scan"),
                       ("celery_scan_10s", "Celery scanning every 10 s")):
        if key not in d:
            continue
        for metric, field in (("duplicates per 1,000", "duplicates_per_1000"),
                              ("lost (count)", "lost")):
            a, b = d["ours"][field], d[key][field]
            rows.append({"mode": f"25-40 s out, vs {label}", "metric": metric, "ours": a,
                         "celery": b, "ratio": ratio(a, b)})
    return rows


def markdown(data: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    s = data["setup"]
    lines = [
        f"Run {s['when']} on {s['cpus']} cores, Python {s['python']}, scale {s['scale']}. "
        f"Celery: {s['celery_pool']} pool, concurrency {s['celery_concurrency']}, broker "
        f"`{s['celery_broker']}`; duplicate test with `visibility_timeout` "
        f"{s['dup_visibility_timeout_s']} s.",
        "",
        "| mode | metric | ours | Celery | ours / Celery |",
        "|---|---|---:|---:|---:|",
    ]
    lines += [f"| {r['mode']} | {r['metric']} | {r['ours']} | {r['celery']} | {r['ratio']} |"
              for r in rows]
    return "\n".join(lines) + "\n"


def plot(data: dict[str, Any], path: Path) -> None:
    """CDF of the lag (first arrival per id) of both systems, one panel per mode, log-x."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = list(dict.fromkeys(r["mode"] for r in data["runs"]))
    fig, axes = plt.subplots(1, len(modes), figsize=(6.5 * len(modes), 4.8), squeeze=False)
    colours = {"ours": "tab:blue", "celery": "tab:orange"}
    names = {"ours": "ours (HTTP API → Cassandra + SQS → dispatcher)",
             "celery": "Celery ETA tasks (Redis broker)"}
    for ax, mode in zip(axes[0], modes, strict=True):
        for run in (r for r in data["runs"] if r["mode"] == mode):
            lags = sorted(max(FLOOR_MS, float(x)) for x in run["lags_ms"])
            if not lags:
                continue
            ys = [(i + 1) / run["registered"] for i in range(len(lags))]
            lag = run["lag_ms"]
            ax.step(lags, ys, where="post", color=colours[run["system"]], linewidth=1.8,
                    label=f"{names[run['system']]}\np50 {lag['p50']:.0f} ms, "
                          f"p99 {lag['p99']:.0f} ms, max {lag['max']} ms")
        ax.set_xscale("log")
        ax.set_ylim(0, 1.02)
        ax.set_xlabel("lag = callback arrival - due time (ms, log scale)")
        ax.set_ylabel("fraction of callbacks delivered")
        n = next(r["registered"] for r in data["runs"] if r["mode"] == mode)
        ax.set_title(f"{mode}: {n:,} callbacks"
                     + (" due at one instant" if mode == "burst" else " over 30 s"))
        ax.grid(True, which="both", alpha=0.3)
        # The burst's curves rise late (seconds): its upper left corner is empty.
        ax.legend(loc="upper left" if mode == "burst" else "lower right", fontsize=8)
    fig.suptitle(f"Lag CDFs, same machine ({data['setup']['cpus']} cores), same receiver; "
                 f"lags ≤ 0 ms drawn at {FLOOR_MS} ms", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write(data: dict[str, Any], rows: list[dict[str, Any]], results: Path) -> None:
    plot(data, results / "peers.png")
    slim = {**data, "runs": [{k: v for k, v in r.items() if k != "lags_ms"}
                             for r in data["runs"]], "ratios": rows}
    (results / "peers.json").write_text(json.dumps(slim, indent=2) + "\n")
    (results / "peers.md").write_text(markdown(data, rows))
