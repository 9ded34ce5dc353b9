"""``POST /v1/triggers/{id}/run`` on in-memory fakes (every exchange checked against
openapi.yaml by the ``api`` fixture)."""

from __future__ import annotations

from tests.unit.http.test_routes import AUTH, OPERATOR, VIEWER, Api, assert_error

SERIES = {"delaySeconds": 600, "rrule": "FREQ=HOURLY"}


async def test_run_now_answers_202_and_a_keyed_retry_is_replayed(api: Api) -> None:
    tid = await api.created_id(delaySeconds=3600)
    resp = await api.client.post(f"/v1/triggers/{tid}/run", headers=AUTH)
    body = await resp.json()
    assert resp.status == 202, body
    assert body["triggerId"] == body["runTriggerId"] == tid
    assert body["occurrenceId"] == f"{tid}.1"
    got = await (await api.client.get(f"/v1/triggers/{tid}", headers=AUTH)).json()
    assert got["fireAt"] == body["fireAt"]

    series = await api.created_id(**SERIES)
    keyed = {**AUTH, "Idempotency-Key": "run-1"}
    first = await api.client.post(f"/v1/triggers/{series}/run", json={}, headers=keyed)
    again = await api.client.post(f"/v1/triggers/{series}/run", headers=keyed)
    one, two = await first.json(), await again.json()
    assert (first.status, again.status) == (202, 202) and one == two
    assert "Idempotent-Replayed" not in first.headers
    assert again.headers["Idempotent-Replayed"] == "true"
    assert one["runTriggerId"] != series and one["occurrenceId"] == f"{one['runTriggerId']}.1"
    copy = await (await api.client.get(f"/v1/triggers/{one['runTriggerId']}",
                                       headers=AUTH)).json()
    assert copy["snoozedFrom"] == series and copy["rrule"] is None


async def test_run_refuses_a_body_a_finished_trigger_and_an_unknown_id(api: Api) -> None:
    tid = await api.created_id(delaySeconds=3600)
    resp = await api.client.post(f"/v1/triggers/{tid}/run", json={"at": "now"}, headers=AUTH)
    await assert_error(resp, 400, "invalid_request")
    await api.client.delete(f"/v1/triggers/{tid}", headers=AUTH)
    resp = await api.client.post(f"/v1/triggers/{tid}/run", headers=AUTH)
    body = await resp.json()
    assert (resp.status, body["error"], body["status"]) == (409, "not_runnable", "CANCELLED")
    resp = await api.client.post("/v1/triggers/trg_nope/run", headers=AUTH)
    await assert_error(resp, 404, "not_found")


async def test_operators_read_and_run_any_callers_trigger(api: Api) -> None:
    tid = await api.created_id(delaySeconds=3600)
    resp = await api.client.get(f"/v1/ops/triggers/{tid}", headers=VIEWER)
    got = await resp.json()
    assert resp.status == 200 and got["caller"] == "orders"
    assert got["trigger"]["triggerId"] == tid and got["trigger"]["status"] == "PENDING"
    resp = await api.client.get(f"/v1/ops/triggers/{tid}/attempts", headers=VIEWER)
    assert resp.status == 200 and (await resp.json())["items"] == []
    resp = await api.client.post(f"/v1/ops/triggers/{tid}/run", headers=VIEWER)
    await assert_error(resp, 403, "forbidden")
    resp = await api.client.post(f"/v1/ops/triggers/{tid}/run", headers=AUTH)
    await assert_error(resp, 403, "forbidden")
    resp = await api.client.post(f"/v1/ops/triggers/{tid}/run", headers=OPERATOR)
    body = await resp.json()
    assert resp.status == 202 and body["occurrenceId"] == f"{tid}.1"
    resp = await api.client.get("/v1/ops/triggers/trg_nope", headers=OPERATOR)
    await assert_error(resp, 404, "not_found")
