"""Where a costly caller's sections run (``app/costly_pool.py``): in a worker process at a
lower priority, charged to the caller, their errors back whole, and a dead worker never a
500. The sections are ``tests/unit/limits/sections.py``'s (light to import in the worker)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from typing import Any

import pytest

from tests.unit.app.support import CALLBACK, make_env
from tests.unit.http.test_routes import AUTH, BODY, Api, memory_runtime, serving
from tests.unit.limits.sections import (
    call,
    closure_answer,
    fail_plainly,
    fail_unpicklably,
    pid_after,
    rate_limit,
    refuse,
    spin_metered,
    where,
)
from trigger_service.app import costly_pool, cpu_shares
from trigger_service.app.cpu_shares import CpuShares, charging, costly
from trigger_service.core.errors import InvalidRequest, RateLimited


def costly_caller(caller: str = "b") -> CpuShares:
    """Shares where ``caller``'s last section was costly: its next ones take turns."""
    shares = CpuShares(rate_ms_per_s=0.001, burst_ms=1000)
    shares.spend(caller, cpu_shares.COSTLY_MS)
    return shares


async def test_a_costly_callers_section_runs_in_a_worker_behind_the_service(worker: int
                                                                           ) -> None:
    with charging(costly_caller(), "b"):
        pid, priority = await costly(where)
    assert pid == worker != os.getpid()
    assert priority > os.getpriority(os.PRIO_PROCESS, 0)


async def test_a_cheap_caller_runs_in_place(worker: int) -> None:
    shares = costly_caller()
    with charging(shares, "a"):
        assert await costly(where) == (os.getpid(), os.getpriority(os.PRIO_PROCESS, 0))


async def test_the_workers_cpu_is_charged_to_the_caller_once(worker: int) -> None:
    shares = costly_caller()
    before = shares.balance_ms("b")
    with charging(shares, "b"):
        assert await costly(spin_metered, 30) == worker
    spent = before - shares.balance_ms("b")
    # The worker's measure is the charge; metered() inside, without an account there,
    # adds nothing: twice 30 would be 60.
    assert 20 <= spent < 55, spent


async def test_an_empty_share_is_refused_before_the_section_is_sent(worker: int) -> None:
    shares = costly_caller()
    shares.spend("b", 2000)
    with charging(shares, "b"), pytest.raises(cpu_shares.CpuShareExceeded):
        await costly(spin_metered, 30)
    assert shares.balance_ms("b") < -990  # nothing more charged: nothing ran


async def test_errors_raised_in_the_worker_arrive_whole(worker: int) -> None:
    with charging(costly_caller(), "b"):
        with pytest.raises(InvalidRequest) as refused:
            await costly(refuse, "when: cannot read it", candidates=["a", "b"])
        with pytest.raises(RateLimited) as limited:
            await costly(rate_limit, 7)
        with pytest.raises(KeyError) as bug:
            await costly(fail_plainly)
        with pytest.raises(RuntimeError) as unreadable:
            await costly(fail_unpicklably)
    assert type(refused.value) is InvalidRequest
    assert refused.value.to_json() == {"error": "invalid_request",
                                       "message": "when: cannot read it", "field": "when",
                                       "candidates": ["a", "b"]}
    assert limited.value.headers() == {"Retry-After": "7"} and limited.value.status == 429
    # Not an answer: the 500's log shows where in the worker it was raised.
    assert "fail_plainly" in "".join(getattr(bug.value, "__notes__", []))
    assert "Unpicklable" in str(unreadable.value)


async def test_a_dead_worker_costs_one_section_in_a_thread_then_a_new_worker(
        worker: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(costly_pool, "RESTART_S", 0.0)
    with charging(costly_caller(), "b"):
        os.kill(worker, signal.SIGKILL)
        assert await costly(pid_after, 0) == os.getpid()  # the answer all the same
        started = costly_pool.worker_started()
        assert started is not None
        replacement = await asyncio.wrap_future(started)
        assert await costly(pid_after, 0) == replacement not in (worker, os.getpid())
        # Killed in the middle of a section: the section runs again, here.
        running = asyncio.ensure_future(costly(pid_after, 1.0))
        await asyncio.sleep(0.3)
        os.kill(replacement, signal.SIGKILL)
        assert await running == os.getpid()


def test_the_worker_ends_with_an_api_process_killed_outright() -> None:
    done = subprocess.run([sys.executable, "-m", "tests.unit.limits.sections"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == -signal.SIGKILL, done.stderr
    worker = int(done.stdout)  # its output ended: the worker holds it no longer
    for _ in range(100):
        if not running(worker):
            return
        time.sleep(0.1)
    raise AssertionError(f"worker {worker} outlived its API process")


def running(pid: int) -> bool:
    """A process ``pid`` exists and has not exited (a zombie has)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


async def test_a_section_whose_argument_or_answer_does_not_pickle_runs_here(worker: int
                                                                          ) -> None:
    """The trip failed, not the section: it runs again in a thread and answers, never an
    error (a closure in a parsed request was a 500)."""
    with charging(costly_caller(), "b"):
        assert await costly(call, lambda: os.getpid()) == os.getpid()  # the argument
        answer = await costly(closure_answer)  # the answer
    assert answer() == os.getpid()


async def test_after_shutdown_sections_run_in_a_thread(worker: int) -> None:
    costly_pool.shutdown()
    with charging(costly_caller(), "b"):
        assert await costly(pid_after, 0) == os.getpid()
    assert costly_pool.worker_started() is None


async def test_every_costly_route_parses_and_plans_in_the_worker(
        worker: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Through every call site of ``costly`` its arguments, answers and refusals pickle."""
    sent: list[str] = []
    run = costly_pool.run

    async def spy(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        sent.append(fn.__name__)
        return await run(fn, args, kwargs)

    monkeypatch.setattr(costly_pool, "run", spy)
    monkeypatch.setattr(cpu_shares, "COSTLY_MS", 0.0)  # a first section makes it costly
    env = make_env()
    async with serving(env, memory_runtime(env)) as api:
        await _every_costly_route(api)
    assert {"parse_register", "timed_request", "parse_time_fields", "preview", "first_fire",
            "parse_item"} <= set(sent), sent


async def _every_costly_route(api: Api) -> None:
    tid = await api.created_id()
    when = {"callbackUrl": CALLBACK, "when": "every monday at 9am", "timeZone": "UTC"}
    status, body, _ = await api.post(when)
    assert status == 201, body
    resp = await api.client.post("/v1/triggers/preview", headers=AUTH,
                                 json=when | {"count": 2, "jitterSeconds": 5})
    assert resp.status == 200, await resp.text()
    resp = await api.client.patch(f"/v1/triggers/{tid}", headers=AUTH,
                                  json={"when": "nope", "timeZone": "UTC"})
    assert resp.status == 400 and (await resp.json())["field"] == "when", await resp.text()
    resp = await api.client.post(f"/v1/triggers/{tid}/snooze", headers=AUTH,
                                 json={"delaySeconds": 60})
    assert resp.status == 201, await resp.text()
    resp = await api.client.put("/v1/recipients/ann", headers=AUTH,
                                json={"timeZone": "Europe/Paris"})
    assert resp.status in (200, 201), await resp.text()
    status, body, _ = await api.post(when | {"recipient": "ann", "timeZone": "recipient"})
    assert status == 201, body  # a request that reads its time again with the profile's zone
    resp = await api.client.post("/v1/triggers/batch", headers=AUTH,
                                 json={"items": [BODY, when | {"when": "yesterday"}]})
    items = (await resp.json())["items"]
    assert [i["status"] for i in items] == [201, 400], items
