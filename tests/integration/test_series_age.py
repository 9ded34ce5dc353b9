"""A series a year old on the real stack: registered with a DTSTART a year back, it fires and
steps from its anchor (stored with the schedule), never expanding the year again."""

from __future__ import annotations

import asyncio
import itertools
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from tests.integration.conftest import Stack
from trigger_service.core.time.timing import parse_rfc3339_ms

pytestmark = pytest.mark.integration

ZONE = "America/New_York"
EVERY_2S = "FREQ=SECONDLY;INTERVAL=2"


@pytest.fixture
def extra_env() -> dict[str, str]:
    return {"TRIGGER_API_MIN_RECURRENCE_INTERVAL_S": "1"}


def wall_index(at_ms: int, start: datetime) -> int:
    """The occurrence's wall instance index: whole steps of the rule from DTSTART."""
    wall = datetime.fromtimestamp(at_ms / 1000, ZoneInfo(ZONE)).replace(tzinfo=None)
    steps, rest = divmod(wall - start, timedelta(seconds=2))
    assert rest == timedelta(0), (wall, start)  # on the rule's phase
    return steps


async def test_a_series_a_year_old_registers_fires_and_steps(stack: Stack) -> None:
    start = (datetime.now(ZoneInfo(ZONE)).replace(tzinfo=None, microsecond=0)
             - timedelta(days=365, seconds=1))
    body: dict[str, Any] = stack.body(localTime=start.isoformat(), timeZone=ZONE,
                                      rrule=EVERY_2S)
    status, created, _ = await stack.post(body)
    assert status == 201, created
    tid = created["triggerId"]
    store = stack.runtime.store
    first = await store.get(tid)
    assert first is not None and first.schedule is not None
    anchor = first.schedule.anchor
    assert anchor is not None and anchor.index > 365 * 43_000  # not DTSTART: near now
    assert first.occurrence_index == wall_index(first.fire_at_ms, start)

    await stack.start_dispatcher()
    rec = stack.receiver
    assert await rec.wait_for(lambda: len(rec.for_trigger(tid)) >= 2, 20)
    arrivals = rec.for_trigger(tid)[:2]
    scheduled = [parse_rfc3339_ms(a.body["scheduledAt"]) for a in arrivals]
    assert scheduled[0] == first.fire_at_ms
    assert [b - a for a, b in itertools.pairwise(scheduled)] == [2000]
    assert [a.body["occurrenceId"] for a in arrivals] == [f"{tid}.1", f"{tid}.2"]
    assert all(a.at_ms >= s for a, s in zip(arrivals, scheduled, strict=True))  # never early
    for _ in range(100):  # the dispatcher records a delivery after the callback answered
        moved = await store.get(tid)
        if moved is not None and moved.occurrences_fired >= 2:
            break
        await asyncio.sleep(0.1)
    assert moved is not None and moved.schedule is not None
    assert moved.occurrences_fired >= 2
    assert moved.occurrence_index == wall_index(moved.fire_at_ms, start)
    assert moved.occurrence_index >= first.occurrence_index + 2
    later = moved.schedule.anchor
    assert later is not None and later.index >= anchor.index  # it followed the series
