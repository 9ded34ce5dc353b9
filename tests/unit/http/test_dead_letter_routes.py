"""``/v1/dead-letters`` on the in-memory fakes: shapes, filters, scope, roles, errors."""

from __future__ import annotations

import asyncio

from tests.unit.app.test_dead_letters import dead
from tests.unit.http.test_routes import (
    AUTH,
    OPERATOR,
    OTHER,
    VIEWER,
    Api,
    assert_error,
)
from trigger_service.app.dead_letters import MAX_OPEN_JOBS
from trigger_service.core.dead_letters import DeadLetterQuery, DeadLetterReason, JobItem, ReplayJob
from trigger_service.core.model import Status
from trigger_service.core.time.timing import format_rfc3339_ms

LIST = "/v1/dead-letters"


async def test_list_shape_newest_first_and_paging(api: Api) -> None:
    a, b = await dead(api.env, n=1), await dead(api.env, n=2)
    resp = await api.client.get(LIST, headers=AUTH, params={"limit": "1"})
    body = await resp.json()
    assert resp.status == 200, body
    assert [i["id"] for i in body["items"]] == [b.id] and body["nextCursor"]
    assert set(body["items"][0]) == {"id", "triggerId", "occurrenceId", "caller", "reason",
                                     "lastError", "attemptCount", "deadAt", "fireAt",
                                     "callbackUrl"}
    more = await (await api.client.get(LIST, headers=AUTH, params={
        "limit": "1", "cursor": body["nextCursor"]})).json()
    assert [i["id"] for i in more["items"]] == [a.id]


async def test_filters_scope_and_bad_values(api: Api) -> None:
    gone = await dead(api.env, n=1, reason=DeadLetterReason.GONE)
    await dead(api.env, n=2)
    await dead(api.env, "billing", n=3)
    body = await (await api.client.get(LIST, headers=AUTH, params={"reason": "gone"})).json()
    assert [i["id"] for i in body["items"]] == [gone.id]
    assert len((await (await api.client.get(LIST, headers=AUTH)).json())["items"]) == 2
    everyone = await (await api.client.get(LIST, headers=VIEWER)).json()
    assert len(everyone["items"]) == 3
    only = await (await api.client.get(LIST, headers=OPERATOR,
                                       params={"caller": "billing"})).json()
    assert [i["caller"] for i in only["items"]] == ["billing"]
    for params, field in [({"reason": "nope"}, "reason"), ({"since": "yesterday"}, "since"),
                          ({"cursor": "garbage"}, "cursor"), ({"limit": "0"}, "limit"),
                          ({"caller": "billing"}, "caller"), ({"color": "red"}, "color"),
                          ({"since": "2030-01-01T00:00:00Z"}, "since")]:
        resp = await api.client.get(LIST, headers=AUTH, params=params)
        assert (await assert_error(resp, 400, "invalid_request"))["field"] == field


async def test_detail_replay_purge_and_roles(api: Api) -> None:
    d = await dead(api.env)
    resp = await api.client.get(f"{LIST}/{d.id}", headers=AUTH)
    body = await resp.json()
    assert resp.status == 200 and body["payload"] == {"n": 0} and body["attempts"] == []
    assert body["state"] == "open" and body["triggerStatus"] == "FAILED"
    await assert_error(await api.client.get(f"{LIST}/{d.id}", headers=OTHER), 404, "not_found")
    await assert_error(await api.client.get(f"{LIST}/x'--", headers=AUTH), 404, "not_found")
    await assert_error(await api.client.post(f"{LIST}/{d.id}/replay", headers=VIEWER),
                       403, "forbidden")
    await assert_error(await api.client.post(f"{LIST}/{d.id}/replay", headers=AUTH,
                                             json={"fireAt": 5}), 400, "invalid_request")
    resp = await api.client.post(f"{LIST}/{d.id}/replay", headers=OPERATOR)
    body = await resp.json()
    assert resp.status == 202 and body["status"] == "PENDING" and body["triggerId"] == d.trigger_id
    assert api.env.store.triggers[d.trigger_id].status is Status.PENDING
    await assert_error(await api.client.post(f"{LIST}/{d.id}/replay", headers=AUTH),
                       409, "already_replayed")
    other = await dead(api.env, n=5)
    await assert_error(await api.client.delete(f"{LIST}/{other.id}", headers=VIEWER),
                       403, "forbidden")
    resp = await api.client.delete(f"{LIST}/{other.id}", headers=AUTH)
    assert resp.status == 200 and (await resp.json()) == {"id": other.id, "purged": True}
    assert (await (await api.client.get(LIST, headers=AUTH)).json())["items"] == []


