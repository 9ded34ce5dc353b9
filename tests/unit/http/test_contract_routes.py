"""One call to each operation the other HTTP unit modules do not reach (preview, merge patch,
snooze, acknowledgements by token and by link, signing-secret rotation), so that every
operation of ``openapi.yaml`` is checked against the app on the fakes too (the ``api``
fixture validates each exchange); the behaviour itself is tested in
tests/integration/test_reminders.py, test_channels.py and test_delivery.py."""

from __future__ import annotations

from dataclasses import replace

from tests.unit.app.support import CALLBACK, NOW_MS
from tests.unit.http.test_routes import AUTH, BODY, MS_Z, Api, assert_error
from trigger_service.core.errors import StoreError
from trigger_service.core.notify.ack_links import make_token

INBOX = {"channels": [{"type": "inbox", "recipient": "ada", "title": "Standup",
                       "body": "In 5 minutes", "data": {"room": 4}}],
         "escalation": {"steps": [{"afterSeconds": 0, "channel": 0}]},
         "quietHours": {"start": "22:00", "end": "07:00", "timeZone": "Europe/Berlin"}}


async def test_preview_lists_the_occurrences(api: Api) -> None:
    resp = await api.client.post("/v1/triggers/preview", headers=AUTH, json={
        "localTime": "2027-03-13T02:30:00", "timeZone": "America/New_York",
        "rrule": "FREQ=DAILY", "dstPolicy": {"gap": "skip"}, "count": 3})
    body = await resp.json()
    assert resp.status == 200, body
    assert body == {"occurrences": ["2027-03-13T07:30:00.000Z", "2027-03-15T06:30:00.000Z",
                                    "2027-03-16T06:30:00.000Z"]}


async def test_merge_patch_and_its_media_types(api: Api) -> None:
    tid = await api.created_id()
    resp = await api.client.patch(
        f"/v1/triggers/{tid}", data=b'{"payload": {"n": 2}, "cron": "0 9 * * 1-5", '
        b'"timeZone": "Europe/Berlin", "delaySeconds": null, "localTime": "2023-11-20T09:00"}',
        headers=AUTH | {"Content-Type": "application/merge-patch+json"})
    body = await resp.json()
    assert resp.status == 200, body
    assert body["payload"] == {"n": 2} and body["cron"] == "0 9 * * 1-5"
    resp = await api.client.patch(f"/v1/triggers/{tid}", data=b"{}",
                                  headers=AUTH | {"Content-Type": "text/plain"})
    await assert_error(resp, 415, "unsupported_media_type")


async def test_snooze_makes_a_new_one_time_trigger(api: Api) -> None:
    tid = await api.created_id()
    resp = await api.client.post(f"/v1/triggers/{tid}/snooze", json={"delaySeconds": 60},
                                 headers=AUTH | {"Idempotency-Key": "s1"})
    body = await resp.json()
    assert resp.status == 201, body
    assert body["snoozedFrom"] == tid and MS_Z.match(body["fireAt"])
    again = await api.client.post(f"/v1/triggers/{tid}/snooze", json={"delaySeconds": 60},
                                  headers=AUTH | {"Idempotency-Key": "s1"})
    assert again.status == 201 and again.headers["Idempotent-Replayed"] == "true"


async def test_ack_by_token_and_by_link(api: Api) -> None:
    tid = await api.created_id(callbackUrl=CALLBACK, **INBOX)
    got = await (await api.client.get(f"/v1/triggers/{tid}", headers=AUTH)).json()
    assert got["channels"][0]["type"] == "inbox" and got["acknowledged"] is False
    resp = await api.client.post(f"/v1/triggers/{tid}/ack", headers=AUTH)
    assert resp.status == 200
    assert await resp.json() == {"triggerId": tid, "acknowledged": True, "status": "PENDING"}
    resp = await api.client.post(f"/v1/triggers/{tid}/ack", headers=AUTH,
                                 json={"occurrenceId": f"{tid}.1"})
    assert resp.status == 200
    secret = api.runtime.settings.api.ack_secret
    token = make_token(secret, tid, 0, NOW_MS + 86_400_000)
    for method in ("GET", "POST"):
        resp = await api.client.request(method, f"/ack/{token}")
        assert resp.status == 200 and resp.content_type == "text/html"
    resp = await api.client.get("/ack/not-a-token")
    assert resp.status == 400 and resp.content_type == "text/html"
    resp = await api.client.post(f"/v1/triggers/{await api.created_id()}/ack", headers=AUTH)
    await assert_error(resp, 409, "not_editable", extras=["status"])
    # Cassandra down: the link's page is the API's JSON 503, not a page (as documented).
    api.env.store.failures["get"] = StoreError("down")
    await assert_error(await api.client.post(f"/ack/{token}"), 503, "dependency_unavailable")


async def test_an_ack_link_survives_a_key_rotation_until_its_key_is_dropped(api: Api) -> None:
    tid = await api.created_id(callbackUrl=CALLBACK, **INBOX)
    settings = api.runtime.settings
    old, new = settings.api.ack_secret, "n" * 40
    sent = make_token(old, tid, 0, NOW_MS + 86_400_000)  # in an email before the rotation
    api.runtime.settings = replace(settings, api=replace(
        settings.api, ack_secret=new, ack_previous_secrets=(old,)))
    for token in (sent, make_token(new, tid, 0, NOW_MS + 86_400_000)):
        resp = await api.client.get(f"/ack/{token}")
        assert resp.status == 200, await resp.text()
    api.runtime.settings = replace(settings, api=replace(settings.api, ack_secret=new))
    assert (await api.client.get(f"/ack/{sent}")).status == 400  # the old key dropped


async def test_rotating_the_signing_secret_shows_it_once(api: Api) -> None:
    resp = await api.client.post("/v1/signing-secrets/rotate", headers=AUTH)
    body = await resp.json()
    assert resp.status == 201, body
    assert body["secret"].startswith("whsec_") and resp.headers["Cache-Control"] == "no-store"


async def test_the_fourth_rotation_answers_429_with_retry_after(api: Api) -> None:
    for _ in range(3):
        resp = await api.client.post("/v1/signing-secrets/rotate", headers=AUTH)
        assert resp.status == 201, await resp.text()
    resp = await api.client.post("/v1/signing-secrets/rotate", headers=AUTH)
    body = await assert_error(resp, 429, "rate_limited")
    assert "rotations per minute" in body["message"]
    assert 1 <= int(resp.headers["Retry-After"]) <= 20


async def test_a_series_with_every_time_and_channel_field_is_accepted(api: Api) -> None:
    body = {k: v for k, v in BODY.items() if k != "delaySeconds"} | INBOX | {
        "localTime": "2023-11-20T09:00:00", "timeZone": "Europe/Berlin",
        "rrule": "RRULE:FREQ=WEEKLY;BYDAY=MO", "dstPolicy": {"gap": "shift", "overlap": "both"},
        "exdates": ["2023-11-27T09:00:00"]}
    status, created, _ = await api.post(body)
    assert status == 201, created
    got = await (await api.client.get(f"/v1/triggers/{created['triggerId']}",
                                      headers=AUTH)).json()
    assert got["rrule"] == "RRULE:FREQ=WEEKLY;BYDAY=MO" or got["rrule"].endswith("BYDAY=MO")
    assert got["exdates"] == ["2023-11-27T09:00:00"]
