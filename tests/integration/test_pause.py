"""Pause, resume and the catch-up policy on the real stack (Cassandra, LocalStack SQS,
Redis): a series paused over three occurrences then resumed under each policy, and an
outage (no dispatcher running) across three occurrences under each catch-up policy.

The series fire every 10 s; the catch-up tolerance is 1 s here
(``TRIGGER_API_CATCH_UP_TOLERANCE_S``) so that "missed" is reached in seconds, not minutes.
A resume does not use the tolerance: a series every 2 s paused over three occurrences, with
the default tolerance (60 s), is resumed under ``none`` without firing any of them."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from tests.integration.conftest import Stack
from trigger_service.core.time.timing import parse_rfc3339_ms

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

POLICIES = ("all", "latest", "none")
EVERY_10S = "FREQ=SECONDLY;INTERVAL=10"
# After the resume (or the restart), before the 4th occurrence: what each policy fired.
FIRED_AT_ONCE = {"all": [1, 2, 3], "latest": [3], "none": []}


@pytest.fixture
def extra_env() -> dict[str, str]:
    return {"TRIGGER_API_MIN_RECURRENCE_INTERVAL_S": "1", "TRIGGER_API_CATCH_UP_TOLERANCE_S": "1"}


async def _series(stack: Stack, policy: str, first_ms: int) -> str:
    body = stack.body(fireAt=_rfc3339(first_ms), rrule=EVERY_10S,
                      catchUp={"policy": policy, "windowSeconds": 3600})
    status, got, _ = await stack.post(body)
    assert status == 201, got
    return str(got["triggerId"])


def _rfc3339(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms // 1000)) + f".{ms % 1000:03d}Z"


def _occurrences(stack: Stack, tid: str, first_ms: int, every_ms: int = 10_000) -> list[int]:
    """Which occurrences arrived (1 = the first), in arrival order."""
    return [(parse_rfc3339_ms(a.body["scheduledAt"]) - first_ms) // every_ms + 1
            for a in stack.receiver.for_trigger(tid)]


async def _sleep_until(ms: int) -> None:
    await asyncio.sleep(max(0.0, ms / 1000 - time.time()))


async def _call(stack: Stack, path: str, body: dict[str, Any] | None = None) -> Any:
    resp = await stack.client.post(path, json=body, headers=stack.auth())
    got = await resp.json()
    assert resp.status == 200, got
    return got


async def _finish(stack: Stack, ids: list[str]) -> None:
    for tid in ids:  # paused ones are not cancelled by the fixture (it cancels PENDING)
        await stack.client.delete(f"/v1/triggers/{tid}", headers=stack.auth())


async def test_a_series_paused_over_three_occurrences_resumed_under_each_policy(
        stack: Stack) -> None:
    await stack.start_dispatcher()
    first_ms = (int(time.time()) + 8) * 1000
    ids = {p: await _series(stack, "all", first_ms) for p in POLICIES}
    try:
        for tid in ids.values():
            paused = await _call(stack, f"/v1/triggers/{tid}/pause")
            assert paused["status"] == "PAUSED"
        listed = await stack.client.get("/v1/triggers?status=paused", headers=stack.auth())
        assert {t["triggerId"] for t in (await listed.json())["items"]} == set(ids.values())
        # Occurrences 1, 2, 3 (first, +10 s, +20 s) come due while paused; the 3rd is 1.6 s
        # late (missed) at the resume, the 4th (+30 s) 8.4 s ahead.
        await _sleep_until(first_ms + 21_600)
        assert not stack.receiver.arrivals
        for policy, tid in ids.items():
            resumed = await _call(stack, f"/v1/triggers/{tid}/resume", {"policy": policy})
            assert resumed["status"] == "PENDING"
        await _sleep_until(first_ms + 29_000)
        got = {p: _occurrences(stack, tid, first_ms) for p, tid in ids.items()}
        assert got == FIRED_AT_ONCE
        await stack.receiver.wait_for(lambda: all(
            4 in _occurrences(stack, tid, first_ms) for tid in ids.values()), 8)
        for policy, tid in ids.items():
            assert _occurrences(stack, tid, first_ms) == [*FIRED_AT_ONCE[policy], 4]
            # The receiver's ids stay dense: skipped occurrences are not counted.
            seqs = [a.body["occurrenceId"] for a in stack.receiver.for_trigger(tid)]
            assert seqs == [f"{tid}.{n}" for n in range(1, len(seqs) + 1)]
    finally:
        await _finish(stack, list(ids.values()))


@pytest.mark.parametrize("extra_env", [{"TRIGGER_API_MIN_RECURRENCE_INTERVAL_S": "1"}])
async def test_resume_none_fires_nothing_that_came_due_while_paused(stack: Stack) -> None:
    """Every 2 s, the tolerance its default 60 s: occurrences 1-3 (0, 2, 4 s) come due while
    paused, each less than the tolerance late at the resume (4.5 s), and none of them fires;
    the 4th (6 s) fires at its time."""
    await stack.start_dispatcher()
    first_ms = (int(time.time()) + 3) * 1000
    status, got, _ = await stack.post(stack.body(fireAt=_rfc3339(first_ms),
                                                 rrule="FREQ=SECONDLY;INTERVAL=2"))
    assert status == 201, got
    tid = str(got["triggerId"])
    try:
        assert (await _call(stack, f"/v1/triggers/{tid}/pause"))["status"] == "PAUSED"
        await _sleep_until(first_ms + 4_500)
        resumed = await _call(stack, f"/v1/triggers/{tid}/resume", {"policy": "none"})
        assert resumed["status"] == "PENDING"
        assert parse_rfc3339_ms(resumed["fireAt"]) == first_ms + 6_000
        assert await stack.receiver.wait_for(
            lambda: bool(stack.receiver.for_trigger(tid)), 5)
        assert _occurrences(stack, tid, first_ms, 2_000) == [4]
        assert stack.receiver.for_trigger(tid)[0].body["occurrenceId"] == f"{tid}.1"
    finally:
        await _finish(stack, [tid])


async def test_an_outage_across_three_occurrences_under_each_catch_up_policy(
        stack: Stack) -> None:
    """No dispatcher runs while occurrences 1-3 come due; one started at 21.6 s finds each
    series' first message and goes on by the series' catch-up policy."""
    first_ms = (int(time.time()) + 8) * 1000
    ids = {p: await _series(stack, p, first_ms) for p in POLICIES}
    try:
        await _sleep_until(first_ms + 21_600)
        handle = await stack.start_dispatcher()
        await _sleep_until(first_ms + 29_000)
        got = {p: _occurrences(stack, tid, first_ms) for p, tid in ids.items()}
        assert got == FIRED_AT_ONCE
        skipped = handle.metrics.snapshot()
        assert skipped.get('occurrences_skipped_total{reason="policy"}', 0) == 2 + 3
        await stack.receiver.wait_for(lambda: all(
            4 in _occurrences(stack, tid, first_ms) for tid in ids.values()), 8)
        for policy, tid in ids.items():
            assert _occurrences(stack, tid, first_ms) == [*FIRED_AT_ONCE[policy], 4]
    finally:
        await _finish(stack, list(ids.values()))


async def test_an_operator_pause_holds_a_due_trigger_and_resume_delivers_it(
        stack: Stack) -> None:
    ops = stack.auth(stack.token + "-ops")
    resp = await stack.client.post(f"/v1/ops/callers/{stack.caller}/pause", headers=ops)
    assert resp.status == 200, await resp.text()
    await stack.start_dispatcher()
    status, got, _ = await stack.post(stack.body(delaySeconds=1))  # still accepted
    assert status == 201
    tid = got["triggerId"]
    view = await stack.wait_status(tid, "PAUSED", timeout_s=10)
    assert view["status"] == "PAUSED"
    await asyncio.sleep(1)
    assert not stack.receiver.for_trigger(tid)
    listed = await (await stack.client.get("/v1/ops/callers/paused", headers=ops)).json()
    assert {"caller": stack.caller, "pausedTriggers": 1} in [
        {k: v for k, v in i.items() if k != "pausedAt"} for i in listed["items"]]
    resp = await stack.client.post(f"/v1/ops/callers/{stack.caller}/resume", headers=ops,
                                   json={"policy": "all"})
    assert resp.status == 202, await resp.text()
    job = await resp.json()
    assert job["total"] == 1
    assert await stack.receiver.wait_for(lambda: bool(stack.receiver.for_trigger(tid)), 10)
    assert (await stack.wait_status(tid, "FIRED"))["status"] == "FIRED"
    progress = await (await stack.client.get(
        f"/v1/ops/callers/resume-jobs/{job['jobId']}", headers=ops)).json()
    assert (progress["status"], progress["done"]) == ("done", 1)
