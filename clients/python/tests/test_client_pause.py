"""Pause, resume, the catch-up policy and the operators' caller pause: the requests the sync
and async clients make and the models they read."""

from __future__ import annotations

import json

import httpx

from mock_api import CREATED, Script, trigger_json
from trigger_client import (
    AsyncTriggerClient,
    CatchUp,
    CatchUpPolicy,
    Status,
    TriggerClient,
)

JOB = {"jobId": "resume_all_01", "caller": "orders", "status": "running", "total": 3,
       "done": 1, "failed": 0, "createdAt": "2026-01-01T00:00:00.000Z"}


def test_pause_and_resume_send_the_policy(script: Script) -> None:
    script.answers = [httpx.Response(200, json=trigger_json(0, status="PAUSED")),
                      httpx.Response(200, json=trigger_json(0, catchUp={
                          "policy": "latest", "windowSeconds": 600}))]
    c = TriggerClient("http://api", "t", transport=script.transport)
    assert c.triggers.pause("trg_1").status is Status.PAUSED
    resumed = c.triggers.resume("trg_1", CatchUpPolicy.LATEST)
    assert CatchUp.from_json(resumed.catch_up) == CatchUp(CatchUpPolicy.LATEST, 600)
    assert [(r.method, r.url.path) for r in script.requests] == [
        ("POST", "/v1/triggers/trg_1/pause"), ("POST", "/v1/triggers/trg_1/resume")]
    assert script.bodies()[1] == {"policy": "latest"}


def test_create_sends_catch_up(script: Script) -> None:
    script.answers = [httpx.Response(201, json=CREATED)]
    c = TriggerClient("http://api", "t", transport=script.transport)
    c.triggers.create(callback_url="http://x/cb", delay_s=5, rrule="FREQ=DAILY",
                      catch_up=CatchUp(CatchUpPolicy.NONE, 3600))
    assert script.bodies()[0]["catchUp"] == {"policy": "none", "windowSeconds": 3600}


async def test_async_caller_pause_and_resume_job(script: Script) -> None:
    script.answers = [
        httpx.Response(200, json={"caller": "orders", "paused": True,
                                  "pausedAt": "2026-01-01T00:00:00.000Z"}),
        httpx.Response(202, json=JOB),
        httpx.Response(200, json={"items": [{"caller": "orders", "pausedTriggers": 2,
                                             "pausedAt": "2026-01-01T00:00:00.000Z"}]}),
        httpx.Response(200, json=JOB | {"status": "done", "done": 3})]
    async with AsyncTriggerClient("http://api", "t", transport=script.transport) as c:
        assert (await c.ops.pause_caller("orders"))["paused"] is True
        job = await c.ops.resume_caller("orders", "all")
        assert (job.job_id, job.total) == ("resume_all_01", 3)
        assert [p.paused_triggers for p in await c.ops.paused_callers()] == [2]
        assert (await c.ops.resume_job(job.job_id)).status == "done"
    assert [r.url.path for r in script.requests] == [
        "/v1/ops/callers/orders/pause", "/v1/ops/callers/orders/resume",
        "/v1/ops/callers/paused", "/v1/ops/callers/resume-jobs/resume_all_01"]
    assert script.bodies()[1] == {"policy": "all"}


def test_triggerctl_pause_and_resume_with_a_policy(script: Script) -> None:
    from test_cli_unit import invoke
    script.answers = [httpx.Response(200, json=trigger_json(0, status="PAUSED")),
                      httpx.Response(200, json=trigger_json(0))]
    code, out = invoke(script, "pause", "trg_1")
    assert code == 0 and "PAUSED" in out
    code, out = invoke(script, "resume", "trg_1", "--policy", "none", "-o", "json")
    assert code == 0 and json.loads(out)["status"] == "PENDING"
    assert script.bodies()[1] == {"policy": "none"}
    code, _ = invoke(script, "resume", "trg_1", "--policy", "first")
    assert code != 0 and len(script.requests) == 2  # refused before any request


def test_triggerctl_resumes_a_caller_to_the_end_of_its_job(script: Script) -> None:
    from test_cli_unit import invoke
    script.answers = [httpx.Response(202, json=JOB),
                      httpx.Response(200, json=JOB | {"status": "done", "done": 3})]
    code, out = invoke(script, "callers", "resume", "orders")
    assert code == 0 and "3 triggers resumed, 0 failed" in out
    assert script.bodies()[0] == {}
