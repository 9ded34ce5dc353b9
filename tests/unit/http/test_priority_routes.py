"""``priority`` over HTTP on the in-memory fakes (every exchange checked against
openapi.yaml): create, GET and listings, batch items, PATCH (alone, removed), snooze, the
request hash of a keyed retry, and every refusal naming the field."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.http.test_batch_routes import post_batch
from tests.unit.http.test_routes import AUTH, BODY, Api, assert_error
from trigger_service.core.model import Priority


async def get(api: Api, trigger_id: str) -> dict[str, Any]:
    resp = await api.client.get(f"/v1/triggers/{trigger_id}", headers=AUTH)
    assert resp.status == 200
    return dict(await resp.json())


async def test_without_one_a_trigger_is_normal_and_shows_it(api: Api) -> None:
    tid = await api.created_id()
    assert (await get(api, tid))["priority"] == "normal"
    assert api.env.store.triggers[tid].priority is Priority.NORMAL
    tid = await api.created_id(priority=None)
    assert api.env.store.triggers[tid].priority is Priority.NORMAL


@pytest.mark.parametrize("name", ["high", "normal", "low"])
async def test_create_stores_it_and_get_and_the_listing_show_it(api: Api, name: str) -> None:
    tid = await api.created_id(priority=name)
    assert api.env.store.triggers[tid].priority is Priority(name)
    assert (await get(api, tid))["priority"] == name
    resp = await api.client.get("/v1/triggers", headers=AUTH)
    items = (await resp.json())["items"]
    assert [i["priority"] for i in items if i["triggerId"] == tid] == [name]


@pytest.mark.parametrize("value", ["HIGH", "High", "urgent", "", " high", 0, 1, True,
                                   ["high"], {"level": "high"}])
async def test_a_bad_one_is_refused_naming_the_field(api: Api, value: object) -> None:
    resp = await api.client.post("/v1/triggers", json=BODY | {"priority": value},
                                 headers=AUTH)
    body = await assert_error(resp, 400, "invalid_request")
    assert body["field"] == "priority"
    assert body["message"] == 'priority: "high", "normal" or "low"'
    assert api.env.store.triggers == {}


async def test_batch_items_take_it_each_on_its_own(api: Api) -> None:
    status, body = await post_batch(api, [
        BODY | {"priority": "high"}, BODY | {"priority": "urgent"}, BODY,
        BODY | {"priority": "low"}])
    assert status == 200
    answers = body["items"]
    assert [a["status"] for a in answers] == [201, 400, 201, 201]
    assert answers[1]["field"] == "priority"
    stored = [api.env.store.triggers[answers[i]["triggerId"]].priority for i in (0, 2, 3)]
    assert stored == [Priority.HIGH, Priority.NORMAL, Priority.LOW]


async def test_patch_of_the_priority_alone_is_an_edit(api: Api) -> None:
    tid = await api.created_id(priority="high")
    before = api.env.store.triggers[tid]
    url = f"/v1/triggers/{tid}"
    resp = await api.client.patch(url, json={"priority": "low"}, headers=AUTH)
    assert resp.status == 200, await resp.json()
    assert (await resp.json())["priority"] == "low"
    after = api.env.store.triggers[tid]
    assert after.priority is Priority.LOW
    assert after.revision == (before.revision or 0) + 1  # the edit's conditional write
    assert (after.fire_at_ms, after.payload_json) == (before.fire_at_ms, before.payload_json)
    resp = await api.client.patch(url, json={"payload": {"x": 1}}, headers=AUTH)
    assert (await resp.json())["priority"] == "low"  # another field's patch keeps it
    resp = await api.client.patch(url, json={"priority": "top"}, headers=AUTH)
    assert (await assert_error(resp, 400, "invalid_request"))[
        "field"] == "priority"
    resp = await api.client.patch(url, json={"priority": None}, headers=AUTH)
    assert resp.status == 200 and (await resp.json())["priority"] == "normal"
    assert api.env.store.triggers[tid].priority is Priority.NORMAL


async def test_a_finished_trigger_cannot_change_its_priority(api: Api) -> None:
    tid = await api.created_id(priority="high")
    await api.client.delete(f"/v1/triggers/{tid}", headers=AUTH)
    resp = await api.client.patch(f"/v1/triggers/{tid}", json={"priority": "low"},
                                  headers=AUTH)
    await assert_error(resp, 409, "not_editable", extras=["status"])
    assert api.env.store.triggers[tid].priority is Priority.HIGH


async def test_a_keyed_retry_with_another_priority_is_a_reused_key(api: Api) -> None:
    key = AUTH | {"Idempotency-Key": "prio-1"}
    s1, b1, _ = await api.post(BODY | {"priority": "high"}, key)
    s2, b2, r2 = await api.post(BODY | {"priority": "high"}, key)
    assert s1 == s2 == 201 and b1 == b2 and r2.headers["Idempotent-Replayed"] == "true"
    _, _, r3 = await api.post(BODY | {"priority": "low"}, key)
    await assert_error(r3, 422, "idempotency_key_reused")
    assert api.env.store.triggers[b1["triggerId"]].priority is Priority.HIGH


async def test_a_snooze_keeps_the_priority(api: Api) -> None:
    tid = await api.created_id(priority="low")
    resp = await api.client.post(f"/v1/triggers/{tid}/snooze", json={"delaySeconds": 60},
                                 headers=AUTH)
    assert resp.status == 201, await resp.json()
    copy = (await resp.json())["triggerId"]
    assert api.env.store.triggers[copy].priority is Priority.LOW
    assert (await get(api, copy))["priority"] == "low"


async def test_a_preview_refuses_what_create_refuses(api: Api) -> None:
    resp = await api.client.post("/v1/triggers/preview",
                                 json={"delaySeconds": 60, "priority": "urgent"}, headers=AUTH)
    assert (await assert_error(resp, 400, "invalid_request"))[
        "field"] == "priority"
    resp = await api.client.post("/v1/triggers/preview",
                                 json={"delaySeconds": 60, "priority": "high"}, headers=AUTH)
    assert resp.status == 200


async def test_a_new_priority_sends_the_queued_message_again_to_its_lane(api: Api) -> None:
    tid = await api.created_id(delaySeconds=60)  # direct: its message is on the queue
    assert [(m.trigger_id, m.priority) for m in api.env.queue.sent] == [(tid, Priority.NORMAL)]
    resp = await api.client.patch(f"/v1/triggers/{tid}", json={"priority": "high"},
                                  headers=AUTH)
    assert resp.status == 200
    await api.env.service.drain()
    assert [(m.trigger_id, m.priority) for m in api.env.queue.sent] == [
        (tid, Priority.NORMAL), (tid, Priority.HIGH)]
    resp = await api.client.patch(f"/v1/triggers/{tid}", json={"payload": {"x": 1}},
                                  headers=AUTH)
    await api.env.service.drain()
    assert len(api.env.queue.sent) == 2  # the priority is unchanged: nothing is sent


async def test_a_new_priority_of_a_far_trigger_waits_for_the_sweeper(api: Api) -> None:
    tid = await api.created_id(delaySeconds=3 * 3600)
    resp = await api.client.patch(f"/v1/triggers/{tid}", json={"priority": "high"},
                                  headers=AUTH)
    assert resp.status == 200
    await api.env.service.drain()
    assert api.env.queue.sent == []  # the sweeper sends it, to the high lane, when due
