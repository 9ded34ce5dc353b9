"""Reminders on the real stack: recurring series, edits, cancel, snooze, preview, DST."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from dataclasses import replace
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from reconciler.rezone import Rezoner
from tests.integration.conftest import Stack
from trigger_service.core.time.clock import SystemClock
from trigger_service.core.time.timing import parse_rfc3339_ms
from trigger_service.core.time.zones import TZDATA_VERSION
from trigger_service.platform.metrics import InMemoryMetrics

pytestmark = pytest.mark.integration

EVERY_2S = "FREQ=SECONDLY;INTERVAL=2;COUNT=4"


@pytest.fixture
def extra_env() -> dict[str, str]:
    return {"TRIGGER_API_MIN_RECURRENCE_INTERVAL_S": "1", "TRIGGER_DISPATCH_RETRY_BACKOFF_S": "1",
            "TRIGGER_DISPATCH_MAX_ATTEMPTS": "2"}


async def create(stack: Stack, **fields: Any) -> str:
    status, body, _ = await stack.post(stack.body(**fields))
    assert status == 201, body
    assert body["nextFireAt"] == body["fireAt"]
    return str(body["triggerId"])


async def test_a_series_fires_every_occurrence_on_time_with_its_own_id(stack: Stack) -> None:
    await stack.start_dispatcher()
    tid = await create(stack, delaySeconds=1, rrule=EVERY_2S)
    rec = stack.receiver

    def first_of_each() -> list[Any]:
        """Each occurrence's first arrival: at least once, a POST that timed out after the
        receiver got it (an event-loop stall here) comes again, with the same id."""
        first: dict[str, Any] = {}
        for a in rec.for_trigger(tid):
            first.setdefault(a.body["occurrenceId"], a)
        return list(first.values())

    assert await rec.wait_for(lambda: len(first_of_each()) >= 4, 20)
    arrivals = first_of_each()
    scheduled = [parse_rfc3339_ms(a.body["scheduledAt"]) for a in arrivals]
    assert [b - a for a, b in itertools.pairwise(scheduled)] == [2000, 2000, 2000]
    assert [a.body["occurrenceId"] for a in arrivals] == [f"{tid}.{n}" for n in (1, 2, 3, 4)]
    assert [a.headers["X-Trigger-Occurrence-Id"] for a in arrivals] == [
        a.body["occurrenceId"] for a in arrivals]
    assert all(a.at_ms >= s for a, s in zip(arrivals, scheduled, strict=True))  # never early
    view = await stack.wait_status(tid, "FIRED")
    assert view["status"] == "FIRED" and view["occurrencesFired"] == 4
    assert view["nextFireAt"] is None and view["rrule"] == EVERY_2S
    assert view["timeZone"] == "UTC" and view["dstPolicy"] == {"gap": "shift",
                                                               "overlap": "first"}


async def test_patch_mid_series_changes_the_later_occurrences(stack: Stack) -> None:
    await stack.start_dispatcher()
    tid = await create(stack, delaySeconds=1, rrule="FREQ=SECONDLY;INTERVAL=2;COUNT=5",
                       payload={"v": 1})
    rec = stack.receiver
    assert await rec.wait_for(lambda: len(rec.for_trigger(tid)) >= 1, 10)
    resp = await stack.client.patch(f"/v1/triggers/{tid}", json={"payload": {"v": 2}},
                                    headers=stack.auth())
    got = await resp.json()
    assert resp.status == 200, got
    assert got["payload"] == {"v": 2} and got["rrule"] == "FREQ=SECONDLY;INTERVAL=2;COUNT=5"
    assert await rec.wait_for(lambda: len(rec.for_trigger(tid)) >= 5, 20)
    payloads = [a.body["payload"]["v"] for a in rec.for_trigger(tid)]
    assert payloads[0] == 1 and payloads[-1] == 2 and payloads == sorted(payloads)
    resp = await stack.client.patch(f"/v1/triggers/{tid}", data=b"{}", headers=stack.auth()
                                    | {"Content-Type": "text/plain"})
    assert resp.status == 415


async def test_patch_can_move_the_time_and_the_old_message_is_ignored(stack: Stack) -> None:
    await stack.start_dispatcher()
    tid = await create(stack, delaySeconds=2)
    resp = await stack.client.patch(f"/v1/triggers/{tid}", json={"delaySeconds": 5},
                                    headers=stack.auth()
                                    | {"Content-Type": "application/merge-patch+json"})
    assert resp.status == 200
    moved_to = parse_rfc3339_ms((await resp.json())["fireAt"])
    rec = stack.receiver
    assert await rec.wait_for(lambda: len(rec.for_trigger(tid)) >= 1, 15)
    assert rec.for_trigger(tid)[0].at_ms >= moved_to
    view = await stack.wait_status(tid, "FIRED")
    assert len(rec.for_trigger(tid)) == 1 and view["status"] == "FIRED"
    resp = await stack.client.patch(f"/v1/triggers/{tid}", json={"payload": 1},
                                    headers=stack.auth())
    assert resp.status == 409 and (await resp.json())["error"] == "not_editable"


async def test_cancel_mid_series_stops_it(stack: Stack) -> None:
    await stack.start_dispatcher()
    tid = await create(stack, delaySeconds=1, rrule="FREQ=SECONDLY;INTERVAL=2")
    rec = stack.receiver
    assert await rec.wait_for(lambda: len(rec.for_trigger(tid)) >= 2, 15)
    resp = await stack.client.delete(f"/v1/triggers/{tid}", headers=stack.auth())
    assert resp.status == 200, await resp.json()
    count = len(rec.for_trigger(tid))
    await rec.wait_for(lambda: False, 5)
    # An occurrence being delivered when the cancel came finished before the 200: none after.
    assert len(rec.for_trigger(tid)) == count
    assert (await stack.wait_status(tid, "CANCELLED"))["nextFireAt"] is None


async def test_a_dead_lettered_occurrence_does_not_stall_the_series(stack: Stack) -> None:
    await stack.start_dispatcher()
    tid = await create(stack, delaySeconds=1, rrule="FREQ=SECONDLY;INTERVAL=3;COUNT=3")
    rec = stack.receiver
    rec.script[tid] = [500, 500]  # the first occurrence uses both attempts and fails
    assert await rec.wait_for(lambda: len(rec.for_trigger(tid)) >= 4, 25)
    ids = [a.body["occurrenceId"] for a in rec.for_trigger(tid)]
    assert ids == [f"{tid}.1", f"{tid}.1", f"{tid}.2", f"{tid}.3"]
    view = await stack.wait_status(tid, "FIRED")
    assert view["occurrencesFired"] == 2
    dead = [b for b in await stack.sqs.dlq_bodies() if b["triggerId"] == tid]
    assert len(dead) == 1 and dead[0]["reason"] == "HTTP 500"


async def test_a_dispatcher_killed_between_occurrences_loses_none(stack: Stack) -> None:
    d = await stack.start_dispatcher()
    tid = await create(stack, delaySeconds=1, rrule="FREQ=SECONDLY;INTERVAL=3;COUNT=3")
    rec = stack.receiver
    assert await rec.wait_for(lambda: len(rec.for_trigger(tid)) >= 1, 10)
    # Dies: no drain; the messages it held come back after their visibility timeout.
    d.task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await d.task
    await d.channel.close()
    await d.queue.close()
    stack._dispatchers.remove(d)
    await stack.start_dispatcher()
    assert await rec.wait_for(lambda: {a.body["occurrenceId"] for a in rec.for_trigger(tid)}
                              == {f"{tid}.{n}" for n in (1, 2, 3)}, 60)
    assert (await stack.wait_status(tid, "FIRED", timeout_s=10))["occurrencesFired"] == 3


async def test_snooze_makes_a_one_time_copy(stack: Stack) -> None:
    await stack.start_dispatcher()
    tid = await create(stack, delaySeconds=600, payload={"remind": "me"})
    resp = await stack.client.post(f"/v1/triggers/{tid}/snooze", json={"delaySeconds": 1},
                                   headers=stack.auth())
    body = await resp.json()
    assert resp.status == 201 and body["snoozedFrom"] == tid
    snoozed = body["triggerId"]
    rec = stack.receiver
    assert await rec.wait_for(lambda: len(rec.for_trigger(snoozed)) == 1, 10)
    assert rec.for_trigger(snoozed)[0].body["payload"] == {"remind": "me"}
    view = await stack.wait_status(snoozed, "FIRED")
    assert view["snoozedFrom"] == tid
    resp = await stack.client.post(f"/v1/triggers/{tid}/snooze",
                                   json={"delaySeconds": 1, "rrule": "FREQ=DAILY"},
                                   headers=stack.auth())
    assert resp.status == 400
    other = stack.auth(stack.token + "-other")
    resp = await stack.client.post(f"/v1/triggers/{tid}/snooze", json={"delaySeconds": 1},
                                   headers=other)
    assert resp.status == 404


async def test_preview_is_deterministic_and_applies_the_dst_policy(stack: Stack) -> None:
    body = {"localTime": "2027-03-13T02:30:00", "timeZone": "America/New_York",
            "rrule": "FREQ=DAILY", "dstPolicy": {"gap": "skip"}, "count": 3}
    resp = await stack.client.post("/v1/triggers/preview", json=body, headers=stack.auth())
    assert resp.status == 200
    assert (await resp.json())["occurrences"] == [
        "2027-03-13T07:30:00.000Z", "2027-03-15T06:30:00.000Z", "2027-03-16T06:30:00.000Z"]
    resp = await stack.client.post("/v1/triggers/preview", json=body | {
        "after": "2027-03-15T06:30:00Z", "count": 1}, headers=stack.auth())
    assert (await resp.json())["occurrences"] == ["2027-03-16T06:30:00.000Z"]


@pytest.mark.parametrize(("fields", "status", "code", "field"), [
    ({"localTime": "2027-03-14T02:30:00", "timeZone": "America/New_York",
      "dstPolicy": {"gap": "skip"}}, 422, "nonexistent_local_time", "localTime"),
    ({"localTime": "2027-03-14T09:00:00", "timeZone": "Mars/Base"}, 400, "invalid_request",
     "timeZone"),
    ({"localTime": "2027-03-14T09:00:00+01:00", "timeZone": "UTC"}, 400, "invalid_request",
     "localTime"),
    ({"localTime": "2027-03-14T09:00:00"}, 400, "invalid_request", "timeZone"),
    ({"delaySeconds": 1, "rrule": "FREQ=NEVER"}, 400, "invalid_request", "rrule"),
    ({"delaySeconds": 1, "cron": "* * *"}, 400, "invalid_request", "cron"),
    ({"delaySeconds": 1, "rrule": "FREQ=DAILY", "dstPolicy": {"gap": "later"}}, 400,
     "invalid_request", "dstPolicy"),
    ({"delaySeconds": 1, "rrule": "FREQ=SECONDLY"}, 201, None, None),  # 1 s allowed here
    ({"delaySeconds": 1, "rrule": "FREQ=SECONDLY;BYSECOND=0,0"}, 201, None, None),
])
async def test_reminder_errors_name_their_field(stack: Stack, fields: dict[str, Any],
                                                status: int, code: str | None,
                                                field: str | None) -> None:
    st, body, _ = await stack.post(stack.body(**fields))
    assert st == status, body
    if code:
        assert body["error"] == code and body["field"] == field, body


async def test_a_weekday_reminder_in_new_york(stack: Stack) -> None:
    st, body, _ = await stack.post(stack.body(
        localTime="2030-03-08T09:00:00", timeZone="America/New_York",
        rrule="FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR"))
    assert st == 201 and body["nextFireAt"] == "2030-03-08T14:00:00.000Z"
    resp = await stack.client.get(f"/v1/triggers/{body['triggerId']}", headers=stack.auth())
    view = await resp.json()
    assert view["localTime"] is None and view["timeZone"] == "America/New_York"
    assert view["rrule"] == "FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR"
    assert time.time() < parse_rfc3339_ms(view["nextFireAt"]) / 1000


async def test_the_rezone_pass_moves_an_occurrence_resolved_with_old_rules(stack: Stack) -> None:
    st, body, _ = await stack.post(stack.body(
        localTime="2030-03-11T09:00:00", timeZone="America/New_York"))
    assert st == 201 and body["fireAt"] == "2030-03-11T13:00:00.000Z"
    store = stack.runtime.store
    t = await store.get(body["triggerId"])
    assert t is not None and t.tzdata_version == TZDATA_VERSION
    # As an older release would have stored it: an hour off (DST starting a week later).
    old = replace(t, fire_at_ms=t.fire_at_ms + 3_600_000, tzdata_version="2020a",
                  revision=(t.revision or 0) + 1)
    now = int(time.time() * 1000)
    assert await store.advance(t, old, 86_400, now)
    rezoner = Rezoner(stack.settings, store, stack.runtime.queue, SystemClock(),
                      InMemoryMetrics())
    await rezoner.run_once()
    moved = await store.get(t.trigger_id)
    assert moved is not None and moved.fire_at_ms == t.fire_at_ms
    assert moved.tzdata_version == TZDATA_VERSION and moved.revision == (old.revision or 0) + 1
    await rezoner.run_once()
    assert await store.get(t.trigger_id) == moved  # exactly once
    resp = await stack.client.get(f"/v1/triggers/{t.trigger_id}", headers=stack.auth())
    assert (await resp.json())["nextFireAt"] == "2030-03-11T13:00:00.000Z"


async def test_a_one_time_local_time_fires_at_that_wall_time(stack: Stack) -> None:
    await stack.start_dispatcher()
    zone = "Asia/Kathmandu"  # +05:45
    at_ms = (int(time.time()) + 3) * 1000
    local = datetime.fromtimestamp(at_ms / 1000, ZoneInfo(zone)).replace(tzinfo=None)
    tid = await create(stack, localTime=local.isoformat(), timeZone=zone)
    rec = stack.receiver
    assert await rec.wait_for(lambda: len(rec.for_trigger(tid)) == 1, 15)
    arrival = rec.for_trigger(tid)[0]
    assert parse_rfc3339_ms(arrival.body["scheduledAt"]) == at_ms <= arrival.at_ms
    view = await stack.wait_status(tid, "FIRED")
    assert view["localTime"] == local.isoformat() and view["timeZone"] == zone
