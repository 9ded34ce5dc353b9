"""CPU accounting for a benchmark run: seconds of CPU (user + system, ``/proc/<pid>/stat``
fields 14-15) each component consumed between ``start()`` and ``stop()``.

Components: the service's processes (pids from ``infra/app.sh``'s PID files under this
checkout's ``var/run/``, else a ``-m <module>`` command line) and the shared dependencies
(Cassandra, LocalStack, Redis: found by their command lines, with their child processes).
A background thread samples every ``interval_s`` and keeps the last value seen per pid, so a
process that dies mid-run (``sweeper-kill``) counts up to its last sample and its successor
from zero. The dependencies are shared with whatever else runs on the machine: their numbers
include other users' load, if any.
"""

from __future__ import annotations

import itertools
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

from bench.common import ROOT

TICKS_PER_S = os.sysconf("SC_CLK_TCK")

# component -> (PID-file name patterns under var/run, command-line markers); a process matches a
# marker when every word of it is in its command line.
COMPONENTS: dict[str, tuple[tuple[str, ...], tuple[tuple[str, ...], ...]]] = {
    # api-N and dispatcher-N: as many as TRIGGER_API_WORKERS / TRIGGER_DISPATCH_PROCESSES started
    "api": (("api", "api-*"), (("-m", "trigger_service"),)),
    "dispatcher": (("dispatcher-*",), (("-m", "dispatcher"),)),
    "sweeper": (("sweeper-*",), (("-m", "sweeper"),)),
    "reconciler": (("reconciler-*",), (("-m", "reconciler"),)),
    "cassandra": ((), (("org.apache.cassandra.service.CassandraDaemon",),)),
    "localstack": ((), (("localstack.runtime.main",), ("localstack", "hypercorn"))),
    "redis": ((), (("redis-server",),)),
}
APP_COMPONENTS = ("api", "dispatcher", "sweeper", "reconciler")


def cpu_ticks(pid: int) -> int | None:
    """utime + stime of ``pid`` in clock ticks; None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()  # fields[0] is field 3 (the state)
    return int(fields[11]) + int(fields[12])


def _cmdlines() -> dict[int, tuple[list[str], int]]:
    """pid -> (argv, parent pid) of every process."""
    out: dict[int, tuple[list[str], int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        out[int(entry.name)] = ([a.decode(errors="replace") for a in argv if a], ppid)
    return out


def _matches(argv: list[str], marker: tuple[str, ...]) -> bool:
    line = " ".join(argv)
    if len(marker) == 2 and marker[0] == "-m":  # `python -m pkg`, exactly that module
        return any(a == "-m" and b == marker[1] for a, b in itertools.pairwise(argv))
    return all(word in line for word in marker)


def _cwd(pid: int) -> Path | None:
    """Where ``pid`` runs: another checkout's service processes are not ours to count."""
    try:
        return Path(os.readlink(f"/proc/{pid}/cwd"))
    except OSError:
        return None


def find_pids() -> dict[str, set[int]]:
    """component -> the pids it runs as now (with its processes' descendants)."""
    procs = _cmdlines()
    found: dict[str, set[int]] = {}
    for name, (pid_files, markers) in COMPONENTS.items():
        pids: set[int] = set()
        for path in (p for pattern in pid_files
                     for p in (ROOT / "var" / "run").glob(f"{pattern}.pid")):
            try:
                pid = int(path.read_text().strip())
            except (OSError, ValueError):
                continue
            if pid in procs:
                pids.add(pid)
        if not pids:
            pids = {pid for pid, (argv, _) in procs.items()
                    if any(_matches(argv, m) for m in markers)
                    and (name not in APP_COMPONENTS or _cwd(pid) == ROOT)}
        grown = True
        while grown:  # children (LocalStack's workers, a venv launcher's python)
            more = {pid for pid, (_, ppid) in procs.items() if ppid in pids} - pids
            pids |= more
            grown = bool(more)
        found[name] = pids
    return found


@dataclass
class CpuMeter:
    """``start()``, run the load, ``stop()`` → CPU seconds per component over that span."""

    interval_s: float = 0.5
    first: dict[int, int] = field(default_factory=dict)  # pid -> ticks at first sight
    last: dict[int, int] = field(default_factory=dict)  # pid -> ticks at the latest sample
    owner: dict[int, str] = field(default_factory=dict)  # pid -> component
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def sample(self, baseline: bool = False) -> None:
        """Read every component's ticks; a pid first seen after the start counts from 0."""
        for name, pids in find_pids().items():
            for pid in pids:
                ticks = cpu_ticks(pid)
                if ticks is None:
                    continue
                if pid not in self.first:
                    self.first[pid] = ticks if baseline else 0
                    self.owner[pid] = name
                self.last[pid] = ticks

    def start(self) -> None:
        self.sample(baseline=True)
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="cpu-meter", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def stop(self) -> dict[str, float]:
        """Stop sampling; CPU seconds per component since ``start()``."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.sample()
        seconds = dict.fromkeys(COMPONENTS, 0.0)
        for pid, name in self.owner.items():
            seconds[name] += (self.last[pid] - self.first[pid]) / TICKS_PER_S
        return {k: round(v, 2) for k, v in seconds.items()}


def per_1000(cpu_s: dict[str, float], deliveries: int) -> dict[str, float | None]:
    """CPU seconds per 1,000 deliveries, per component (None without deliveries)."""
    if deliveries <= 0:
        return dict.fromkeys(cpu_s)
    return {k: round(v * 1000 / deliveries, 3) for k, v in cpu_s.items()}


def cpu_table_row(label: str, values: dict[str, float | None]) -> str:
    cells = " ".join(f"{'-' if v is None else f'{v:.3f}':>10}" for v in values.values())
    return f"{label:12} {cells}"


def cpu_table_header() -> str:
    return f"{'cpu s/1k':12} " + " ".join(f"{k:>10}" for k in COMPONENTS)
