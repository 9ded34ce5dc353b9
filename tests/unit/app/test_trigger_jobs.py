"""Jobs over triggers by filter (``app.trigger_jobs``) on the fakes: a job a dead runner left
is resumed once its lease expires and does nothing twice; pause and resume by tag; the
bound."""

from __future__ import annotations

import pytest

from tests.unit.app.support import make_env, request
from trigger_service.app import trigger_jobs
from trigger_service.app.job_rounds import LEASE_MS
from trigger_service.app.registration import NewTrigger
from trigger_service.app.trigger_jobs import TriggerJobRunner
from trigger_service.core.dead_letters import JobStatus
from trigger_service.core.errors import InvalidRequest, NotFound, StoreError
from trigger_service.core.model import Status
from trigger_service.core.tags import TriggerFilter
from trigger_service.core.trigger_jobs import JobAction


def tagged(req: NewTrigger, *tags: str) -> NewTrigger:
    return NewTrigger(req.callback_url, req.payload_json, req.fire_at_ms, req.received_at_ms,
                      tags=tags)


async def test_a_job_left_by_a_dead_runner_is_resumed_after_its_lease_once() -> None:
    env = make_env()
    ids = [(await env.service.register_planned(
        "orders", tagged(request(env, 60_000), "x"), None, "h")).trigger_id for _ in range(30)]
    a = TriggerJobRunner(env.settings, env.service, env.store, env.clock, owner="a")
    env.store.failures["claim_trigger_job"] = StoreError("down")  # a's kick gets nowhere
    job = await a.start("orders", JobAction.CANCEL, TriggerFilter(tag="x"))
    del env.store.failures["claim_trigger_job"]
    assert await env.store.claim_trigger_job(job.job_id, "a", env.clock.now_ms(), LEASE_MS)
    b = TriggerJobRunner(env.settings, env.service, env.store, env.clock, owner="b")
    assert await b.run_once() == 0  # a's lease holds
    env.clock.advance_ms(LEASE_MS + 1)
    assert await b.run_once() == 30
    assert await b.run_once() == 0  # done: nothing twice
    got = await b.get("orders", job.job_id)
    assert (got.status, got.done, got.failed) == (JobStatus.DONE, 30, 0)
    assert {(await env.service.get("orders", i)).status for i in ids} == {Status.CANCELLED}


async def test_pause_then_resume_by_tag_jobs_move_every_match_and_nothing_else() -> None:
    env = make_env()
    x = [(await env.service.register_planned(
        "orders", tagged(request(env, 60_000), "x"), None, "h")).trigger_id for _ in range(5)]
    other = (await env.service.register_planned(
        "orders", tagged(request(env, 60_000), "y"), None, "h")).trigger_id
    runner = TriggerJobRunner(env.settings, env.service, env.store, env.clock, owner="a")
    paused = await runner.start("orders", JobAction.PAUSE, TriggerFilter(tag="x"))
    await runner.run_once()
    got = await runner.get("orders", paused.job_id)
    assert (got.status, got.done, got.failed) == (JobStatus.DONE, 5, 0)
    assert {(await env.service.get("orders", i)).status for i in x} == {Status.PAUSED}
    assert (await env.service.get("orders", other)).status is Status.PENDING
    resumed = await runner.start("orders", JobAction.RESUME, TriggerFilter(tag="x"), "latest")
    await runner.run_once()
    assert (await runner.get("orders", resumed.job_id)).done == 5
    assert {(await env.service.get("orders", i)).status for i in x} == {Status.PENDING}
    assert await runner.get(None, resumed.job_id) == await runner.get("orders",
                                                                      resumed.job_id)
    with pytest.raises(NotFound):
        await runner.get("someone-else", resumed.job_id)


async def test_more_matches_than_a_job_takes_is_refused(monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    env = make_env()
    monkeypatch.setattr(trigger_jobs, "MAX_JOB_ITEMS", 5)
    for _ in range(6):
        await env.service.register_planned("orders", tagged(request(env, 60_000), "x"), None, "h")
    runner = TriggerJobRunner(env.settings, env.service, env.store, env.clock, owner="a")
    with pytest.raises(InvalidRequest, match="narrow it"):
        await runner.start("orders", JobAction.CANCEL, TriggerFilter(tag="x"))
    assert await env.store.count_open_trigger_jobs("orders") == 0  # no job was made
