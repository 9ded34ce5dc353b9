"""Micro-benchmark: sweeper.timing_wheel.TimingWheel against a heapq baseline.

Usage::

    python bench/wheel_bench.py [--n 1000000] [--out bench/results/wheel.json]

Both sides do the same work in the same process: insert ``n`` timers whose deadlines are spread
uniformly (fixed seed) over ``--span-s`` seconds of simulated time, then advance a simulated clock
tick by tick (``--tick-ms`` steps) and collect each tick's due timers into a list. The
``cancel_half`` scenario cancels a random half of the timers after inserting and before expiring;
the heapq baseline cancels lazily (a set of cancelled keys, skipped when popped).

The baseline is a plain ``heapq`` of ``(deadline_ms, key, value)`` tuples with no key index, so
it cannot replace or look up a timer by key; the wheel pays for its key -> entry index in both
time and memory.

Memory is measured with ``tracemalloc`` in a separate, untimed pass: the growth of traced memory
while the structure is built, divided by the number of pending timers. Keys, deadline ints and
values are allocated before tracing starts, so they are excluded (they belong to the caller and
are the same for both sides); what is counted is the structure's own overhead.
"""

from __future__ import annotations

import argparse
import gc
import heapq
import json
import os
import platform
import random
import sys
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

try:
    from sweeper.timing_wheel import TimingWheel
except ModuleNotFoundError:  # a checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from sweeper.timing_wheel import TimingWheel

START_MS = 1_700_000_000_000
VALUE = None  # every timer carries the same value: values are the caller's, not the structure's


