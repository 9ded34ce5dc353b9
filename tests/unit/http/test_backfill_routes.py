"""``POST /v1/triggers/{id}/backfill`` on in-memory fakes (every exchange checked against
openapi.yaml by the ``api`` fixture)."""

from __future__ import annotations

from tests.unit.app.support import NOW_MS
from tests.unit.http.test_routes import AUTH, BODY, OTHER, Api, assert_error
from tests.unit.http.test_tag_routes import job_done
from trigger_service.core.time.timing import format_rfc3339_ms

HOUR = 3_600_000
START = format_rfc3339_ms(NOW_MS - 10 * HOUR)
NOW = format_rfc3339_ms(NOW_MS)


async def _series(api: Api) -> str:
    """An hourly series from 10 hours ago (10 occurrences are past)."""
    body = {k: v for k, v in BODY.items() if k != "delaySeconds"}
    status, created, _ = await api.post(body | {"fireAt": START, "rrule": "FREQ=HOURLY"})
    assert status == 201, created
    return str(created["triggerId"])


async def _backfill(api: Api, tid: str, body: object,
                    headers: dict[str, str] = AUTH) -> tuple[int, dict[str, object]]:
    resp = await api.client.post(f"/v1/triggers/{tid}/backfill", json=body, headers=headers)
    return resp.status, await resp.json()


async def test_a_backfill_is_a_job_and_a_repeat_fires_nothing_more(api: Api) -> None:
    series = await _series(api)
    before = len(api.env.store.triggers)
    status, job = await _backfill(api, series, {"from": START, "to": NOW})
    assert status == 202, job
    assert (job["action"], job["matched"], job["filter"]) == ("backfill", 10, {})
    assert job["backfill"] == {"triggerId": series, "from": START, "to": NOW, "paceMs": 100}
    done = await job_done(api, str(job["jobId"]))
    assert (done["done"], done["failed"]) == (10, 0)
    assert len(api.env.store.triggers) == before + 10
    status, again = await _backfill(api, series, {"from": START, "to": NOW})
    assert status == 202 and (await job_done(api, str(again["jobId"])))["done"] == 10
    assert len(api.env.store.triggers) == before + 10
    resp = await api.client.get(f"/v1/triggers/jobs/{job['jobId']}", headers=OTHER)
    await assert_error(resp, 404, "not_found")


async def test_bad_backfills_are_refused(api: Api) -> None:
    series = await _series(api)
    for body in ({"from": START}, {"from": START, "to": NOW, "step": 1},
                 {"from": "yesterday", "to": NOW}, {"from": NOW, "to": START},
                 {"from": START, "to": 12}, [START, NOW]):
        resp = await api.client.post(f"/v1/triggers/{series}/backfill", json=body,
                                     headers=AUTH)
        await assert_error(resp, 400, "invalid_request", extras=["field"])
    once = await api.created_id(delaySeconds=60)
    resp = await api.client.post(f"/v1/triggers/{once}/backfill", headers=AUTH,
                                 json={"from": START, "to": NOW})
    await assert_error(resp, 422, "not_backfillable")
    resp = await api.client.post(f"/v1/triggers/{series}/backfill", headers=AUTH,
                                 json={"from": NOW, "to": format_rfc3339_ms(NOW_MS + HOUR)})
    await assert_error(resp, 422, "not_backfillable")
    resp = await api.client.post(f"/v1/triggers/{series}/backfill", headers=OTHER,
                                 json={"from": START, "to": NOW})
    await assert_error(resp, 404, "not_found")
