"""Each caller's share of an API process's CPU for reading and planning time fields
(``app/cpu_shares.py``): the buckets on a manual clock, the metering, and over HTTP a caller
whose costly batches spent its share refused 429 while another caller is served."""

from __future__ import annotations

import asyncio
import gc
import os
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import replace

import pytest

from tests.unit.app.support import CALLBACK, make_env
from tests.unit.http.test_routes import AUTH, OTHER, Api, memory_runtime, serving
from tests.unit.limits.sections import place
from trigger_service.app import cpu_shares
from trigger_service.app.cpu_shares import CpuShareExceeded, CpuShares, charging, costly, metered
from trigger_service.app.work_time import work_time_s


class Clock:
    def __init__(self) -> None:
        self.s = 100.0

    def __call__(self) -> float:
        return self.s


def spin_cpu_ms(ms: float) -> None:
    end = time.thread_time() + ms / 1000
    while time.thread_time() < end:
        pass


def test_a_caller_past_its_burst_waits_for_its_rate_and_another_is_untouched() -> None:
    clock = Clock()
    shares = CpuShares(rate_ms_per_s=10, burst_ms=100, monotonic_s=clock)
    shares.admit("b")
    shares.spend("b", 150)  # work already started is charged whole
    with pytest.raises(CpuShareExceeded) as refused:
        shares.admit("b")
    assert refused.value.status == 429 and refused.value.retry_after_s == 6  # (1 + 50) / 10
    shares.admit("a")
    assert shares.balance_ms("a") == 100
    clock.s += 5
    with pytest.raises(CpuShareExceeded):
        shares.admit("b")
    clock.s += 1
    shares.admit("b")
    clock.s += 3600
    assert shares.balance_ms("b") == 100  # refilled up to the burst, no further


def test_the_accounts_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpu_shares, "MAX_ACCOUNTS", 3)
    shares = CpuShares(rate_ms_per_s=10, burst_ms=100, monotonic_s=Clock())
    for caller in ("a", "b", "c", "d"):
        shares.spend(caller, 50)
    assert shares.balance_ms("a") == 100  # the least recent was dropped: a fresh bucket
    assert shares.balance_ms("d") == 50


def test_metered_work_is_charged_to_the_request_caller_once_and_none_outside() -> None:
    shares = CpuShares(rate_ms_per_s=0.001, burst_ms=1000, monotonic_s=Clock())
    with metered():  # no request: nothing is measured, nothing refused
        spin_cpu_ms(5)
    assert shares.balance_ms("b") == 1000
    with charging(shares, "b"), metered():
        with metered():  # nested: charged once, by the outer one
            spin_cpu_ms(20)
    spent = 1000 - shares.balance_ms("b")
    assert 20 <= spent < 200, spent
    assert shares.balance_ms("a") == 1000


def test_work_refused_inside_is_charged_and_an_empty_share_refuses_before_work() -> None:
    shares = CpuShares(rate_ms_per_s=0.001, burst_ms=10, monotonic_s=Clock())
    with charging(shares, "b"):
        with pytest.raises(ValueError), metered():
            spin_cpu_ms(15)
            raise ValueError("a 400, say")
        ran = []
        with pytest.raises(CpuShareExceeded), metered():
            ran.append(1)
    assert ran == [] and shares.balance_ms("b") < 0


@pytest.fixture
def heap() -> list[dict[str, int]]:
    """A heap for a full collection to walk: a busy API process's many requests' objects."""
    return [{"i": i} for i in range(300_000)]


def full_collection_s() -> float:
    """Thread CPU seconds of one full collection."""
    started = time.thread_time()
    gc.collect()
    return time.thread_time() - started


def test_no_collection_is_charged_full_or_young(heap: list[dict[str, int]]) -> None:
    started, work_started = time.thread_time(), work_time_s()
    full_s = full_collection_s()
    assert full_s > 0.002  # it took CPU (the heap makes sure)
    assert work_time_s() - work_started < (time.thread_time() - started) - full_s / 2
    # A young collection walks what every task allocated since the last one: a crowd of
    # other requests' objects here, collected in whichever section crossed the threshold.
    gc.disable()  # so that they are all still young when the collection comes
    try:
        crowd = [[i] for i in range(200_000)]
        started, work_started = time.thread_time(), work_time_s()
        gc.collect(0)
    finally:
        gc.enable()
    young_s = time.thread_time() - started
    charged_s = work_time_s() - work_started
    assert young_s > 0.002 and len(crowd) == 200_000
    assert charged_s < young_s / 2


def test_work_between_collections_is_charged() -> None:
    started, work_started = time.thread_time(), work_time_s()
    total = sum(i * i for i in range(300_000))  # no container allocated: no collection
    spent_s, charged_s = time.thread_time() - started, work_time_s() - work_started
    assert total > 0 and spent_s > 0.002
    assert charged_s == pytest.approx(spent_s, rel=0.05, abs=0.0005)


