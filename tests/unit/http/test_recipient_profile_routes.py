"""``/v1/recipients`` and triggers naming a recipient over HTTP, on the fakes,
every exchange checked against openapi.yaml: put/get/list/delete, a floating reminder's
``timeZone``/``resolvedTimeZone`` before and after the person moves, a PATCH that keeps the
recipient, and a deletion that fails the reminder with the reason."""

from __future__ import annotations

from tests.unit.app.support import CALLBACK
from tests.unit.http.test_routes import AUTH, OTHER, Api, api, assert_error

__all__ = ["api"]  # the fixture

NY = {"timeZone": "America/New_York", "phone": "+15551234567",
      "quietHours": {"start": "22:00", "end": "07:00"}, "channels": ["sms", "email"],
      "locale": "en-US"}
REMINDER = {"recipient": "ada", "timeZone": "recipient", "localTime": "2023-11-15T09:00",
            "rrule": "FREQ=DAILY", "channels": [{"type": "sms"}],
            "message": {"text": "Standup"}}


async def test_put_get_list_and_delete(api: Api) -> None:
    resp = await api.client.put("/v1/recipients/ada", json=NY, headers=AUTH)
    assert resp.status == 201, await resp.text()
    resp = await api.client.put("/v1/recipients/ada", json=NY, headers=AUTH)
    assert resp.status == 200
    got = await (await api.client.get("/v1/recipients/ada", headers=AUTH)).json()
    assert got["phone"] == "+15551234567" and got["channels"] == ["sms", "email"]
    listed = await (await api.client.get("/v1/recipients?limit=1", headers=AUTH)).json()
    assert [p["recipientId"] for p in listed["items"]] == ["ada"] and listed["nextAfter"] == "ada"
    await assert_error(await api.client.get("/v1/recipients/ada", headers=OTHER), 404,
                       "not_found")  # another caller's person is not there
    resp = await api.client.delete("/v1/recipients/ada", headers=AUTH)
    assert resp.status == 200 and (await resp.json())["triggersFailed"] == 0
    await assert_error(await api.client.get("/v1/recipients/ada", headers=AUTH), 404,
                       "not_found")


async def test_bad_profiles_and_unknown_recipients_are_refused(api: Api) -> None:
    await assert_error(await api.client.put("/v1/recipients/ada", json={"phone": "+1555"},
                                            headers=AUTH), 400, "invalid_request")
    resp = await api.client.put("/v1/recipients/ada", json={
        "timeZone": "UTC", "phone": "+4915112345678"}, headers=AUTH)
    # The caller's sms_country_codes are ["1"].
    assert (resp.status, (await resp.json())["error"]) == (422, "recipient_not_allowed")
    status, body, _ = await api.post({"callbackUrl": CALLBACK, **REMINDER})
    assert (status, body["error"]) == (422, "recipient_not_found")


async def test_a_floating_reminder_shows_its_zones_and_follows_a_move(api: Api) -> None:
    assert (await api.client.put("/v1/recipients/ada", json=NY, headers=AUTH)).status == 201
    status, created, _ = await api.post({"callbackUrl": CALLBACK, **REMINDER})
    assert status == 201, created
    tid = created["triggerId"]
    view = await (await api.client.get(f"/v1/triggers/{tid}", headers=AUTH)).json()
    assert (view["timeZone"], view["resolvedTimeZone"], view["recipient"]) == (
        "recipient", "America/New_York", "ada")
    assert view["fireAt"] == "2023-11-15T14:00:00.000Z"  # 09:00 in New York
    moved = NY | {"timeZone": "Asia/Tokyo"}
    assert (await api.client.put("/v1/recipients/ada", json=moved, headers=AUTH)).status == 200
    view = await (await api.client.get(f"/v1/triggers/{tid}", headers=AUTH)).json()
    assert view["resolvedTimeZone"] == "Asia/Tokyo"
    assert view["fireAt"] == "2023-11-15T00:00:00.000Z"  # 09:00 in Tokyo
    resp = await api.client.patch(f"/v1/triggers/{tid}", json={"payload": {"v": 2}},
                                  headers=AUTH | {"Content-Type": "application/merge-patch+json"})
    assert resp.status == 200, await resp.text()
    view = await (await api.client.get(f"/v1/triggers/{tid}", headers=AUTH)).json()
    assert (view["timeZone"], view["recipient"]) == ("recipient", "ada")
    resp = await api.client.delete("/v1/recipients/ada", headers=AUTH)
    assert (await resp.json())["triggersFailed"] == 1
    view = await (await api.client.get(f"/v1/triggers/{tid}", headers=AUTH)).json()
    assert view["status"] == "FAILED"
    assert view["lastError"] == "recipient_deleted: recipient ada was deleted"


async def test_telegram_channels_and_a_profiles_chat_over_http(api: Api) -> None:
    body = NY | {"telegram": 123456789, "channels": ["telegram", "sms"]}
    resp = await api.client.put("/v1/recipients/ada", json=body, headers=AUTH)
    assert resp.status == 201, await resp.text()
    got = await (await api.client.get("/v1/recipients/ada", headers=AUTH)).json()
    assert (got["telegram"], got["channels"]) == (123456789, ["telegram", "sms"])
    status, created, _ = await api.post({"delaySeconds": 60, "channels": [
        {"type": "telegram", "chatId": "@ada_reminders", "text": "<b>Go</b>",
         "parseMode": "HTML"}]})
    assert status == 201, created
    view = await (await api.client.get(f"/v1/triggers/{created['triggerId']}",
                                       headers=AUTH)).json()
    assert [c["type"] for c in view["channels"]] == ["telegram"]
    status, created, _ = await api.post({**REMINDER, "channels": [{"type": "telegram"}]})
    assert status == 201, created
    status, refused, _ = await api.post({"delaySeconds": 60, "channels": [
        {"type": "telegram", "chatId": 0, "text": "x"}]})
    assert (status, refused["error"]) == (400, "invalid_request")
    assert "chatId" in refused["message"]
