"""Natural-language ``when`` (create and preview) and an ambiguous phrase's candidates, on
MockTransport only: the API's ``when`` is another branch's work (not on this one)."""

from __future__ import annotations

from datetime import UTC, datetime

import httpx
import pytest

from mock_api import CREATED, Script, error
from trigger_client import InvalidRequest, TriggerClient

RESOLVED = {"when": "every weekday at 9am", "fireAt": "2026-11-24T08:00:00.000Z",
            "rrule": "FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR", "timeZone": "Europe/Berlin"}


def test_create_sends_when_and_zone_and_reads_resolved(script: Script) -> None:
    script.answers = [httpx.Response(201, json={**CREATED, "resolved": RESOLVED})]
    c = TriggerClient("http://api", "t", transport=script.transport)
    created = c.triggers.create(callback_url="http://x/cb", when="every weekday at 9am",
                                time_zone="Europe/Berlin")
    assert script.bodies() == [{"callbackUrl": "http://x/cb", "when": "every weekday at 9am",
                                "timeZone": "Europe/Berlin"}]
    r = created.resolved
    assert r is not None and r.rrule == RESOLVED["rrule"] and r.time_zone == "Europe/Berlin"
    assert r.fire_at == datetime(2026, 11, 24, 8, tzinfo=UTC)


def test_preview_sends_when_count_and_reads_resolved(script: Script) -> None:
    script.answers = [httpx.Response(200, json={
        "occurrences": ["2026-11-24T08:00:00.000Z", "2026-11-25T08:00:00.000Z"],
        "resolved": RESOLVED})]
    c = TriggerClient("http://api", "t", transport=script.transport)
    p = c.triggers.preview(when="every weekday at 9am", time_zone="Europe/Berlin", count=2)
    assert script.bodies()[0] == {"when": "every weekday at 9am",
                                  "timeZone": "Europe/Berlin", "count": 2}
    assert len(p.occurrences) == 2 and p.resolved is not None


@pytest.mark.parametrize("candidates", [
    ["2026-11-24T08:00:00.000Z", "2026-11-24T20:00:00.000Z"],
    [{"fireAt": "2026-11-24T08:00:00.000Z"}, {"fireAt": "2026-11-24T20:00:00.000Z",
                                             "label": "evening"}],
])
def test_an_ambiguous_phrase_exposes_its_candidates(script: Script,
                                                    candidates: list[object]) -> None:
    script.answers = [error(400, "invalid_request", "when: ambiguous", field="when",
                            candidates=candidates)]
    with pytest.raises(InvalidRequest) as e:
        TriggerClient("http://api", transport=script.transport).triggers.create(
            callback_url="http://x/cb", when="at 8", time_zone="Europe/Berlin")
    assert e.value.field == "when"
    assert e.value.candidates == (datetime(2026, 11, 24, 8, tzinfo=UTC),
                                  datetime(2026, 11, 24, 20, tzinfo=UTC))


def test_patch_and_snooze_send_when_and_jitter(script: Script) -> None:
    from mock_api import trigger_json
    script.answers = [httpx.Response(200, json=trigger_json(1, jitterSeconds=600,
                                                            scheduledAt="2026-12-01T13:55:00.000Z")),
                      httpx.Response(201, json=CREATED)]
    c = TriggerClient("http://api", "t", transport=script.transport)
    t = c.triggers.patch("trg_1", when="every weekday at 9am and 5pm", jitter_s=600)
    assert t.jitter_s == 600 and t.scheduled_at == datetime(2026, 12, 1, 13, 55, tzinfo=UTC)
    c.triggers.snooze("trg_1", when="tomorrow 9am")
    assert script.bodies() == [{"when": "every weekday at 9am and 5pm", "jitterSeconds": 600},
                               {"when": "tomorrow 9am"}]
    assert script.requests[0].method == "PATCH"


async def test_async_preview_with_jitter_sends_the_key_and_reads_the_windows(
        script: Script) -> None:
    from trigger_client import AsyncTriggerClient
    window = {"scheduledAt": "2026-11-24T08:00:00.000Z", "fireAt": "2026-11-24T08:04:00.000Z",
              "latestAt": "2026-11-24T08:10:00.000Z"}
    script.answers = [httpx.Response(200, json={"occurrences": ["2026-11-24T08:00:00.000Z"],
                                                "jittered": [window]}),
                      httpx.Response(201, json=CREATED)]
    async with AsyncTriggerClient("http://api", "t",
                                  transport=httpx.MockTransport(script.handle)) as c:
        p = await c.triggers.preview(when="every hour", jitter_s=600, count=1,
                                     idempotency_key="k-1")
        await c.triggers.snooze("trg_1", when="in 10 minutes")
    assert script.requests[0].headers["Idempotency-Key"] == "k-1"
    assert script.bodies() == [{"when": "every hour", "jitterSeconds": 600, "count": 1},
                               {"when": "in 10 minutes"}]
    assert p.jittered[0].fire_at == datetime(2026, 11, 24, 8, 4, tzinfo=UTC)
    assert p.jittered[0].latest_at == datetime(2026, 11, 24, 8, 10, tzinfo=UTC)
