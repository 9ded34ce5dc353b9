"""The supervisor: a schedule of faults injected through the operators' entry points, and a
watcher that restarts whatever died (``infra/app.sh up``), as an operator's supervisor does."""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from bench.chaos.stack import Stack, now_ms

# Fault kinds, in the order a full run cycles through them.
KILLS = {"kill_api": "api", "kill_dispatcher": "dispatcher-1", "kill_sweeper": "sweeper-1",
         "kill_reconciler": "reconciler-1"}
KINDS = (*KILLS, "redis_flushall", "localstack_restart", "cassandra_node_restart")


@dataclass
class Fault:
    kind: str
    planned_s: float
    injected_ms: int = 0
    back_ms: int | None = None  # when the component was back (process alive, service ready)
    status: str = "planned"  # injected | skipped | failed
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def schedule(kinds: tuple[str, ...], first_s: float, every_s: float, until_s: float,
             once: bool) -> list[Fault]:
    """Every ``every_s`` from ``first_s`` to ``until_s``: the kinds in turn (each once if
    ``once``, else round and round)."""
    faults: list[Fault] = []
    t = first_s
    i = 0
    while t <= until_s and not (once and i >= len(kinds)):
        faults.append(Fault(kinds[i % len(kinds)], t))
        i += 1
        t += every_s
    return faults


@dataclass
class Watcher:
    """Restarts dead app processes: polls the PID files every ``poll_s`` and runs
    ``infra/app.sh up`` (one at a time) when any of them is gone."""

    stack: Stack
    poll_s: float = 0.3
    restarts: int = 0
    failed_restarts: int = 0
    dead_since: dict[str, int] = field(default_factory=dict)
    back_at: dict[str, int] = field(default_factory=dict)

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await self.check_once()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.poll_s)

    async def check_once(self) -> None:
        dead = self.stack.dead_apps()
        t = now_ms()
        for name in dead:
            self.dead_since.setdefault(name, t)
        if not dead:
            return
        self.stack.keep_logs(dead)  # app.sh rotates a log away on each start
        self.restarts += 1
        script = await self.stack.arun("app.sh", "up")
        if script.rc != 0:
            self.failed_restarts += 1
        t = now_ms()
        for name in dead:
            if self.stack.pid_of(name) is not None:
                self.back_at[name] = t
                self.dead_since.pop(name, None)

    async def all_up(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not self.stack.dead_apps() and await self.stack.api_ready():
                return True
            await asyncio.sleep(0.5)
        return False


class Injector:
    """Runs the schedule; each fault waits for its time (relative to ``t0_ms``)."""

    def __init__(self, stack: Stack, faults: list[Fault], t0_ms: int, ring_nodes: int) -> None:
        self.stack = stack
        self.faults = faults
        self.t0_ms = t0_ms
        self.ring_nodes = ring_nodes
        self.background: set[asyncio.Task[None]] = set()
        self.cassandra_busy = False

    async def run(self) -> None:
        for fault in self.faults:
            delay = (self.t0_ms + fault.planned_s * 1000 - now_ms()) / 1000
            if delay > 0:
                await asyncio.sleep(delay)
            fault.injected_ms = now_ms()
            try:
                await self.inject(fault)
            except Exception as e:  # a fault that cannot be injected is reported, not fatal
                fault.status, fault.detail = "failed", f"{type(e).__name__}: {e}"
        if self.background:
            await asyncio.gather(*self.background)

    async def inject(self, fault: Fault) -> None:
        if fault.kind in KILLS:
            await self.kill(fault, KILLS[fault.kind])
        elif fault.kind == "redis_flushall":
            script = await self.stack.redis_flushall()
            self.finish(fault, script.rc, "redis-cli FLUSHALL")
        elif fault.kind == "localstack_restart":
            down = await self.stack.arun("down.sh", "localstack")
            up = await self.stack.arun("up.sh", "localstack")
            self.finish(fault, down.rc or up.rc,
                        f"down {down.seconds:.1f} s, up {up.seconds:.1f} s")
        else:
            self.cassandra(fault)

    def finish(self, fault: Fault, rc: int, detail: str) -> None:
        fault.status = "injected" if rc == 0 else "failed"
        fault.back_ms = now_ms() if rc == 0 else None
        fault.detail = detail if rc == 0 else f"{detail}: exit {rc}"

    async def kill(self, fault: Fault, name: str) -> None:
        pid = self.stack.sigkill(name)
        if pid is None:
            fault.status, fault.detail = "skipped", f"{name} was not running"
            return
        fault.status, fault.detail = "injected", f"SIGKILL {name} (pid {pid})"
        task = asyncio.create_task(self.wait_back(fault, name, pid))
        self.background.add(task)
        task.add_done_callback(self.background.discard)

    async def wait_back(self, fault: Fault, name: str, old_pid: int) -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            pid = self.stack.pid_of(name)
            if pid is not None and pid != old_pid and (name != "api" or
                                                      await self.stack.api_ready()):
                fault.back_ms = now_ms()
                return
            await asyncio.sleep(0.1)

    def cassandra(self, fault: Fault) -> None:
        if self.ring_nodes < 3:
            fault.status, fault.detail = "skipped", "single Cassandra node (needs a 3-node ring)"
            return
        if self.cassandra_busy:
            fault.status, fault.detail = "skipped", "the previous node restart is still running"
            return
        self.cassandra_busy = True
        fault.status = "injected"
        task = asyncio.create_task(self.restart_node(fault))
        self.background.add(task)
        task.add_done_callback(self.background.discard)

    async def restart_node(self, fault: Fault) -> None:
        """Stop node 2 (not the seed) and start it again (the ring's interface)."""
        nodes = str(self.ring_nodes)
        try:
            down = await self.stack.arun("down.sh", "cassandra",
                                         extra={"CASSANDRA_NODES": nodes, "CASSANDRA_NODE": "2"})
            up = await self.stack.arun("up.sh", "cassandra", extra={"CASSANDRA_NODES": nodes})
            self.finish(fault, down.rc or up.rc,
                        f"node 2 of {nodes}: down {down.seconds:.1f} s, up {up.seconds:.1f} s")
        finally:
            self.cassandra_busy = False
