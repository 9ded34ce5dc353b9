"""``jitterSeconds`` over HTTP on the in-memory fakes (every exchange checked against
openapi.yaml): create, GET's ``scheduledAt``, PATCH, preview's windows, the bound, and a
snooze that stays exact."""

from __future__ import annotations

from typing import Any

from tests.unit.app.support import CALLBACK, NOW_MS
from tests.unit.http.test_routes import AUTH, Api, assert_error
from trigger_service.core.time.jitter import jitter_offset_ms
from trigger_service.core.time.timing import format_rfc3339_ms, parse_rfc3339_ms

HOUR_MS = 3_600_000


async def get(api: Api, trigger_id: str) -> dict[str, Any]:
    resp = await api.client.get(f"/v1/triggers/{trigger_id}", headers=AUTH)
    assert resp.status == 200
    return dict(await resp.json())


async def test_create_fires_within_the_window_and_get_shows_the_scheduled_instant(
        api: Api) -> None:
    status, body, _ = await api.post({"callbackUrl": CALLBACK, "delaySeconds": 3600,
                                      "jitterSeconds": 1800})
    assert status == 201, body
    tid = body["triggerId"]
    offset = jitter_offset_ms(f"{tid}.1", 1800)
    assert body["fireAt"] == format_rfc3339_ms(NOW_MS + HOUR_MS + offset)
    got = await get(api, tid)
    assert got["jitterSeconds"] == 1800
    assert got["scheduledAt"] == format_rfc3339_ms(NOW_MS + HOUR_MS)
    assert got["fireAt"] == got["nextFireAt"] == body["fireAt"]
    stored = api.env.store.triggers[tid]
    assert stored.fire_at_ms == NOW_MS + HOUR_MS + offset and stored.jitter_s == 1800


async def test_patch_changes_the_window_around_the_same_scheduled_instant(api: Api) -> None:
    status, body, _ = await api.post({"callbackUrl": CALLBACK, "delaySeconds": 3600,
                                      "jitterSeconds": 1800})
    assert status == 201, body
    tid = body["triggerId"]
    url = f"/v1/triggers/{tid}"
    resp = await api.client.patch(url, json={"jitterSeconds": 60}, headers=AUTH)
    got = await resp.json()
    assert resp.status == 200, got
    assert got["scheduledAt"] == format_rfc3339_ms(NOW_MS + HOUR_MS)
    assert got["fireAt"] == format_rfc3339_ms(NOW_MS + HOUR_MS + jitter_offset_ms(f"{tid}.1", 60))
    # A payload edit keeps the time; null removes the jitter.
    resp = await api.client.patch(url, json={"payload": {"x": 1}}, headers=AUTH)
    assert (await resp.json())["fireAt"] == got["fireAt"]
    resp = await api.client.patch(url, json={"jitterSeconds": None}, headers=AUTH)
    got = await resp.json()
    assert (got["jitterSeconds"], got["fireAt"]) == (0, format_rfc3339_ms(NOW_MS + HOUR_MS))
    # A series gets it too, its occurrence jittered from the same scheduled one.
    resp = await api.client.patch(url, json={"when": "every day at 9am", "timeZone": "UTC",
                                             "jitterSeconds": 600}, headers=AUTH)
    got = await resp.json()
    assert resp.status == 200, got
    assert got["scheduledAt"] == "2023-11-15T09:00:00.000Z"
    assert 0 <= parse_rfc3339_ms(got["fireAt"]) - parse_rfc3339_ms(got["scheduledAt"]) <= 600_000


