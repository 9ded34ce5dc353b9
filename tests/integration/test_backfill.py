"""Backfill (``POST /v1/triggers/{id}/backfill``) on the real stack (Cassandra, LocalStack
SQS, Redis, a dispatcher): ten past occurrences of a series, backfilled twice through the
SDK, are delivered exactly once each, oldest first; a one-time trigger is refused."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta

import pytest

from tests.integration.conftest import Stack
from trigger_client import AsyncTriggerClient, Unprocessable
from trigger_service.core.backfill import occurrence_key
from trigger_service.core.model import keyed_trigger_id

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
HOUR = timedelta(hours=1)


async def test_ten_past_occurrences_backfilled_twice_arrive_once_each_oldest_first(
        stack: Stack, sdk: AsyncTriggerClient) -> None:
    await stack.start_dispatcher()
    url = stack.receiver.base_url + "cb"
    now = datetime.now(UTC).replace(microsecond=0)
    start = now - 9 * HOUR - timedelta(minutes=30)  # occurrences at start + 0..9 h are past
    series = await sdk.triggers.create(callback_url=url, payload={"k": "series"},
                                       fire_at=start, rrule="FREQ=HOURLY")
    job = await sdk.triggers.backfill(series.trigger_id, start, now)
    assert (job.action, job.matched) == ("backfill", 10)
    done = await sdk.triggers.wait_job(job.job_id, poll_s=0.1)
    assert (done.done, done.failed) == (10, 0)
    again = await sdk.triggers.wait_job(
        (await sdk.triggers.backfill(series.trigger_id, start, now)).job_id, poll_s=0.1)
    assert (again.matched, again.done, again.failed) == (10, 10, 0)

    copies = [keyed_trigger_id(stack.caller, occurrence_key(
        series.trigger_id, int((start + k * HOUR).timestamp() * 1000))) for k in range(10)]
    assert await stack.receiver.wait_for(
        lambda: {a.trigger_id for a in stack.receiver.arrivals} >= set(copies), timeout_s=30)
    await asyncio.sleep(2)  # a second delivery of any occurrence would come now
    arrived = [a.trigger_id for a in stack.receiver.arrivals]
    assert sorted(arrived) == sorted(copies)  # once each; the series' own schedule is ahead
    # Oldest first: each copy due after the one before (a pace apart); deliveries a pace
    # apart may still arrive in another order on a busy machine.
    due = [(await sdk.triggers.get(c)).fire_at for c in copies]
    assert due == sorted(due) and len(set(due)) == len(due)
    assert all(a.body["payload"] == {"k": "series"} for a in stack.receiver.arrivals)
    assert (await sdk.triggers.get(copies[0])).raw["snoozedFrom"] == series.trigger_id
    assert (await sdk.triggers.get(series.trigger_id)).fire_at > datetime.now(UTC)


async def test_a_one_time_trigger_is_not_backfillable(stack: Stack,
                                                      sdk: AsyncTriggerClient) -> None:
    once = await sdk.triggers.create(callback_url=stack.receiver.base_url + "cb",
                                     delay_s=3600)
    now = datetime.fromtimestamp(time.time(), UTC)
    with pytest.raises(Unprocessable) as e:
        await sdk.triggers.backfill(once.trigger_id, now - HOUR, now)
    assert e.value.error == "not_backfillable"
