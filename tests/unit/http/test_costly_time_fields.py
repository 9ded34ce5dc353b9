"""The costliest ``when``, ``rrule`` and ``cron`` values over HTTP on the in-memory fakes:
create, preview, PATCH, snooze and batch each answer them with a 400 in the one error shape
naming the field, in a few milliseconds of CPU each (a phrase took about a minute, a rule up
to 30 s, an impossible cron was a 500)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import pytest

from tests.unit.app.support import CALLBACK, make_env
from tests.unit.http.test_routes import AUTH, Api, assert_error, memory_runtime, serving
from trigger_service.app.work_time import work_time_s

# Past the relative grammar by one character: dateparser's turn, which needs a zone.
WORST_WHEN = ["in " + "1 hour " * 27 + "1 x", "in " + "1 hour and " * 17 + "1 x",
              "1 hour " * 28 + "1"]
NEVER_RRULES = ["FREQ=DAILY;BYMONTH=2;BYMONTHDAY=30",
                "FREQ=MINUTELY;INTERVAL=7;BYMONTH=4;BYMONTHDAY=31",
                "FREQ=SECONDLY;INTERVAL=7;BYHOUR=3;BYMINUTE=0;BYSECOND=0",
                "FREQ=MINUTELY;INTERVAL=1440;BYHOUR=5"]
TWO_DAYS_BACK = "2023-11-12T22:00:00"  # NOW_MS is 2023-11-14T22:13:20Z
IMPOSSIBLE_CRON = {"cron": "0 0 30 2 *", "localTime": TWO_DAYS_BACK, "timeZone": "UTC"}
# CPU per request: the old code spent seconds to a minute on each of these, so a bound of a
# second still tells them apart. It is not a speed target (the work itself is bounded in
# deterministic steps, ``tests/unit/core/test_rule_walk.py``): alone a check takes 5-60 ms,
# but under ``make test``'s coverage tracer on a shared machine the costliest rule measured
# 0.253 s. Measured as this thread's CPU less its garbage collections (``app/work_time.py``):
# late in a full run a collection walks every earlier test's leftovers.
CPU_BOUND_S = 1.0


def bodies() -> list[tuple[dict[str, Any], str]]:
    """(time fields, the field the 400 names)."""
    out: list[tuple[dict[str, Any], str]] = [({"when": w}, "timeZone") for w in WORST_WHEN]
    out += [({"rrule": r, "localTime": "2023-11-15T09:00:00", "timeZone": "UTC"}, "rrule")
            for r in NEVER_RRULES]
    out.append((IMPOSSIBLE_CRON, "cron"))
    return out


@pytest.mark.parametrize(("fields", "field"), bodies())
async def test_create_and_preview_answer_quickly(api: Api, fields: dict[str, Any],
                                                 field: str) -> None:
    start = work_time_s()
    resp = await api.client.post("/v1/triggers", json={"callbackUrl": CALLBACK, **fields},
                                 headers=AUTH)
    got = await assert_error(resp, 400, "invalid_request")
    assert work_time_s() - start < CPU_BOUND_S, fields
    assert got["field"] == field, got
    # A preview lists what there is: nothing, for a rule with no occurrence in the horizon.
    start = work_time_s()
    resp = await api.client.post("/v1/triggers/preview", json={**fields, "count": 1000},
                                 headers=AUTH)
    if resp.status == 200:
        assert await resp.json() == {"occurrences": []}
    else:
        assert (await assert_error(resp, 400, "invalid_request"))["field"] == field
    assert work_time_s() - start < CPU_BOUND_S, fields


@pytest.mark.parametrize(("fields", "field"), bodies())
async def test_patch_answers_a_400_quickly(api: Api, fields: dict[str, Any],
                                           field: str) -> None:
    trigger_id = await api.created_id()
    patch = {"delaySeconds": None, **fields}
    start = work_time_s()
    resp = await api.client.patch(f"/v1/triggers/{trigger_id}", json=patch, headers=AUTH)
    got = await assert_error(resp, 400, "invalid_request")
    assert work_time_s() - start < CPU_BOUND_S, fields
    assert got["field"] == field, got


async def test_snooze_answers_a_400_quickly(api: Api) -> None:
    trigger_id = await api.created_id()
    for when in WORST_WHEN:
        start = work_time_s()
        resp = await api.client.post(f"/v1/triggers/{trigger_id}/snooze",
                                     json={"when": when, "timeZone": "UTC"}, headers=AUTH)
        assert resp.status in (201, 400), await resp.text()
        assert work_time_s() - start < CPU_BOUND_S, when
    resp = await api.client.post(f"/v1/triggers/{trigger_id}/snooze",
                                 json={"when": WORST_WHEN[0]}, headers=AUTH)
    body = await resp.json()
    assert resp.status == 400 and set(body) >= {"error", "message"}, body


@pytest.fixture
async def unshared() -> AsyncIterator[Api]:
    """The route tests' API with a CPU share no batch here can spend (the share has its own
    tests: tests/unit/limits/test_cpu_shares.py); each item's own answer is what is tested."""
    env = make_env()
    settings = replace(env.settings, limits=replace(env.settings.limits,
                                                    caller_cpu_burst_ms=1e9))
    async with serving(env, memory_runtime(env, settings)) as served:
        yield served


async def test_a_batch_of_the_costliest_items_answers_each_with_a_400(unshared: Api) -> None:
    api = unshared
    items = [{"callbackUrl": CALLBACK, **fields} for fields, _ in bodies()] * 5
    start = work_time_s()
    resp = await api.client.post("/v1/triggers/batch", json={"items": items}, headers=AUTH)
    body = await resp.json()
    assert resp.status == 200, body
    assert work_time_s() - start < CPU_BOUND_S * len(items)
    fields = [field for _, field in bodies()] * 5
    for answer, field in zip(body["items"], fields, strict=True):
        assert answer["status"] == 400 and answer["error"] == "invalid_request", answer
        assert answer["field"] == field and answer["message"], answer
