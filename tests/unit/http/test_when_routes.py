"""``when`` over HTTP on the in-memory fakes (every exchange checked against openapi.yaml by
the ``api`` fixture): create and preview echo ``resolved``; ambiguity, refusals and the
equivalence with the fields a phrase stands for."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.app.support import CALLBACK, NOW_MS
from tests.unit.http.test_routes import AUTH, Api, assert_error
from trigger_service.core.time.recurrence import RuleKind
from trigger_service.core.time.timing import parse_rfc3339_ms

NY = "America/New_York"
WEEKDAYS_9 = "FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR;BYHOUR=9;BYMINUTE=0;BYSECOND=0"
# NOW_MS is 2023-11-14T22:13:20Z, a Tuesday: 17:13:20 EST in New York.


async def preview(api: Api, body: dict[str, Any]) -> tuple[int, Any]:
    resp = await api.client.post("/v1/triggers/preview", json=body, headers=AUTH)
    return resp.status, await resp.json()


async def test_a_relative_phrase_creates_an_instant_and_echoes_it(api: Api) -> None:
    status, body, _ = await api.post({"callbackUrl": CALLBACK, "when": "in 2 hours"})
    assert status == 201, body
    assert body["fireAt"] == "2023-11-15T00:13:20.000Z"
    assert body["resolved"] == {"when": "in 2 hours", "fireAt": "2023-11-15T00:13:20.000Z",
                                "rrule": None, "timeZone": None}
    t = api.env.store.triggers[body["triggerId"]]
    assert t.fire_at_ms == NOW_MS + 7_200_000 and t.schedule is None


async def test_a_wall_clock_phrase_creates_a_local_time_in_the_zone(api: Api) -> None:
    status, body, _ = await api.post({"callbackUrl": CALLBACK, "when": "tomorrow at 9am",
                                      "timeZone": NY})
    assert status == 201, body
    assert body["resolved"] == {"when": "tomorrow at 9am", "fireAt": "2023-11-15T14:00:00.000Z",
                                "rrule": None, "timeZone": NY}
    got = await (await api.client.get(f"/v1/triggers/{body['triggerId']}", headers=AUTH)).json()
    assert (got["localTime"], got["timeZone"], got["fireAt"]) == (
        "2023-11-15T09:00:00", NY, "2023-11-15T14:00:00.000Z")


async def test_a_recurring_phrase_is_the_same_series_as_its_rrule(api: Api) -> None:
    status, body, _ = await api.post({"callbackUrl": CALLBACK, "when": "every weekday at 9am",
                                      "timeZone": NY})
    assert status == 201, body
    assert body["resolved"] == {"when": "every weekday at 9am", "rrule": WEEKDAYS_9,
                                "fireAt": "2023-11-15T14:00:00.000Z", "timeZone": NY}
    rec = api.env.store.triggers[body["triggerId"]].schedule
    assert rec is not None and rec.kind is RuleKind.RRULE and rec.rule == WEEKDAYS_9
    assert rec.time_zone == NY and rec.dtstart.isoformat() == "2023-11-15T09:00:00"
    # The same occurrences as the rrule + timeZone sent as fields (DTSTART: the echoed fireAt).
    status, by_words = await preview(api, {"when": "every weekday at 9am", "timeZone": NY,
                                           "count": 6})
    assert status == 200, by_words
    status, by_fields = await preview(api, {"rrule": WEEKDAYS_9, "timeZone": NY, "count": 6,
                                            "fireAt": "2023-11-14T22:13:20Z"})
    assert status == 200, by_fields
    status, by_local = await preview(api, {"rrule": WEEKDAYS_9, "timeZone": NY, "count": 6,
                                           "localTime": "2023-11-15T09:00:00"})
    assert status == 200, by_local
    assert by_words["occurrences"] == by_fields["occurrences"] == by_local["occurrences"] == [
        "2023-11-15T14:00:00.000Z", "2023-11-16T14:00:00.000Z", "2023-11-17T14:00:00.000Z",
        "2023-11-20T14:00:00.000Z", "2023-11-21T14:00:00.000Z", "2023-11-22T14:00:00.000Z"]
    assert by_words["resolved"]["rrule"] == WEEKDAYS_9 and "resolved" not in by_fields


async def test_preview_of_an_interval_rule_needs_no_zone(api: Api) -> None:
    status, body = await preview(api, {"when": "every 15 minutes", "count": 3})
    assert status == 200, body
    assert body == {"occurrences": ["2023-11-14T22:28:00.000Z", "2023-11-14T22:43:00.000Z",
                                    "2023-11-14T22:58:00.000Z"],
                    "resolved": {"when": "every 15 minutes", "fireAt": "2023-11-14T22:28:00.000Z",
                                 "rrule": "FREQ=MINUTELY;INTERVAL=15", "timeZone": None}}


async def test_an_overlap_is_ambiguous_with_both_candidates(api: Api) -> None:
    api.env.clock.set_ms(parse_rfc3339_ms("2024-11-02T16:00:00Z"))  # New York falls back the 3rd
    _, _, resp = await api.post({"callbackUrl": CALLBACK, "when": "tomorrow 1:30am",
                                 "timeZone": NY})
    got = await assert_error(resp, 400, "invalid_request", extras=["candidates"])
    assert got["field"] == "when" and "ambiguous" in got["message"]
    assert got["candidates"] == ["2024-11-03T05:30:00.000Z", "2024-11-03T06:30:00.000Z"]
    # dstPolicy settles it, as for localTime
    status, body, _ = await api.post({"callbackUrl": CALLBACK, "when": "tomorrow 1:30am",
                                      "timeZone": NY, "dstPolicy": {"overlap": "second"}})
    assert status == 201 and body["fireAt"] == "2024-11-03T06:30:00.000Z", body


async def test_a_day_month_date_is_ambiguous_in_preview_too(api: Api) -> None:
    resp = await api.client.post("/v1/triggers/preview", headers=AUTH,
                                 json={"when": "03/04 9am", "timeZone": "UTC"})
    got = await assert_error(resp, 400, "invalid_request", extras=["candidates"])
    assert got["candidates"] == ["2024-03-04T09:00:00.000Z", "2024-04-03T09:00:00.000Z"]


async def test_a_gap_under_skip_is_422_naming_when(api: Api) -> None:
    api.env.clock.set_ms(parse_rfc3339_ms("2024-03-09T17:00:00Z"))  # springs forward the 10th
    _, _, resp = await api.post({"callbackUrl": CALLBACK, "when": "tomorrow at 2:30am",
                                 "timeZone": NY, "dstPolicy": {"gap": "skip"}})
    got = await assert_error(resp, 422, "nonexistent_local_time")
    assert got["field"] == "when"
    status, body, _ = await api.post({"callbackUrl": CALLBACK, "when": "tomorrow at 2:30am",
                                      "timeZone": NY})  # default: shifted to 03:30 EDT
    assert status == 201 and body["fireAt"] == "2024-03-10T07:30:00.000Z", body


async def test_refusals_name_when_or_time_zone(api: Api) -> None:
    cases: list[tuple[dict[str, Any], str, str]] = [
        ({"when": "in 2 hours", "delaySeconds": 5}, "when", "not both"),
        ({"when": "every day at 9am", "rrule": "FREQ=DAILY", "timeZone": NY}, "when", "not both"),
        ({"when": "tomorrow 9am"}, "timeZone", "required"),
        ({"when": "yesterday", "timeZone": NY}, "when", "2023-11-13T22:13:20.000Z"),
        ({"when": "every 30 seconds"}, "when", "TRIGGER_API_MIN_RECURRENCE_INTERVAL_S"),
        ({"when": "december 25 2040 at 9am", "timeZone": NY}, "when", "days ahead"),
        ({"when": "whenever you like", "timeZone": NY}, "when", "cannot read"),
        ({"when": 42}, "when", "phrase"),
        ({"when": "in 2 hours", "dstPolicy": {"gap": "skip"}}, "dstPolicy", "instant"),
        ({"when": "in 2 hours", "timeZone": "Mars/Olympus"}, "timeZone", "unknown"),
    ]
    for extra, field, says in cases:
        _, _, resp = await api.post({"callbackUrl": CALLBACK} | extra)
        code = "fire_at_out_of_range" if "2040" in str(extra) else "invalid_request"
        got = await assert_error(resp, 400, code)
        assert got["field"] == field and says in got["message"], (extra, got)
    assert api.env.store.triggers == {}


async def test_patch_with_when_retimes_like_the_fields_it_stands_for(api: Api) -> None:
    trigger_id = await api.created_id()
    url = f"/v1/triggers/{trigger_id}"
    resp = await api.client.patch(url, json={"when": "in 2 hours"}, headers=AUTH)
    assert resp.status == 200, await resp.json()
    got = await resp.json()
    assert got["fireAt"] == "2023-11-15T00:13:20.000Z" and got["rrule"] is None
    # A recurring phrase, in the zone the patch gives: the same series as create makes.
    resp = await api.client.patch(url, json={"when": "every weekday at 9am",
                                             "timeZone": NY}, headers=AUTH)
    got = await resp.json()
    assert resp.status == 200, got
    assert (got["rrule"], got["timeZone"], got["fireAt"]) == (
        WEEKDAYS_9, NY, "2023-11-15T14:00:00.000Z")
    # Without timeZone a phrase is read in the trigger's zone; rrule and localTime go.
    resp = await api.client.patch(url, json={"when": "tomorrow at 8am"}, headers=AUTH)
    got = await resp.json()
    assert resp.status == 200, got
    assert (got["localTime"], got["timeZone"], got["rrule"], got["fireAt"]) == (
        "2023-11-15T08:00:00", NY, None, "2023-11-15T13:00:00.000Z")
    assert api.env.store.triggers[trigger_id].fire_at_ms == parse_rfc3339_ms(got["fireAt"])


async def test_patch_with_when_names_when_in_its_errors(api: Api) -> None:
    trigger_id = await api.created_id()
    url = f"/v1/triggers/{trigger_id}"
    for patch, says in [({"when": "every 30 seconds"}, "when: read as rrule"),
                        ({"when": "tomorrow 9am"}, "timeZone: required"),
                        ({"when": "in 2 hours", "fireAt": "2030-01-01T00:00:00Z"}, "not both"),
                        ({"when": "every day at 9am for 0 times", "timeZone": NY}, "0 times")]:
        resp = await api.client.patch(url, json=patch, headers=AUTH)
        got = await assert_error(resp, 400, "invalid_request")
        assert says in got["message"], (patch, got)
        assert got["field"] == ("timeZone" if "timeZone:" in says else "when")
    assert api.env.store.triggers[trigger_id].fire_at_ms == NOW_MS + 600_000  # unchanged


async def test_snooze_with_when_is_one_time_in_the_originals_zone(api: Api) -> None:
    status, created, _ = await api.post({"callbackUrl": CALLBACK, "timeZone": NY,
                                         "localTime": "2023-11-15T07:00:00"})
    assert status == 201, created
    trigger_id = created["triggerId"]
    url = f"/v1/triggers/{trigger_id}/snooze"
    resp = await api.client.post(url, json={"when": "in 10 minutes"}, headers=AUTH)
    got = await resp.json()
    assert resp.status == 201, got
    assert got["fireAt"] == "2023-11-14T22:23:20.000Z" and got["snoozedFrom"] == trigger_id
    resp = await api.client.post(url, json={"when": "tomorrow at 9am"}, headers=AUTH)
    got = await resp.json()
    assert resp.status == 201 and got["fireAt"] == "2023-11-15T14:00:00.000Z", got  # New York
    resp = await api.client.post(url, json={"when": "tomorrow at 9am", "timeZone": "UTC"},
                                 headers=AUTH)
    assert (await resp.json())["fireAt"] == "2023-11-15T09:00:00.000Z"
    for body, says in [({"when": "every day at 9am"}, "a snooze is one time"),
                       ({"when": "yesterday"}, "in the past"),
                       ({"when": "in 2 hours", "delaySeconds": 5}, "not both")]:
        resp = await api.client.post(url, json=body, headers=AUTH)
        got = await assert_error(resp, 400, "invalid_request")
        assert got["field"] == "when" and says in got["message"], (body, got)


async def test_a_replay_echoes_the_first_requests_fire_time(api: Api) -> None:
    body = {"callbackUrl": CALLBACK, "when": "in 2 hours"}
    headers = AUTH | {"Idempotency-Key": "k1"}
    _, first, _ = await api.post(body, headers)
    api.env.clock.advance_ms(60_000)
    status, again, resp = await api.post(body, headers)
    assert status == 201 and resp.headers["Idempotent-Replayed"] == "true"
    assert again == first and again["resolved"]["fireAt"] == "2023-11-15T00:13:20.000Z"


async def test_preview_refuses_the_channels_create_would_refuse(api: Api) -> None:
    """Found by the fuzz test: a preview answered 200 to a body whose SMS number create
    answers 400 to (the spec's schema is create's)."""
    body = {"delaySeconds": 0, "channels": [{"type": "sms", "to": "7", "text": "0"}]}
    status, answer = await preview(api, body)
    assert status == 400 and answer["error"] == "invalid_request", answer
    status, _, _ = await api.post(body)
    assert status == 400
    ok = {"delaySeconds": 0, "channels": [{"type": "sms", "to": "+15551234567", "text": "hi"}]}
    status, answer = await preview(api, ok)
    assert status == 200, answer


async def test_preview_of_the_newer_forms(api: Api) -> None:
    """Several times a day, ``for N times`` (exactly N, even asked for more) and ``until``
    (inclusive of its day in the zone), each echoed with its rule."""
    status, body = await preview(api, {"when": "every weekday at 9am and 5pm", "timeZone": NY,
                                       "count": 4})
    assert status == 200, body
    assert body["occurrences"] == [  # 17:13 in New York: today's 17:00 has passed
        "2023-11-15T14:00:00.000Z", "2023-11-15T22:00:00.000Z", "2023-11-16T14:00:00.000Z",
        "2023-11-16T22:00:00.000Z"]
    assert body["resolved"]["rrule"] == (
        "FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR;BYHOUR=9,17;BYMINUTE=0;BYSECOND=0")
    status, body = await preview(api, {"when": "every day at 9am for 3 times", "timeZone": NY,
                                       "count": 10})
    assert status == 200, body
    assert body["occurrences"] == ["2023-11-15T14:00:00.000Z", "2023-11-16T14:00:00.000Z",
                                   "2023-11-17T14:00:00.000Z"]
    status, body = await preview(api, {"when": "every monday at 8:30 until 2023-11-27",
                                       "timeZone": NY, "count": 10})
    assert status == 200, body
    assert body["occurrences"] == ["2023-11-20T13:30:00.000Z", "2023-11-27T13:30:00.000Z"]
    for phrase, says in [("every day at 9am for 0 times", "0 times"),
                         ("every monday at 8:30 until 2023-11-01", "before the start")]:
        resp = await api.client.post("/v1/triggers/preview", headers=AUTH,
                                     json={"when": phrase, "timeZone": NY})
        got = await assert_error(resp, 400, "invalid_request")
        assert got["field"] == "when" and says in got["message"], got


@pytest.mark.parametrize("field", [
    {"maxLatenessSeconds": {"a": []}}, {"expiresAt": "tomorrow"}, {"tags": "a"},
    {"labels": ["a"]}, {"recipient": "a b"}, {"flowControl": {"ratePerSecond": "fast"}}])
async def test_preview_refuses_the_fields_create_would_refuse(api: Api,
                                                              field: dict[str, Any]) -> None:
    """Found by the fuzz test: a preview answered 200 to a ``maxLatenessSeconds`` that was
    an object. Fields a preview computes nothing from are still checked as create checks
    them."""
    body = {"delaySeconds": 0, **field}
    status, answer = await preview(api, body)
    assert status == 400 and answer["error"] == "invalid_request", (field, answer)
    status, _, _ = await api.post({**body, "callbackUrl": CALLBACK})
    assert status == 400, field


async def test_preview_refuses_a_payload_create_would_refuse(api: Api) -> None:
    status, answer = await preview(api, {"delaySeconds": 0, "payload": "x" * 5_000})
    assert status == 413 and answer["error"] == "payload_too_large", answer
