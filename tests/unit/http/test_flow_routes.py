"""``flowControl`` over HTTP on the in-memory fakes (every exchange checked against
openapi.yaml): create, GET, batch items, PATCH (replace, remove) and every refusal naming
its field."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.http.test_batch_routes import post_batch
from tests.unit.http.test_routes import AUTH, BODY, Api, assert_error
from trigger_service.core.flow import FlowControl

FLOW = {"key": "partner-a", "ratePerSecond": 0.5, "parallelism": 3}


async def get(api: Api, trigger_id: str) -> dict[str, Any]:
    resp = await api.client.get(f"/v1/triggers/{trigger_id}", headers=AUTH)
    assert resp.status == 200
    return dict(await resp.json())


async def test_create_stores_it_and_get_shows_it(api: Api) -> None:
    tid = await api.created_id(flowControl=FLOW)
    assert (await get(api, tid))["flowControl"] == FLOW
    assert api.env.store.triggers[tid].flow_control == FlowControl("partner-a", 0.5, 3)


async def test_either_bound_alone_is_enough_and_the_other_shows_null(api: Api) -> None:
    tid = await api.created_id(flowControl={"key": "k", "parallelism": 2})
    assert (await get(api, tid))["flowControl"] == {"key": "k", "ratePerSecond": None,
                                                    "parallelism": 2}
    tid = await api.created_id(flowControl={"key": "k", "ratePerSecond": 100})
    assert api.env.store.triggers[tid].flow_control == FlowControl("k", 100.0, None)


@pytest.mark.parametrize(("flow", "field"), [
    ({"key": "k"}, "flowControl"),
    ("k", "flowControl"),
    ({"ratePerSecond": 1}, "flowControl.key"),
    ({"key": "", "ratePerSecond": 1}, "flowControl.key"),
    ({"key": "x" * 201, "ratePerSecond": 1}, "flowControl.key"),
    ({"key": "with space", "ratePerSecond": 1}, "flowControl.key"),
    ({"key": "k", "ratePerSecond": 0}, "flowControl.ratePerSecond"),
    ({"key": "k", "ratePerSecond": -1}, "flowControl.ratePerSecond"),
    ({"key": "k", "ratePerSecond": 10_001}, "flowControl.ratePerSecond"),
    ({"key": "k", "ratePerSecond": "5"}, "flowControl.ratePerSecond"),
    ({"key": "k", "parallelism": 0}, "flowControl.parallelism"),
    ({"key": "k", "parallelism": 1.5}, "flowControl.parallelism"),
    ({"key": "k", "parallelism": True}, "flowControl.parallelism"),
    ({"key": "k", "parallelism": 1, "burst": 3}, "flowControl.burst"),
])
async def test_a_bad_one_is_400_naming_the_field(api: Api, flow: object, field: str) -> None:
    resp = await api.client.post("/v1/triggers", json=BODY | {"flowControl": flow},
                                 headers=AUTH)
    body = await assert_error(resp, 400, "invalid_request")
    assert body["field"] == field


async def test_batch_items_take_it_each_on_its_own(api: Api) -> None:
    status, body = await post_batch(api, [
        BODY | {"flowControl": FLOW}, BODY | {"flowControl": {"key": "k"}}, BODY])
    assert status == 200
    answers = body["items"]
    assert [a["status"] for a in answers] == [201, 400, 201]
    assert answers[1]["field"] == "flowControl"
    assert api.env.store.triggers[answers[0]["triggerId"]].flow_control == FlowControl(
        "partner-a", 0.5, 3)
    assert api.env.store.triggers[answers[2]["triggerId"]].flow_control is None


async def test_patch_replaces_it_keeps_it_and_removes_it(api: Api) -> None:
    tid = await api.created_id(flowControl=FLOW)
    url = f"/v1/triggers/{tid}"
    resp = await api.client.patch(url, json={"flowControl": {"key": "b", "parallelism": 1}},
                                  headers=AUTH)
    assert resp.status == 200, await resp.json()
    assert (await resp.json())["flowControl"] == {"key": "b", "ratePerSecond": None,
                                                  "parallelism": 1}
    resp = await api.client.patch(url, json={"payload": {"x": 1}}, headers=AUTH)
    assert (await resp.json())["flowControl"]["key"] == "b"  # another field's patch keeps it
    resp = await api.client.patch(url, json={"flowControl": {"key": "b"}}, headers=AUTH)
    assert (await assert_error(resp, 400, "invalid_request"))["field"] == "flowControl"
    resp = await api.client.patch(url, json={"flowControl": None}, headers=AUTH)
    assert resp.status == 200 and (await resp.json())["flowControl"] is None
    assert api.env.store.triggers[tid].flow_control is None
