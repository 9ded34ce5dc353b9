"""Bulk replay jobs are bounded: none made for nothing, at most ``MAX_OPEN_JOBS`` unfinished
per caller's letters, and the periodic poll reads one bucket of unfinished jobs a round."""

from __future__ import annotations

import pytest

from tests.unit.app.support import NOW_MS, make_env
from tests.unit.app.test_dead_letters import ALL, dead, service
from trigger_service.adapters import schema
from trigger_service.app.dead_letters import MAX_OPEN_JOBS
from trigger_service.app.replay_jobs import ReplayJobRunner
from trigger_service.core.dead_letters import (
    DeadLetterFilters,
    DeadLetterQuery,
    DeadLetterReason,
    JobStatus,
    ReplayJob,
)
from trigger_service.core.errors import InvalidRequest, NothingToReplay, QuotaExceeded


async def test_a_bulk_replay_matching_nothing_makes_no_job() -> None:
    env = make_env()
    svc = service(env)
    with pytest.raises(NothingToReplay):
        await svc.start_bulk(ALL)  # no dead letter at all
    await dead(env, "orders")
    with pytest.raises(NothingToReplay):  # letters, but none matching
        await svc.start_bulk(DeadLetterQuery("orders", 0, NOW_MS + 10**9,
                                             DeadLetterReason.GONE))
    with pytest.raises(NothingToReplay):  # another caller's letters are not its own
        await svc.start_bulk(DeadLetterQuery("billing", 0, NOW_MS + 10**9))
    assert env.store.jobs == {}


async def test_unfinished_jobs_are_capped_per_caller_until_one_finishes() -> None:
    env = make_env()
    await dead(env, "orders")
    await dead(env, "billing", n=1)
    svc = service(env)
    orders = DeadLetterQuery("orders", 0, NOW_MS + 10**9)
    for _ in range(MAX_OPEN_JOBS):  # nobody runs them: all stay unfinished
        await svc.start_bulk(orders)
    with pytest.raises(QuotaExceeded) as refused:
        await svc.start_bulk(orders)
    assert f"({MAX_OPEN_JOBS})" in refused.value.message
    assert len(env.store.jobs) == MAX_OPEN_JOBS  # the refused one made nothing
    # Each caller's jobs count alone; the operators' (every caller's letters) too.
    await svc.start_bulk(DeadLetterQuery("billing", 0, NOW_MS + 10**9))
    await svc.start_bulk(ALL)
    # Once they finish, there is room again.
    runner = ReplayJobRunner(env.settings, svc, env.store, env.clock, owner="a")
    await runner.run_once()
    assert all(j.status is JobStatus.DONE for j in env.store.jobs.values())
    assert await env.store.count_open_jobs("orders") == 0
    await dead(env, "orders", n=2)
    await svc.start_bulk(orders)


async def test_the_poll_reads_one_bucket_a_round_and_finds_every_job_in_a_cycle() -> None:
    env = make_env()
    for n in range(6):
        await dead(env, "orders", n=n)
    svc = service(env)
    jobs = [await svc.start_bulk(DeadLetterQuery("orders", 0, NOW_MS + 10**9))
            for _ in range(6)]
    buckets = {schema.replay_open_key(j.job_id) for j in jobs}
    assert len(buckets) > 1  # the test spans buckets (ids are ULIDs: they hash apart)
    runner = ReplayJobRunner(env.settings, svc, env.store, env.clock, owner="a")
    seen: list[str] = []
    for turn in range(len(schema.REPLAY_OPEN_KEYS)):
        open_before = _open(env.store.jobs)
        await runner.poll()
        finished = open_before - _open(env.store.jobs)
        # only that round's bucket (the last key, the legacy one, holds nothing here)
        assert {schema.replay_open_key(j) for j in finished} <= {schema.REPLAY_OPEN_KEYS[turn]}
        seen += finished
    assert sorted(seen) == sorted(j.job_id for j in jobs)  # every one, once


def _open(jobs: dict[str, ReplayJob]) -> set[str]:
    return {j.job_id for j in jobs.values() if j.status is JobStatus.RUNNING}


async def test_listings_and_bulk_replays_read_from_the_retention_at_the_oldest() -> None:
    """Dead letters live the retention: a ``since`` years back reads from there (on
    Cassandra each day of the window is a read, so 2020 would be thousands of them)."""
    env = make_env()
    await dead(env, "orders")
    svc = service(env)
    asked: list[DeadLetterQuery] = []
    listing = env.store.list_dead_letters

    async def spy(q: DeadLetterQuery, cursor: object, limit: int) -> object:
        asked.append(q)
        return await listing(q, cursor, limit)  # type: ignore[arg-type]

    env.store.list_dead_letters = spy  # type: ignore[assignment,method-assign]
    oldest_ms = env.clock.now_ms() - env.settings.retention_s * 1000
    years_back = DeadLetterQuery("orders", 0, NOW_MS + 10**9)
    job = await svc.start_bulk(years_back)
    page = await svc.list_letters(years_back, None, 10)
    assert job.total == len(page.items) > 0  # what exists is found all the same
    assert {q.since_ms for q in asked} == {oldest_ms}
    recent = DeadLetterQuery("orders", oldest_ms + 5, NOW_MS + 10**9)
    await svc.list_letters(recent, None, 10)
    assert asked[-1].since_ms == oldest_ms + 5  # a later since is kept


def test_filters_left_out_span_the_retention_and_those_given_are_kept() -> None:
    """``since`` left out is the oldest dead letter that can still exist, ``until`` now; a
    ``since`` further back is kept as asked (a job's filters echo it; reads clamp it)."""
    env = make_env()
    svc = service(env)
    now_ms = env.clock.now_ms()
    oldest_ms = now_ms - env.settings.retention_s * 1000
    assert svc.query(DeadLetterFilters("orders")) == DeadLetterQuery("orders", oldest_ms, now_ms)
    asked = DeadLetterFilters(None, 0, now_ms - 5, DeadLetterReason.GONE, "https://x/")
    assert svc.query(asked) == DeadLetterQuery(None, 0, now_ms - 5, DeadLetterReason.GONE,
                                               "https://x/")
    for bad in (DeadLetterFilters(None, since_ms=now_ms + 1),
                DeadLetterFilters(None, until_ms=oldest_ms - 1)):
        with pytest.raises(InvalidRequest) as refused:
            svc.query(bad)
        assert refused.value.extra["field"] == "since"