@dataclass
class Workload:
    """Pre-generated inputs shared by every run, so their allocation is never measured."""

    keys: list[str]
    deadlines_ms: list[int]
    cancel_keys: list[str]
    tick_ms: int
    end_ms: int  # last simulated time; every deadline is <= end_ms

    @classmethod
    def generate(cls, n: int, span_ms: int, tick_ms: int, seed: int) -> Workload:
        rng = random.Random(seed)
        keys = [f"cb-{i:08d}" for i in range(n)]
        deadlines_ms = [START_MS + 1 + rng.randrange(span_ms) for _ in range(n)]
        cancel_keys = rng.sample(keys, n // 2)
        end_ms = START_MS + -(-span_ms // tick_ms) * tick_ms
        return cls(keys, deadlines_ms, cancel_keys, tick_ms, end_ms)


@dataclass
class Run:
    """Timings of one scenario on one implementation (seconds unless named otherwise)."""

    scenario: str
    impl: str
    inserted: int = 0
    cancelled: int = 0
    expired: int = 0
    insert_s: float = 0.0
    cancel_s: float = 0.0
    expire_s: float = 0.0
    ticks: int = 0
    max_tick_ms: float = 0.0  # slowest single advance / pop-loop call
    p99_tick_ms: float = 0.0
    checksum: int = 0  # sum of expired deadlines: both implementations must agree
    bytes_per_pending: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def total_s(self) -> float:
        return self.insert_s + self.cancel_s + self.expire_s


def _tick_stats(run: Run, tick_s: list[float]) -> None:
    tick_s.sort()
    run.ticks = len(tick_s)
    run.max_tick_ms = tick_s[-1] * 1e3
    run.p99_tick_ms = tick_s[int(len(tick_s) * 0.99)] * 1e3


def run_wheel(w: Workload, scenario: str, wheel_size: int) -> Run:
    run = Run(scenario, "wheel", inserted=len(w.keys))
    wheel = TimingWheel[None](tick_ms=w.tick_ms, wheel_size=wheel_size, start_ms=START_MS)
    add = wheel.add
    gc.collect()
    started = time.perf_counter()
    for key, deadline_ms in zip(w.keys, w.deadlines_ms, strict=True):
        add(key, deadline_ms, VALUE)
    run.insert_s = time.perf_counter() - started

    if scenario == "cancel_half":
        cancel = wheel.cancel
        started = time.perf_counter()
        for key in w.cancel_keys:
            cancel(key)
        run.cancel_s = time.perf_counter() - started
        run.cancelled = len(w.cancel_keys)

    advance = wheel.advance
    tick_s: list[float] = []
    expired = checksum = 0
    clock = time.perf_counter
    started = clock()
    for now_ms in range(START_MS + w.tick_ms, w.end_ms + 1, w.tick_ms):
        t0 = clock()
        batch = advance(now_ms)
        tick_s.append(clock() - t0)
        expired += len(batch)
        for entry in batch:
            checksum += entry[1]
    run.expire_s = clock() - started
    run.expired, run.checksum = expired, checksum
    run.extra["levels"] = wheel.levels
    _tick_stats(run, tick_s)
    assert len(wheel) == 0
    return run


def run_heap(w: Workload, scenario: str) -> Run:
    run = Run(scenario, "heapq", inserted=len(w.keys))
    heap: list[tuple[int, str, None]] = []
    push, pop = heapq.heappush, heapq.heappop
    gc.collect()
    started = time.perf_counter()
    for key, deadline_ms in zip(w.keys, w.deadlines_ms, strict=True):
        push(heap, (deadline_ms, key, VALUE))
    run.insert_s = time.perf_counter() - started

    cancelled: set[str] = set()
    if scenario == "cancel_half":
        started = time.perf_counter()
        for key in w.cancel_keys:
            cancelled.add(key)
        run.cancel_s = time.perf_counter() - started
        run.cancelled = len(w.cancel_keys)

    tick_s: list[float] = []
    expired = checksum = 0
    clock = time.perf_counter
    started = clock()
    for now_ms in range(START_MS + w.tick_ms, w.end_ms + 1, w.tick_ms):
        t0 = clock()
        batch = []
        if cancelled:
            while heap and heap[0][0] <= now_ms:
                item = pop(heap)
                if item[1] in cancelled:
                    cancelled.discard(item[1])
                else:
                    batch.append(item)
        else:
            while heap and heap[0][0] <= now_ms:
                batch.append(pop(heap))
        tick_s.append(clock() - t0)
        expired += len(batch)
        for item in batch:
            checksum += item[0]
    run.expire_s = clock() - started
    run.expired, run.checksum = expired, checksum
    _tick_stats(run, tick_s)
    assert not heap
    return run


def traced_bytes(build: Callable[[], object]) -> tuple[int, object]:
    """Bytes of traced memory still held after ``build()``, and its result (kept alive)."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        built = build()
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    return after - before, built


def measure_memory(w: Workload, wheel_size: int) -> dict[str, float]:
    """Structure bytes per pending timer, for all-pending and after cancelling half."""
    n = len(w.keys)
    result: dict[str, float] = {}

    def build_wheel(cancel: bool) -> TimingWheel[None]:
        wheel = TimingWheel[None](tick_ms=w.tick_ms, wheel_size=wheel_size, start_ms=START_MS)
        for key, deadline_ms in zip(w.keys, w.deadlines_ms, strict=True):
            wheel.add(key, deadline_ms, VALUE)
        if cancel:
            for key in w.cancel_keys:
                wheel.cancel(key)
        return wheel

    def build_heap(cancel: bool) -> tuple[list[tuple[int, str, None]], set[str]]:
        heap: list[tuple[int, str, None]] = []
        for key, deadline_ms in zip(w.keys, w.deadlines_ms, strict=True):
            heapq.heappush(heap, (deadline_ms, key, VALUE))
        return heap, (set(w.cancel_keys) if cancel else set())

    builders: dict[str, Callable[[bool], object]] = {"wheel": build_wheel, "heapq": build_heap}
    for scenario, cancel in (("expire_all", False), ("cancel_half", True)):
        pending = n - (len(w.cancel_keys) if cancel else 0)
        for impl, build in builders.items():
            used, built = traced_bytes(partial(build, cancel))
            result[f"{scenario}/{impl}"] = used / pending
            del built
            gc.collect()
    return result


def best_of(runs: list[Run]) -> Run:
    """Fastest run (by total time) of one scenario/implementation across repeats."""
    return min(runs, key=lambda r: r.total_s)


def rate(count: int, seconds: float) -> str:
    return f"{count / seconds / 1e6:8.2f}M" if seconds > 0 and count else "       -"


def print_table(runs: list[Run], memory_method: str) -> None:
    header = (
        f"{'scenario':<12} {'impl':<6} {'insert/s':>9} {'cancel/s':>9} {'expire/s':>9} "
        f"{'insert s':>8} {'expire s':>8} {'total s':>8} {'p99 tick':>9} {'max tick':>9} "
        f"{'B/pending':>9}"
    )
    print(header)
    print("-" * len(header))
    for r in runs:
        mem = f"{r.bytes_per_pending:9.1f}" if r.bytes_per_pending is not None else "        -"
        print(
            f"{r.scenario:<12} {r.impl:<6} {rate(r.inserted, r.insert_s):>9} "
            f"{rate(r.cancelled, r.cancel_s):>9} {rate(r.expired, r.expire_s):>9} "
            f"{r.insert_s:8.3f} {r.expire_s:8.3f} {r.total_s:8.3f} "
            f"{r.p99_tick_ms:7.2f}ms {r.max_tick_ms:7.2f}ms {mem}"
        )
    print(f"B/pending: {memory_method}")


def machine_info() -> dict[str, Any]:
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        usable = os.cpu_count() or 0
    return {
        "python": sys.version,
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "nproc": usable,
        "cpu_count": os.cpu_count(),
        "loadavg_at_start": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1_000_000, help="timers per run")
    parser.add_argument("--out", type=Path, default=Path("bench/results/wheel.json"))
    parser.add_argument("--span-s", type=int, default=60, help="deadline spread, seconds")
    parser.add_argument("--tick-ms", type=int, default=10)
    parser.add_argument("--wheel-size", type=int, default=512)
    parser.add_argument("--seed", type=int, default=20240501)
    parser.add_argument("--repeat", type=int, default=2, help="runs per cell; the best is kept")
    parser.add_argument(
        "--no-gc", action="store_true", help="disable the cyclic GC during timed phases"
    )
    parser.add_argument("--skip-memory", action="store_true", help="skip the tracemalloc pass")
    args = parser.parse_args(argv)

    machine = machine_info()
    bench_started = time.perf_counter()
    w = Workload.generate(args.n, args.span_s * 1000, args.tick_ms, args.seed)
    print(
        f"n={args.n:,} timers over {args.span_s}s, tick {args.tick_ms}ms, "
        f"wheel_size {args.wheel_size}, seed {args.seed}, repeat {args.repeat}, "
        f"gc {'off' if args.no_gc else 'on'} during timing; python {platform.python_version()}, "
        f"nproc {machine['nproc']}",
        flush=True,
    )

    scenarios = ("expire_all", "cancel_half")
    cells: dict[tuple[str, str], list[Run]] = {}
    for _ in range(args.repeat):
        for scenario in scenarios:
            for impl in ("wheel", "heapq"):
                if args.no_gc:
                    gc.disable()
                try:
                    if impl == "wheel":
                        run = run_wheel(w, scenario, args.wheel_size)
                    else:
                        run = run_heap(w, scenario)
                finally:
                    gc.enable()
                cells.setdefault((scenario, impl), []).append(run)
                gc.collect()

    runs = [best_of(cells[(s, i)]) for s in scenarios for i in ("wheel", "heapq")]
    for scenario in scenarios:
        wheel_run, heap_run = (r for r in runs if r.scenario == scenario)
        if (wheel_run.expired, wheel_run.checksum) != (heap_run.expired, heap_run.checksum):
            raise SystemExit(f"{scenario}: wheel and heapq expired different timers")

    memory_method = (
        "tracemalloc growth while building the structure / pending timers; keys, deadline ints "
        "and values pre-allocated and excluded (cancel_half: tombstones or the cancelled-key "
        "set included, divided by the n/2 timers still pending)"
    )
    if not args.skip_memory:
        memory = measure_memory(w, args.wheel_size)
        for r in runs:
            r.bytes_per_pending = memory[f"{r.scenario}/{r.impl}"]

    print()
    print_table(runs, memory_method)
    for scenario in scenarios:
        wheel_run, heap_run = (r for r in runs if r.scenario == scenario)
        print(
            f"{scenario}: wheel/heapq time  insert {wheel_run.insert_s / heap_run.insert_s:.2f}x"
            f"  expire {wheel_run.expire_s / heap_run.expire_s:.2f}x"
            f"  total {wheel_run.total_s / heap_run.total_s:.2f}x"
        )

    report = {
        "benchmark": "sweeper.timing_wheel vs heapq",
        "created_utc": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine,
        "params": {
            "n": args.n,
            "span_s": args.span_s,
            "tick_ms": args.tick_ms,
            "wheel_size": args.wheel_size,
            "seed": args.seed,
            "repeat": args.repeat,
            "gc_during_timing": not args.no_gc,
            "selection": "fastest total of the repeats per scenario/impl",
        },
        "memory_method": None if args.skip_memory else memory_method,
        "results": [
            {
                **asdict(r),
                "total_s": r.total_s,
                "insert_ops_per_s": r.inserted / r.insert_s if r.insert_s else None,
                "cancel_ops_per_s": r.cancelled / r.cancel_s if r.cancel_s else None,
                "expire_ops_per_s": r.expired / r.expire_s if r.expire_s else None,
            }
            for r in runs
        ],
        "wall_s": time.perf_counter() - bench_started,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_name(args.out.name + ".tmp")
    tmp.write_text(json.dumps(report, indent=2) + "\n")
    os.replace(tmp, args.out)  # readers never see a half-written file
    print(f"\nwrote {args.out} ({report['wall_s']:.1f}s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
