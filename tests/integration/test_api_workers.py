"""Several API processes share one port (``TRIGGER_API_WORKERS``, SO_REUSEPORT): each binds
it, both answer, and one dying leaves the port served by the other. One process alone does
not set SO_REUSEPORT, so a second copy started by mistake cannot bind. Each API process has
its costly callers' worker up, niced, before it answers, and the worker ends with it."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp
import pytest

from tests.integration.conftest import Stack
from tests.integration.helpers import free_port, wait_ready
from trigger_service.app import costly_pool

pytestmark = pytest.mark.integration


async def _spawn(stack: Stack, port: int, workers: int) -> asyncio.subprocess.Process:
    env = {**os.environ, **stack.env, "TRIGGER_API_PORT": str(port),
           "TRIGGER_API_WORKERS": str(workers)}
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "trigger_service", env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)


async def _stop(*procs: asyncio.subprocess.Process) -> None:
    for p in procs:
        if p.returncode is None:
            p.kill()
            await p.wait()


async def _create(stack: Stack, url: str) -> str:
    # A new connection per request: the kernel picks a process for each.
    connector = aiohttp.TCPConnector(force_close=True)
    async with aiohttp.ClientSession(connector=connector) as http:
        async with http.post(url + "/v1/triggers", json=stack.body(delaySeconds=3600),
                             headers=stack.auth()) as resp:
            assert resp.status == 201, await resp.text()
            trigger_id = str((await resp.json())["triggerId"])
        async with http.delete(f"{url}/v1/triggers/{trigger_id}", headers=stack.auth()) as resp:
            assert resp.status == 200, await resp.text()
    return trigger_id


@asynccontextmanager
async def _two_apis(stack: Stack, workers: int) -> AsyncIterator[
        tuple[str, asyncio.subprocess.Process, asyncio.subprocess.Process]]:
    """Two API processes started on one free port, each told ``workers``: the first ready,
    the second just spawned (it may fail to bind); both killed at the end."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    first = await _spawn(stack, port, workers)
    procs = [first]
    try:
        await wait_ready(url, first)
        procs.append(await _spawn(stack, port, workers))
        yield url, first, procs[1]
    finally:
        await _stop(*procs)


async def _output(proc: asyncio.subprocess.Process) -> str:
    return (await proc.stdout.read()).decode()[-3000:] if proc.stdout else ""


async def test_two_api_workers_share_the_port_and_outlive_each_other(stack: Stack) -> None:
    async with _two_apis(stack, workers=2) as (url, first, second):
        await asyncio.sleep(3)  # a failed bind exits at start-up
        assert second.returncode is None, await _output(second)
        for _ in range(10):
            await _create(stack, url)
        first.send_signal(signal.SIGKILL)
        await first.wait()
        # The port is still served: by the second process alone now (once it has finished
        # starting, which on a loaded machine can take longer than the 3 s above).
        await wait_ready(url, second)
        for _ in range(10):
            await _create(stack, url)


async def test_one_worker_does_not_share_its_port(stack: Stack) -> None:
    async with _two_apis(stack, workers=1) as (url, _first, second):
        code = await asyncio.wait_for(second.wait(), 30)
        assert code != 0, await _output(second)
        await _create(stack, url)  # the first still serves


def _stats() -> dict[int, list[str]]:
    """Every live process's /proc stat fields after its name: [state, ppid, ...]."""
    stats: dict[int, list[str]] = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):  # not a process, or gone meanwhile
            continue
        if fields[0] != "Z":  # a zombie has ended; only its exit status is left
            stats[int(entry)] = fields
    return stats


def _below(pid: int) -> dict[int, list[str]]:
    stats = _stats()
    found: dict[int, list[str]] = {}
    todo = [pid]
    while todo:
        parent = todo.pop()
        for child, fields in stats.items():
            if int(fields[1]) == parent:
                found[child] = fields
                todo.append(child)
    return found


async def test_the_costly_worker_is_up_before_the_api_answers_and_ends_with_it(
        stack: Stack) -> None:
    """The worker's start (a second of imports) is paid before the port opens, never in a
    request; killed outright, the API leaves no process behind."""
    port = free_port()
    api = await _spawn(stack, port, workers=1)
    try:
        await wait_ready(f"http://127.0.0.1:{port}", api)
        below = _below(api.pid)
        # stat's 19th field after the name is the nice value
        niced = [pid for pid, fields in below.items() if int(fields[16]) == costly_pool.NICE]
        assert len(niced) == costly_pool.WORKERS, below
        api.kill()
        await api.wait()
        deadline = time.monotonic() + 20
        for _ in range(100):
            left = set(below) & set(_stats())
            if not left or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.2)
        assert not left, f"still running after the API was killed: {sorted(left)}"
    finally:
        await _stop(api)
