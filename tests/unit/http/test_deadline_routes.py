"""``expiresAt`` and ``maxLatenessSeconds`` over HTTP on the in-memory fakes (every exchange
checked against openapi.yaml): create and GET, the 400s and the 422, PATCH (change, remove),
and a snooze that keeps the lateness but not the expiry."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.app.support import CALLBACK, NOW_MS
from tests.unit.http.test_routes import AUTH, Api, assert_error
from trigger_service.core.time.timing import format_rfc3339_ms

HOUR_MS = 3_600_000
IN_AN_HOUR = {"callbackUrl": CALLBACK, "delaySeconds": 3600}


async def get(api: Api, trigger_id: str) -> dict[str, Any]:
    resp = await api.client.get(f"/v1/triggers/{trigger_id}", headers=AUTH)
    assert resp.status == 200
    return dict(await resp.json())


async def test_create_stores_both_bounds_and_get_shows_them_in_utc(api: Api) -> None:
    status, body, _ = await api.post(IN_AN_HOUR | {"expiresAt": "2023-11-15T00:13:20+01:00",
                                                   "maxLatenessSeconds": 300})
    assert status == 201, body
    got = await get(api, body["triggerId"])
    assert got["expiresAt"] == format_rfc3339_ms(NOW_MS + HOUR_MS) == "2023-11-14T23:13:20.000Z"
    assert got["maxLatenessSeconds"] == 300
    stored = api.env.store.triggers[body["triggerId"]]
    assert (stored.expires_at_ms, stored.max_lateness_s) == (NOW_MS + HOUR_MS, 300)


async def test_without_bounds_get_shows_nulls(api: Api) -> None:
    status, body, _ = await api.post(IN_AN_HOUR)
    assert status == 201
    got = await get(api, body["triggerId"])
    assert (got["expiresAt"], got["maxLatenessSeconds"]) == (None, None)


async def test_expires_at_before_the_first_fire_time_is_422(api: Api) -> None:
    status, body, _ = await api.post(
        IN_AN_HOUR | {"expiresAt": format_rfc3339_ms(NOW_MS + HOUR_MS - 1)})
    assert status == 422, body
    assert body["error"] == "expires_before_fire" and body["field"] == "expiresAt"
    assert "before the first fire time" in body["message"]
    assert api.env.store.triggers == {}


async def test_expires_at_before_a_series_first_occurrence_is_422(api: Api) -> None:
    status, body, _ = await api.post({"callbackUrl": CALLBACK, "when": "every day at 9am",
                                      "timeZone": "UTC", "expiresAt": "2023-11-15T08:59:59Z"})
    assert status == 422 and body["error"] == "expires_before_fire", body


@pytest.mark.parametrize("value", [0, -1, "60", 1.5, True])
async def test_max_lateness_must_be_at_least_one_whole_second(api: Api, value: object) -> None:
    resp = await api.client.post("/v1/triggers", json=IN_AN_HOUR | {"maxLatenessSeconds": value},
                                 headers=AUTH)
    body = await assert_error(resp, 400, "invalid_request")
    assert body["field"] == "maxLatenessSeconds"


@pytest.mark.parametrize("value", ["2023-11-15T00:00:00", "soon", NOW_MS + HOUR_MS])
async def test_expires_at_must_be_an_instant_with_an_offset(api: Api, value: object) -> None:
    resp = await api.client.post("/v1/triggers", json=IN_AN_HOUR | {"expiresAt": value},
                                 headers=AUTH)
    body = await assert_error(resp, 400, "invalid_request")
    assert body["field"] == "expiresAt"


async def test_patch_changes_and_removes_the_bounds(api: Api) -> None:
    status, body, _ = await api.post(IN_AN_HOUR | {"maxLatenessSeconds": 60})
    assert status == 201
    url = f"/v1/triggers/{body['triggerId']}"
    expires = format_rfc3339_ms(NOW_MS + 2 * HOUR_MS)
    resp = await api.client.patch(url, json={"expiresAt": expires}, headers=AUTH)
    got = await resp.json()
    assert resp.status == 200, got
    assert (got["expiresAt"], got["maxLatenessSeconds"]) == (expires, 60)  # the other stays
    resp = await api.client.patch(url, json={"payload": {"x": 1}}, headers=AUTH)
    got = await resp.json()
    assert (got["expiresAt"], got["maxLatenessSeconds"]) == (expires, 60)
    resp = await api.client.patch(url, json={"maxLatenessSeconds": None, "expiresAt": None},
                                  headers=AUTH)
    got = await resp.json()
    assert resp.status == 200 and (got["expiresAt"], got["maxLatenessSeconds"]) == (None, None)
    stored = api.env.store.triggers[body["triggerId"]]
    assert (stored.expires_at_ms, stored.max_lateness_s) == (None, None)


async def test_patch_to_an_expiry_before_the_fire_time_is_422_and_changes_nothing(
        api: Api) -> None:
    status, body, _ = await api.post(IN_AN_HOUR)
    assert status == 201
    url = f"/v1/triggers/{body['triggerId']}"
    resp = await api.client.patch(url, json={"expiresAt": format_rfc3339_ms(NOW_MS)},
                                  headers=AUTH)
    got = await resp.json()
    assert resp.status == 422 and got["error"] == "expires_before_fire", got
    assert api.env.store.triggers[body["triggerId"]].expires_at_ms is None
    resp = await api.client.patch(url, json={"maxLatenessSeconds": 0}, headers=AUTH)
    await assert_error(resp, 400, "invalid_request")


async def test_a_snooze_keeps_the_lateness_not_the_expiry(api: Api) -> None:
    status, body, _ = await api.post(IN_AN_HOUR | {"maxLatenessSeconds": 60,
                                                   "expiresAt": format_rfc3339_ms(
                                                       NOW_MS + HOUR_MS)})
    assert status == 201
    resp = await api.client.post(f"/v1/triggers/{body['triggerId']}/snooze",
                                 json={"delaySeconds": 7200}, headers=AUTH)
    snoozed = await resp.json()
    assert resp.status == 201, snoozed
    got = await get(api, snoozed["triggerId"])
    assert (got["expiresAt"], got["maxLatenessSeconds"]) == (None, 60)
