"""``GET /v1/triggers/{id}/attempts`` on the in-memory fakes: shape, newest first, paging,
the bound, scope and bad queries."""

from __future__ import annotations

from tests.unit.http.test_routes import AUTH, OTHER, Api, assert_error
from trigger_service.core.dead_letters import Attempt, AttemptOutcome
from trigger_service.core.recent_attempts import attempt_number

KEPT = 100  # the default TRIGGER_ATTEMPTS_KEPT


async def record(api: Api, tid: str, n: int, outcome: AttemptOutcome,
                 channel: str = "webhook") -> None:
    await api.env.store.record_attempt(Attempt(
        tid, f"{tid}.1", n, 1_700_000_000_000 + n * 1_000, 12, 503 if n < 3 else 200,
        "HTTP 503" if n < 3 else None, None, "d1", outcome=outcome, channel=channel,
        number=attempt_number(0, n, KEPT)), 3_600, kept=KEPT)


def url(tid: str) -> str:
    return f"/v1/triggers/{tid}/attempts"


async def test_attempts_newest_first_with_every_field_and_paging(api: Api) -> None:
    tid = await api.created_id()
    for n, outcome in [(1, AttemptOutcome.RETRY), (2, AttemptOutcome.RETRY),
                       (3, AttemptOutcome.DELIVERED)]:
        await record(api, tid, n, outcome)
    resp = await api.client.get(url(tid), headers=AUTH, params={"limit": "2"})
    body = await resp.json()
    assert resp.status == 200, body
    assert body["items"][0] == {
        "occurrenceId": f"{tid}.1", "attempt": 3, "channel": "webhook",
        "startedAt": "2023-11-14T22:13:23.000Z", "durationMs": 12, "outcome": "delivered",
        "statusCode": 200, "error": None}
    assert [i["outcome"] for i in body["items"]] == ["delivered", "retry"]
    more = await (await api.client.get(url(tid), headers=AUTH, params={
        "limit": "2", "cursor": body["nextCursor"]})).json()
    assert [(i["attempt"], i["error"]) for i in more["items"]] == [(1, "HTTP 503")]
    assert more["nextCursor"] is None


async def test_a_trigger_without_attempts_lists_none(api: Api) -> None:
    tid = await api.created_id()
    body = await (await api.client.get(url(tid), headers=AUTH)).json()
    assert body == {"items": [], "nextCursor": None}


async def test_another_callers_trigger_is_not_found_like_an_unknown_one(api: Api) -> None:
    tid = await api.created_id()
    await record(api, tid, 1, AttemptOutcome.DELIVERED)
    theirs = await assert_error(await api.client.get(url(tid), headers=OTHER), 404, "not_found")
    unknown = await assert_error(await api.client.get(url("trg_nope"), headers=AUTH),
                                 404, "not_found")
    single = await assert_error(await api.client.get(f"/v1/triggers/{tid}", headers=OTHER),
                                404, "not_found")
    assert set(theirs) == set(unknown) == set(single)


async def test_bad_limits_and_cursors_are_invalid_requests(api: Api) -> None:
    tid = await api.created_id()
    for params, field in [({"limit": "0"}, "limit"), ({"limit": str(KEPT + 1)}, "limit"),
                          ({"limit": "ten"}, "limit"), ({"cursor": "garbage"}, "cursor"),
                          ({"color": "red"}, "color")]:
        resp = await api.client.get(url(tid), headers=AUTH, params=params)
        assert (await assert_error(resp, 400, "invalid_request"))["field"] == field
    resp = await api.client.get(url(tid), headers=AUTH, params={"limit": str(KEPT)})
    assert resp.status == 200