async def test_the_window_is_bounded_by_the_setting_and_shaped(api: Api) -> None:
    for value in (3601, -1, 1.5, "60", True):
        _, _, resp = await api.post({"callbackUrl": CALLBACK, "delaySeconds": 60,
                                     "jitterSeconds": value})
        got = await assert_error(resp, 400, "invalid_request")
        assert got["field"] == "jitterSeconds", (value, got)
        resp = await api.client.post("/v1/triggers/preview", headers=AUTH,
                                     json={"delaySeconds": 60, "jitterSeconds": value})
        assert (await assert_error(resp, 400, "invalid_request"))["field"] == "jitterSeconds"
    _, _, resp = await api.post({"callbackUrl": CALLBACK, "delaySeconds": 60,
                                 "jitterSeconds": 3601})
    assert "0 to 3600 (TRIGGER_API_MAX_JITTER_S)" in (await resp.json())["message"]
    status, _, _ = await api.post({"callbackUrl": CALLBACK, "delaySeconds": 60,
                                   "jitterSeconds": 3600})
    assert status == 201


async def test_preview_shows_windows_and_with_a_key_the_instants_create_makes(
        api: Api) -> None:
    body = {"when": "every hour", "jitterSeconds": 600, "count": 3}
    resp = await api.client.post("/v1/triggers/preview", json=body, headers=AUTH)
    plain = await resp.json()
    assert resp.status == 200, plain
    assert [j["scheduledAt"] for j in plain["jittered"]] == plain["occurrences"]
    assert [j["fireAt"] for j in plain["jittered"]] == [None] * 3
    assert plain["jittered"][0]["latestAt"] == format_rfc3339_ms(
        parse_rfc3339_ms(plain["occurrences"][0]) + 600_000)
    keyed = AUTH | {"Idempotency-Key": "jitter-1"}
    resp = await api.client.post("/v1/triggers/preview", json=body, headers=keyed)
    shown = (await resp.json())["jittered"]
    status, created, _ = await api.post({"callbackUrl": CALLBACK, "when": "every hour",
                                         "jitterSeconds": 600}, keyed)
    assert status == 201, created
    assert shown[0]["fireAt"] == created["fireAt"]
    stored = api.env.store.triggers[created["triggerId"]]
    for n, item in enumerate(shown, start=1):
        assert item["fireAt"] == format_rfc3339_ms(parse_rfc3339_ms(item["scheduledAt"])
                                                   + jitter_offset_ms(f"{stored.trigger_id}.{n}",
                                                                      600))


async def test_a_snooze_is_exact_even_of_a_jittered_trigger(api: Api) -> None:
    status, body, _ = await api.post({"callbackUrl": CALLBACK, "delaySeconds": 60,
                                      "jitterSeconds": 3600})
    assert status == 201
    resp = await api.client.post(f"/v1/triggers/{body['triggerId']}/snooze",
                                 json={"delaySeconds": 600}, headers=AUTH)
    got = await resp.json()
    assert resp.status == 201 and got["fireAt"] == format_rfc3339_ms(NOW_MS + 600_000), got
    assert api.env.store.triggers[got["triggerId"]].jitter_s == 0
    resp = await api.client.post(f"/v1/triggers/{body['triggerId']}/snooze",
                                 json={"delaySeconds": 600, "jitterSeconds": 5}, headers=AUTH)
    await assert_error(resp, 400, "invalid_request")


async def test_resolved_is_the_scheduled_first_time_and_fire_at_adds_the_jitter(
        api: Api) -> None:
    body = {"callbackUrl": CALLBACK, "when": "in 2 hours", "jitterSeconds": 900}
    status, first, _ = await api.post(body, AUTH | {"Idempotency-Key": "j-when"})
    assert status == 201, first
    assert first["resolved"]["fireAt"] == format_rfc3339_ms(NOW_MS + 2 * HOUR_MS)
    offset = jitter_offset_ms(f"{first['triggerId']}.1", 900)
    assert first["fireAt"] == format_rfc3339_ms(NOW_MS + 2 * HOUR_MS + offset)
    api.env.clock.advance_ms(60_000)  # a replay answers the first request's times
    _, again, _ = await api.post(body, AUTH | {"Idempotency-Key": "j-when"})
    assert again == first
