"""CPU per registration alone: ``bench/loadgen.py`` against the running stack (``make up``),
each process's CPU read from /proc over the registration window only.

The fire times are 60-90 s out, so no delivery overlaps the window (wait that long between
two runs, or their deliveries will). Prints CPU-ms per registration by process, the load
generator's own included, and the rate reached.

    .venv/bin/python bench/register_cpu.py [--n 5000]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROCESSES = ("api", "api-2", "dispatcher-1", "sweeper-1", "sweeper-2", "reconciler-1",
             "cassandra", "localstack", "redis")
DELAY_S = 60


def _pid(name: str) -> int | None:
    try:
        return int((ROOT / "var" / "run" / f"{name}.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _cpu_s(pid: int | None) -> float:
    if pid is None:
        return 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _children_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=5000)
    args = p.parse_args()
    pids = {name: _pid(name) for name in PROCESSES}
    before = {name: _cpu_s(pid) for name, pid in pids.items()}
    client_before = _children_cpu_s()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "load.json"
        first_ms = time.time_ns() // 1_000_000 + DELAY_S * 1000
        subprocess.run([sys.executable, str(ROOT / "bench" / "loadgen.py"), "--n", str(args.n),
                        "--first-ms", str(first_ms), "--spread-ms", "30000",
                        "--concurrency", "64", "--delay-s", str(DELAY_S), "--out", str(out)],
                       check=True, cwd=ROOT)
        load = json.loads(out.read_text())
    client_ms = (_children_cpu_s() - client_before) * 1000
    n = len(load["registered"])
    print(f"{n} registrations in {load['elapsed_s']:.1f} s: {n / load['elapsed_s']:.0f}/s, "
          f"{load['errors']} errors")
    total = 0.0
    for name, pid in pids.items():
        ms = (_cpu_s(pid) - before[name]) * 1000 / max(1, n)
        total += ms
        print(f"  {name:14s} {ms:6.3f} CPU-ms per registration")
    client = client_ms / max(1, n)
    print(f"  {'load generator':14s} {client:6.3f}")
    print(f"  all processes {total:.3f}; with the load generator {total + client:.3f}")


if __name__ == "__main__":
    main()
