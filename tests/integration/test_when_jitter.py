"""``when`` on PATCH and snooze, and ``jitterSeconds``, on the real stack (Cassandra, SQS,
Redis, a real dispatcher and receiver): retimed and snoozed triggers are delivered at the
phrase's instant; a jittered batch arrives inside its windows and never early; a jittered
series fires the scheduled occurrences of its rule."""

from __future__ import annotations

import itertools
import time
from typing import Any

import pytest

from tests.integration.conftest import Stack
from trigger_service.core.time.jitter import jitter_offset_ms
from trigger_service.core.time.timing import parse_rfc3339_ms

pytestmark = pytest.mark.integration

NY = "America/New_York"
WEEKDAYS_9 = "FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR;BYHOUR=9;BYMINUTE=0;BYSECOND=0"
# How late a delivery may be after its (jittered) fire time on this shared machine: the
# claim, the SQS receive and one POST; generous, the point is the window, not the speed.
LAG_MS = 5_000


@pytest.fixture
def extra_env() -> dict[str, str]:
    return {"TRIGGER_API_MIN_RECURRENCE_INTERVAL_S": "1"}


def now_ms() -> int:
    return time.time_ns() // 1_000_000


async def view(stack: Stack, trigger_id: str) -> dict[str, Any]:
    resp = await stack.client.get(f"/v1/triggers/{trigger_id}", headers=stack.auth())
    assert resp.status == 200
    return dict(await resp.json())


async def test_patch_with_when_retimes_a_stored_trigger_and_it_is_delivered(
        stack: Stack) -> None:
    await stack.start_dispatcher()
    _, body, _ = await stack.post(stack.body(delaySeconds=3600))
    tid = body["triggerId"]
    before = now_ms()
    resp = await stack.client.patch(f"/v1/triggers/{tid}", json={"when": "in 2 seconds"},
                                    headers=stack.auth())
    got = await resp.json()
    assert resp.status == 200, got
    fire_ms = parse_rfc3339_ms(got["fireAt"])
    assert before + 2000 <= fire_ms <= now_ms() + 2000
    rec = stack.receiver
    assert await rec.wait_for(lambda: len(rec.for_trigger(tid)) == 1, 15)
    arrival = rec.for_trigger(tid)[0]
    assert fire_ms <= arrival.at_ms <= fire_ms + LAG_MS
    assert (await stack.wait_status(tid, "FIRED"))["status"] == "FIRED"
    # A recurring phrase in the zone the patch gives: stored (Cassandra) as its rule.
    _, other, _ = await stack.post(stack.body(delaySeconds=3600))
    resp = await stack.client.patch(f"/v1/triggers/{other['triggerId']}", headers=stack.auth(),
                                    json={"when": "every weekday at 9am", "timeZone": NY})
    assert resp.status == 200, await resp.json()
    stored = await view(stack, other["triggerId"])
    assert (stored["rrule"], stored["timeZone"]) == (WEEKDAYS_9, NY)
    # Its errors name when: a phrase that reads as a rule too frequent for the setting.
    resp = await stack.client.patch(f"/v1/triggers/{other['triggerId']}", headers=stack.auth(),
                                    json={"when": "every day at 9am for 0 times"})
    err = await resp.json()
    assert resp.status == 400 and err["field"] == "when" and "0 times" in err["message"]


async def test_snooze_with_when_is_delivered_at_the_phrases_instant(stack: Stack) -> None:
    await stack.start_dispatcher()
    _, body, _ = await stack.post(stack.body(delaySeconds=3600))
    url = f"/v1/triggers/{body['triggerId']}/snooze"
    before = now_ms()
    resp = await stack.client.post(url, json={"when": "in 2 seconds"}, headers=stack.auth())
    snoozed = await resp.json()
    assert resp.status == 201, snoozed
    assert snoozed["snoozedFrom"] == body["triggerId"]
    fire_ms = parse_rfc3339_ms(snoozed["fireAt"])
    assert before + 2000 <= fire_ms <= now_ms() + 2000
    rec = stack.receiver
    tid = snoozed["triggerId"]
    assert await rec.wait_for(lambda: len(rec.for_trigger(tid)) == 1, 15)
    assert fire_ms <= rec.for_trigger(tid)[0].at_ms <= fire_ms + LAG_MS
    resp = await stack.client.post(url, json={"when": "every day at 9am", "timeZone": "UTC"},
                                   headers=stack.auth())
    err = await resp.json()
    assert resp.status == 400 and err["field"] == "when", err


async def test_a_jittered_batch_arrives_inside_its_windows_never_early(stack: Stack) -> None:
    await stack.start_dispatcher()
    jitter_s, count = 4, 30
    made: dict[str, tuple[int, int]] = {}  # id -> (scheduled, jittered fire time)
    for _ in range(count):
        status, body, _ = await stack.post(stack.body(delaySeconds=2, jitterSeconds=jitter_s))
        assert status == 201, body
        got = await view(stack, body["triggerId"])
        assert got["jitterSeconds"] == jitter_s and got["fireAt"] == body["fireAt"]
        made[body["triggerId"]] = (parse_rfc3339_ms(got["scheduledAt"]),
                                   parse_rfc3339_ms(got["fireAt"]))
    rec = stack.receiver
    assert await rec.wait_for(lambda: all(rec.for_trigger(t) for t in made), 40)
    for tid, (scheduled_ms, fire_ms) in made.items():
        assert fire_ms - scheduled_ms == jitter_offset_ms(f"{tid}.1", jitter_s)
        arrival = rec.for_trigger(tid)[0]
        assert arrival.at_ms >= fire_ms >= scheduled_ms, "delivered early"
        assert arrival.at_ms <= scheduled_ms + jitter_s * 1000 + LAG_MS
        assert parse_rfc3339_ms(arrival.body["scheduledAt"]) == scheduled_ms
        assert parse_rfc3339_ms(arrival.body["fireAt"]) == fire_ms
    offsets = sorted(fire - scheduled for scheduled, fire in made.values())
    assert offsets[-1] - offsets[0] > jitter_s * 1000 // 2  # spread, not one instant
    assert len(rec.arrivals) == count


async def test_a_jittered_series_fires_its_rules_scheduled_occurrences(stack: Stack) -> None:
    await stack.start_dispatcher()
    status, body, _ = await stack.post(stack.body(when="every 3 seconds", jitterSeconds=2))
    assert status == 201, body
    tid = body["triggerId"]
    first_ms = parse_rfc3339_ms(body["resolved"]["fireAt"])  # the scheduled first occurrence
    rec = stack.receiver
    assert await rec.wait_for(lambda: len(rec.for_trigger(tid)) >= 3, 30)
    arrivals = rec.for_trigger(tid)[:3]
    scheduled = [parse_rfc3339_ms(a.body["scheduledAt"]) for a in arrivals]
    assert scheduled[0] == first_ms
    assert [b - a for a, b in itertools.pairwise(scheduled)] == [3000, 3000]
    for n, (a, at_ms) in enumerate(zip(arrivals, scheduled, strict=True), start=1):
        assert a.body["occurrenceId"] == f"{tid}.{n}"
        fire_ms = parse_rfc3339_ms(a.body["fireAt"])
        assert fire_ms == at_ms + jitter_offset_ms(f"{tid}.{n}", 2)
        assert fire_ms <= a.at_ms <= fire_ms + LAG_MS