async def test_bulk_replay_job(api: Api) -> None:
    for n in range(3):
        await dead(api.env, n=n)
    await assert_error(await api.client.post(f"{LIST}/replay", headers=AUTH,
                                             json={"reason": "bogus"}), 400, "invalid_request")
    resp = await api.client.post(f"{LIST}/replay", headers=AUTH, json={"reason": "max_attempts"})
    job = await resp.json()
    assert resp.status == 202 and job["total"] == 3 and job["filters"]["caller"] == "orders"
    now_ms = api.env.clock.now_ms()  # filters left out are echoed as the window they span
    assert (job["filters"]["since"], job["filters"]["until"]) == (
        format_rfc3339_ms(now_ms - api.env.settings.retention_s * 1000),
        format_rfc3339_ms(now_ms))
    for _ in range(50):
        await asyncio.sleep(0)
    resp = await api.client.get(f"{LIST}/replay/{job['jobId']}", headers=AUTH)
    progress = await resp.json()
    assert (progress["status"], progress["done"], progress["failed"]) == ("done", 3, 0)
    await assert_error(await api.client.get(f"{LIST}/replay/{job['jobId']}", headers=OTHER),
                       404, "not_found")


async def test_empty_filters_are_filters_left_out_and_the_contract_says_so(api: Api) -> None:
    # Found by the fuzzer: `reason=` and friends are answered like no filter; the `api`
    # fixture checks each exchange against openapi.yaml, which now says that too.
    for params in ({"reason": "", "since": "", "until": "", "callbackPrefix": "", "cursor": ""},
                   {"reason": ""}):
        resp = await api.client.get(LIST, headers=OPERATOR, params=params | {"caller": ""})
        assert resp.status == 200, await resp.text()
    await dead(api.env)  # something to replay: an empty job is refused
    resp = await api.client.post(LIST + "/replay", headers=OPERATOR, json={"reason": ""})
    assert resp.status == 202, await resp.text()


async def test_bulk_replay_of_nothing_is_422_and_past_the_cap_429(api: Api) -> None:
    # The `api` fixture checks both answers against openapi.yaml.
    resp = await api.client.post(f"{LIST}/replay", headers=AUTH, json={})
    body = await assert_error(resp, 422, "nothing_to_replay")
    assert "no open dead letter matches" in body["message"]
    assert api.env.store.jobs == {}
    d = await dead(api.env)
    for n in range(MAX_OPEN_JOBS):  # unfinished jobs over orders' letters, made elsewhere
        await api.env.store.create_job(ReplayJob(f"job_{n}", DeadLetterQuery(
            "orders", 0, d.dead_at_ms), 0, 1), [JobItem(d.id, d.dead_at_ms)], 60)
    resp = await api.client.post(f"{LIST}/replay", headers=AUTH, json={})
    body = await assert_error(resp, 429, "quota_exceeded")
    assert "unfinished" in body["message"] and "Retry-After" not in resp.headers
    assert len(api.env.store.jobs) == MAX_OPEN_JOBS
    resp = await api.client.post(f"{LIST}/replay", headers=OPERATOR, json={})
    assert resp.status == 202, await resp.text()  # the operators' jobs count apart
