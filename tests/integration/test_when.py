"""``when`` on the real stack: a phrase's trigger is delivered, and a recurring phrase's series
is the one its rrule describes."""

from __future__ import annotations

import itertools
import time
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from tests.integration.conftest import Stack
from trigger_service.core.time.timing import format_rfc3339_ms, parse_rfc3339_ms

pytestmark = pytest.mark.integration

NY = "America/New_York"
WEEKDAYS_9 = "FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR;BYHOUR=9;BYMINUTE=0;BYSECOND=0"


@pytest.fixture
def extra_env() -> dict[str, str]:
    return {"TRIGGER_API_MIN_RECURRENCE_INTERVAL_S": "1"}


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def weekdays_at_9_in_new_york(after_ms: int, count: int) -> list[str]:
    """The rule worked out by hand with zoneinfo: the next weekday 09:00s in New York."""
    tz = ZoneInfo(NY)
    day = datetime.fromtimestamp(after_ms / 1000, tz).date()
    out: list[str] = []
    while len(out) < count:
        at = datetime(day.year, day.month, day.day, 9, tzinfo=tz)
        at_ms = int(at.timestamp() * 1000)
        if day.weekday() < 5 and at_ms >= after_ms:
            out.append(format_rfc3339_ms(at_ms))
        day += timedelta(days=1)
    return out


async def test_in_2_seconds_is_delivered_after_2_seconds(stack: Stack) -> None:
    await stack.start_dispatcher()
    before = now_ms()
    status, body, _ = await stack.post(stack.body(when="in 2 seconds"))
    after = now_ms()
    assert status == 201, body
    fire_ms = parse_rfc3339_ms(body["resolved"]["fireAt"])
    assert before + 2000 <= fire_ms <= after + 2000 and body["fireAt"] == body["resolved"]["fireAt"]
    assert body["resolved"]["rrule"] is None and body["resolved"]["timeZone"] is None
    rec = stack.receiver
    tid = body["triggerId"]
    assert await rec.wait_for(lambda: len(rec.for_trigger(tid)) == 1, 15)
    arrival = rec.for_trigger(tid)[0]
    assert arrival.at_ms >= fire_ms and arrival.body["scheduledAt"] == body["fireAt"]
    assert (await stack.wait_status(tid, "FIRED"))["status"] == "FIRED"


async def test_a_recurring_phrase_is_stored_and_previewed_as_its_rule(stack: Stack) -> None:
    start = now_ms()
    status, body, _ = await stack.post(stack.body(when="every weekday at 9am", timeZone=NY))
    assert status == 201, body
    expected = weekdays_at_9_in_new_york(start, 5)
    assert body["resolved"] == {"when": "every weekday at 9am", "fireAt": expected[0],
                                "rrule": WEEKDAYS_9, "timeZone": NY}
    resp = await stack.client.get(f"/v1/triggers/{body['triggerId']}", headers=stack.auth())
    view = await resp.json()
    assert (view["rrule"], view["timeZone"], view["nextFireAt"]) == (WEEKDAYS_9, NY,
                                                                     expected[0])
    resp = await stack.client.post("/v1/triggers/preview", headers=stack.auth(), json={
        "when": "every weekday at 9am", "timeZone": NY, "count": 5})
    assert resp.status == 200
    assert (await resp.json())["occurrences"] == expected


async def test_a_recurring_phrase_fires_as_a_series(stack: Stack) -> None:
    await stack.start_dispatcher()
    status, body, _ = await stack.post(stack.body(when="every 2 seconds"))
    assert status == 201, body
    assert body["resolved"]["rrule"] == "FREQ=SECONDLY;INTERVAL=2"
    tid = body["triggerId"]
    rec = stack.receiver
    assert await rec.wait_for(lambda: len(rec.for_trigger(tid)) >= 3, 20)
    scheduled = [parse_rfc3339_ms(a.body["scheduledAt"]) for a in rec.for_trigger(tid)[:3]]
    assert scheduled[0] == parse_rfc3339_ms(body["fireAt"])
    assert [b - a for a, b in itertools.pairwise(scheduled)] == [2000, 2000]
    # The series goes on: the stack fixture cancels what is pending at teardown.