def test_a_full_collection_inside_a_cheap_section_leaves_its_caller_cheap(
        heap: list[dict[str, int]]) -> None:
    shares = CpuShares(rate_ms_per_s=0.001, burst_ms=1000, monotonic_s=Clock())
    with charging(shares, "b"), metered():
        full_s = full_collection_s()
    assert full_s * 1000 > cpu_shares.COSTLY_MS  # charged whole, it would have marked b
    assert 1000 - shares.balance_ms("b") < cpu_shares.COSTLY_MS
    assert shares.turns_of("b") is None  # still cheap: runs in place


@pytest.fixture
async def tight() -> AsyncIterator[Api]:
    """The route tests' API with a share of 1 CPU-ms a second after a 50 ms burst."""
    env = make_env()
    settings = replace(env.settings, limits=replace(
        env.settings.limits, caller_cpu_ms_per_s=1.0, caller_cpu_burst_ms=50.0))
    async with serving(env, memory_runtime(env, settings)) as served:
        yield served


async def test_costly_batches_spend_a_callers_share_and_not_the_others(tight: Api,
                                                                        worker: int) -> None:
    costly = {"callbackUrl": CALLBACK, "rrule": "FREQ=DAILY;BYMONTH=2;BYMONTHDAY=30",
              "localTime": "2023-11-15T09:00:00", "timeZone": "UTC"}
    resp = await tight.client.post("/v1/triggers/batch", json={"items": [costly] * 200},
                                   headers=AUTH)
    answers = (await resp.json())["items"]
    statuses = [a["status"] for a in answers]
    assert set(statuses) == {400, 429}, statuses
    refused = [a for a in answers if a["status"] == 429]
    # Past the 50 ms burst no item is read: a handful were, at ~1-50 ms each.
    assert len(refused) >= 150, statuses
    assert all(a["error"] == "rate_limited" and a["retryAfter"] >= 1 for a in refused)
    resp = await tight.client.post("/v1/triggers", json=costly, headers=AUTH)
    assert resp.status == 429 and "Retry-After" in resp.headers
    resp = await tight.client.post("/v1/triggers", json={
        "callbackUrl": CALLBACK, "rrule": "FREQ=DAILY", "localTime": "2023-11-15T09:00:00",
        "timeZone": "UTC"}, headers=OTHER)
    assert resp.status == 201, await resp.text()


HERE = (os.getpid(), threading.main_thread().name)


async def sections_by_pass(shares: CpuShares, caller: str, count: int
                           ) -> tuple[list[int], set[tuple[int, str]]]:
    """The loop pass in which each of ``count`` concurrent sections of ``caller`` ended, and
    the processes and threads they ran in."""
    passes = 0
    ended: list[int] = []
    places: set[tuple[int, str]] = set()

    async def ticker() -> None:
        nonlocal passes
        while len(ended) < count:
            passes += 1
            await asyncio.sleep(0)

    async def section() -> None:
        with charging(shares, caller):
            places.add(await costly(place))
        ended.append(passes)

    await asyncio.gather(ticker(), *(section() for _ in range(count)))
    return ended, places


async def test_a_costly_caller_takes_turns_in_the_worker_and_a_cheap_one_runs_in_place(
        worker: int) -> None:
    shares = CpuShares(rate_ms_per_s=10, burst_ms=1000, monotonic_s=Clock())
    shares.spend("b", cpu_shares.COSTLY_MS)  # its last work was costly
    costly_ended, costly_places = await sections_by_pass(shares, "b", 4)
    # One at a time, each in a pass of its own (others run in between), none here.
    assert len(set(costly_ended)) == 4, costly_ended
    assert {pid for pid, _ in costly_places} == {worker}, costly_places
    cheap_ended, cheap_places = await sections_by_pass(shares, "a", 4)
    assert len(set(cheap_ended)) == 1, cheap_ended
    assert cheap_places == {HERE}


async def test_one_costly_section_keeps_its_caller_off_the_loop_for_a_while(
        worker: int) -> None:
    clock = Clock()
    shares = CpuShares(rate_ms_per_s=10, burst_ms=1000, monotonic_s=clock)
    shares.spend("b", cpu_shares.COSTLY_MS)
    shares.spend("b", 0.1)  # a cheap section after it: the next may be costly again
    _, places = await sections_by_pass(shares, "b", 2)
    assert {pid for pid, _ in places} == {worker}, places
    clock.s += cpu_shares.COSTLY_FOR_S  # nothing costly for that long: in place again
    _, places = await sections_by_pass(shares, "b", 2)
    assert places == {HERE}, places
