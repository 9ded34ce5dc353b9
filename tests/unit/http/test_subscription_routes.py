"""``/v1/event-subscriptions`` on the in-memory fakes: create or replace, list, delete, the
failures listing, the URL and event checks, the cap and the caller's scope."""

from __future__ import annotations

from tests.unit.app.support import CALLBACK
from tests.unit.http.test_routes import AUTH, OTHER, Api, assert_error
from trigger_service.core.caller_events import EventType, FailedEvent

PATH = "/v1/event-subscriptions"
BODY = {"url": CALLBACK, "events": ["trigger.dead_lettered", "endpoint.disabled"]}


async def test_put_creates_then_replaces_and_list_shows_the_callers_own(api: Api) -> None:
    resp = await api.client.put(f"{PATH}/ops-alerts", json=BODY, headers=AUTH)
    assert resp.status == 201, await resp.text()
    assert await resp.json() == {"name": "ops-alerts", "url": CALLBACK,
                                 "events": ["endpoint.disabled", "trigger.dead_lettered"]}
    resp = await api.client.put(f"{PATH}/ops-alerts", headers=AUTH,
                                json={"url": CALLBACK, "events": ["trigger.fired"] * 2})
    assert resp.status == 200 and (await resp.json())["events"] == ["trigger.fired"]
    listed = await (await api.client.get(PATH, headers=AUTH)).json()
    assert [s["name"] for s in listed["items"]] == ["ops-alerts"]
    assert await (await api.client.get(PATH, headers=OTHER)).json() == {"items": []}


async def test_unknown_event_names_are_400_naming_events(api: Api) -> None:
    for events in (["trigger.exploded"], [], "trigger.fired", [1]):
        resp = await api.client.put(f"{PATH}/x", headers=AUTH,
                                    json={"url": CALLBACK, "events": events})
        body = await assert_error(resp, 400, "invalid_request")
        assert body["field"] == "events", body


async def test_the_url_must_be_under_a_callback_prefix(api: Api) -> None:
    resp = await api.client.put(f"{PATH}/x", headers=AUTH,
                                json={"url": "https://evil.example/hook",
                                      "events": ["trigger.failed"]})
    body = await assert_error(resp, 422, "callback_not_allowed")
    assert body["message"].startswith("url: ")
    resp = await api.client.put(f"{PATH}/x", headers=AUTH, json={"events": ["trigger.failed"]})
    assert (await assert_error(resp, 400, "invalid_request"))["field"] == "url"


async def test_a_bad_name_or_an_unknown_field_is_400(api: Api) -> None:
    resp = await api.client.put(f"{PATH}/{'n' * 65}", json=BODY, headers=AUTH)
    assert (await assert_error(resp, 400, "invalid_request"))["field"] == "name"
    resp = await api.client.put(f"{PATH}/a%20b", json=BODY, headers=AUTH)
    await assert_error(resp, 400, "invalid_request")
    resp = await api.client.put(f"{PATH}/x", json=BODY | {"secret": "s"}, headers=AUTH)
    assert (await assert_error(resp, 400, "invalid_request"))["field"] == "secret"


async def test_past_the_cap_a_new_subscription_is_409(api: Api) -> None:
    cap = api.runtime.settings.events.max_subscriptions
    for i in range(cap):
        assert (await api.client.put(f"{PATH}/s{i}", json=BODY, headers=AUTH)).status == 201
    resp = await api.client.put(f"{PATH}/one-more", json=BODY, headers=AUTH)
    await assert_error(resp, 409, "too_many_subscriptions")
    # Replacing one is not a new one; another caller has its own cap.
    assert (await api.client.put(f"{PATH}/s0", json=BODY, headers=AUTH)).status == 200
    assert (await api.client.put(f"{PATH}/s0", json=BODY, headers=OTHER)).status == 201


async def test_delete_and_failures_are_the_callers_own(api: Api) -> None:
    assert (await api.client.put(f"{PATH}/mine", json=BODY, headers=AUTH)).status == 201
    await api.runtime.subscriptions.put_failed_event(FailedEvent(
        "orders", "mine", "evt_1", EventType.TRIGGER_DEAD_LETTERED, 1_700_000_000_000,
        1_700_000_100_000, 8, "HTTP 500", '{"triggerId":"trg_1"}'), 3600)
    failures = await (await api.client.get(f"{PATH}/mine/failures", headers=AUTH)).json()
    assert failures == {"items": [{
        "eventId": "evt_1", "type": "trigger.dead_lettered", "at": "2023-11-14T22:13:20.000Z",
        "failedAt": "2023-11-14T22:15:00.000Z", "attempts": 8, "lastError": "HTTP 500",
        "data": {"triggerId": "trg_1"}}]}
    await assert_error(await api.client.get(f"{PATH}/mine/failures", headers=OTHER),
                       404, "not_found")
    await assert_error(await api.client.delete(f"{PATH}/mine", headers=OTHER), 404, "not_found")
    resp = await api.client.delete(f"{PATH}/mine", headers=AUTH)
    assert resp.status == 200 and await resp.json() == {"name": "mine", "deleted": True}
    await assert_error(await api.client.delete(f"{PATH}/mine", headers=AUTH), 404, "not_found")
