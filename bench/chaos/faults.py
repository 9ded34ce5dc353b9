"""The supervisor: a schedule of faults injected through the operators' entry points, and a
watcher that restarts whatever died (``infra/app.sh up``), as an operator's supervisor does."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Coroutine
from dataclasses import asdict, dataclass, field
from typing import Any

from bench.chaos.stack import Stack, now_ms

# Fault kinds, in the order a full run cycles through them.
KILLS = {"kill_api": "api", "kill_dispatcher": "dispatcher-1", "kill_sweeper": "sweeper-1",
         "kill_reconciler": "reconciler-1"}
KINDS = (*KILLS, "redis_flushall", "localstack_restart", "cassandra_node_restart")
LAST_APP = "reconciler-1"  # the last process infra/app.sh up starts


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
    ``infra/app.sh up`` when any of them is gone. A second ``app.sh up`` may start while
    the first only waits for the API to be ready (e.g. while LocalStack is down), never while
    one is still starting processes (it would start them twice)."""

    stack: Stack
    poll_s: float = 0.3
    max_running: int = 2
    restarts: int = 0
    failed_restarts: int = 0
    spawners: set[int] = field(default_factory=set)  # app.sh runs still starting processes
    logs_kept: set[str] = field(default_factory=set)
    running: set[asyncio.Task[None]] = field(default_factory=set)

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            self.check_once()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.poll_s)
        if self.running:
            await asyncio.gather(*self.running)

    def check_once(self) -> None:
        dead = self.stack.dead_apps()
        # Keep each dead process's log before app.sh rotates it away (once per death).
        new = [name for name in dead if name not in self.logs_kept]
        if new:
            self.stack.keep_logs(new)
        self.logs_kept = set(dead)
        if not dead or self.spawners or len(self.running) >= self.max_running:
            return
        self.restarts += 1
        self.spawners.add(self.restarts)
        task = asyncio.create_task(self.app_up(self.restarts))
        self.running.add(task)
        task.add_done_callback(self.running.discard)

    async def app_up(self, run: int) -> None:
        """``infra/app.sh up``; its spawning is over once it names the last process (each
        run clears only its own mark: another may still be starting processes)."""
        try:
            async for line in self.stack.stream("app.sh", "up"):
                if line.startswith("[") and f" {LAST_APP}: " in line:
                    self.spawners.discard(run)
        except RuntimeError:
            self.failed_restarts += 1
        finally:
            self.spawners.discard(run)

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
        self.busy: set[str] = set()

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
            self.in_background(fault, "localstack", self.restart_localstack(fault))
        elif self.ring_nodes < 3:
            fault.status, fault.detail = "skipped", "single Cassandra node (needs a 3-node ring)"
        else:
            self.in_background(fault, "cassandra", self.restart_node(fault))

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
        """Back = a new process that has logged ``<component>_started`` (the API: ``/readyz``
        answers 200), not merely a live pid: start-up takes seconds on a loaded machine."""
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            pid = self.stack.pid_of(name)
            if pid is not None and pid != old_pid and (
                    await self.stack.api_ready() if name == "api" else self.stack.started(name)):
                fault.back_ms = now_ms()
                return
            await asyncio.sleep(0.1)

    def in_background(self, fault: Fault, what: str, work: Coroutine[Any, Any, None]) -> None:
        """Slow faults (a restart takes seconds) run beside the schedule, one per service."""
        if what in self.busy:
            work.close()
            fault.status, fault.detail = "skipped", f"the previous {what} restart is running"
            return
        self.busy.add(what)
        fault.status = "injected"
        task = asyncio.create_task(work)
        self.background.add(task)
        task.add_done_callback(self.background.discard)
        task.add_done_callback(lambda _t: self.busy.discard(what))

    async def restart_localstack(self, fault: Fault) -> None:
        down = await self.stack.arun("down.sh", "localstack")
        up = await self.stack.arun("up.sh", "localstack")
        self.finish(fault, down.rc or up.rc, f"down {down.seconds:.1f} s, up {up.seconds:.1f} s")

    async def restart_node(self, fault: Fault) -> None:
        """Stop node 2 (not the seed) and start it again (the ring's interface)."""
        nodes = str(self.ring_nodes)
        down = await self.stack.arun("down.sh", "cassandra",
                                     extra={"CASSANDRA_NODES": nodes, "CASSANDRA_NODE": "2"})
        up = await self.stack.arun("up.sh", "cassandra", extra={"CASSANDRA_NODES": nodes})
        self.finish(fault, down.rc or up.rc,
                    f"node 2 of {nodes}: down {down.seconds:.1f} s, up {up.seconds:.1f} s")
