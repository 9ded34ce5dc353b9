"""Tags, labels, filtered listings and jobs over triggers by filter, through the
HTTP API on the in-memory fakes (every exchange checked against openapi.yaml)."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.unit.http.test_routes import AUTH, BODY, OTHER, Api, assert_error
from trigger_service.core.errors import StoreError
from trigger_service.core.model import Status
from trigger_service.core.trigger_jobs import MAX_OPEN_TRIGGER_JOBS


async def listed(api: Api, query: str, headers: dict[str, str] = AUTH) -> list[str]:
    """Every id the filtered listing returns, following the cursor to the end."""
    ids: list[str] = []
    cursor = ""
    for _ in range(100):
        resp = await api.client.get(f"/v1/triggers?{query}{cursor}", headers=headers)
        body = await resp.json()
        assert resp.status == 200, body
        ids += [t["triggerId"] for t in body["items"]]
        if body["nextCursor"] is None:
            return ids
        cursor = f"&cursor={body['nextCursor']}"
    raise AssertionError("the listing never ended")


async def job_done(api: Api, job_id: str, headers: dict[str, str] = AUTH) -> dict[str, Any]:
    for _ in range(1000):
        resp = await api.client.get(f"/v1/triggers/jobs/{job_id}", headers=headers)
        body = await resp.json()
        assert resp.status == 200, body
        if body["state"] == "done":
            return dict(body)
        await asyncio.sleep(0)
    raise AssertionError("the job never finished")


async def test_tags_and_labels_are_stored_and_shown(api: Api) -> None:
    tid = await api.created_id(tags=["campaign-42", "eu"], labels={"team": "growth"})
    got = await (await api.client.get(f"/v1/triggers/{tid}", headers=AUTH)).json()
    assert got["tags"] == ["campaign-42", "eu"] and got["labels"] == {"team": "growth"}
    page = await (await api.client.get("/v1/triggers", headers=AUTH)).json()
    assert page["items"][0]["tags"] == ["campaign-42", "eu"]


async def test_bad_tags_and_labels_are_400_naming_the_field(api: Api) -> None:
    for extra in ({"tags": ["a b"]}, {"tags": [f"t{i}" for i in range(11)]},
                  {"labels": {"k": 5}}, {"labels": {f"k{i}": "v" for i in range(11)}}):
        _, _, resp = await api.post(BODY | extra)
        body = await assert_error(resp, 400, "invalid_request")
        assert body["field"] in ("tags", "labels")


async def test_the_listing_filters_by_tag_label_and_status_combined(api: Api) -> None:
    a = await api.created_id(tags=["a"], labels={"team": "x"})
    b = await api.created_id(tags=["a"], labels={"team": "y"})
    c = await api.created_id(tags=["b"], labels={"team": "x"})
    await api.created_id()
    api.env.clock.advance_ms(1)
    assert await listed(api, "tag=a") == [b, a]  # newest first
    assert await listed(api, "label=team:x") == [c, a]
    assert await listed(api, "tag=a&label=team:x") == [a]
    await api.client.delete(f"/v1/triggers/{b}", headers=AUTH)
    assert await listed(api, "tag=a&status=cancelled") == [b]
    assert await listed(api, "tag=a&status=PENDING") == [a]
    assert await listed(api, "tag=nothing") == []
    assert await listed(api, "recipient=r1") == []  # no trigger names a recipient yet
    assert await listed(api, "tag=a", headers=OTHER) == []  # another caller's are not its


async def test_a_filtered_listing_pages_to_the_end_with_a_small_page(api: Api) -> None:
    made = [await api.created_id(tags=["many"] if i % 3 else ["few"]) for i in range(30)]
    want = [tid for i, tid in enumerate(made) if i % 3][::-1]
    assert await listed(api, "tag=many&limit=4") == want


async def test_a_page_reads_a_bounded_number_of_entries_and_goes_on_by_cursor(api: Api) -> None:
    api.env.store.list_max_rows = 5
    made = [await api.created_id(tags=["t"]) for _ in range(12)]
    for tid in made[1:]:
        await api.client.delete(f"/v1/triggers/{tid}", headers=AUTH)
    first = await (await api.client.get("/v1/triggers?tag=t&status=PENDING",
                                        headers=AUTH)).json()
    assert first["items"] == [] and first["nextCursor"] is not None  # short, with a cursor
    assert await listed(api, "tag=t&status=PENDING") == [made[0]]


async def test_bad_filters_are_400(api: Api) -> None:
    for query in ("tag=a%20b", "label=novalue", "status=sleeping", "colour=red"):
        resp = await api.client.get(f"/v1/triggers?{query}", headers=AUTH)
        await assert_error(resp, 400, "invalid_request")


async def test_patch_changes_the_tags_and_the_listing_follows(api: Api) -> None:
    tid = await api.created_id(tags=["old"], labels={"k": "v"})
    resp = await api.client.patch(f"/v1/triggers/{tid}", json={"tags": ["new"]}, headers=AUTH)
    assert resp.status == 200, await resp.json()
    got = await (await api.client.get(f"/v1/triggers/{tid}", headers=AUTH)).json()
    assert got["tags"] == ["new"] and got["labels"] == {"k": "v"}  # labels kept
    assert await listed(api, "tag=old") == []
    assert await listed(api, "tag=new") == [tid]


async def test_a_cancel_job_cancels_every_match_and_reports_its_progress(api: Api) -> None:
    tagged = [await api.created_id(tags=["promo"]) for _ in range(25)]
    other = await api.created_id(tags=["keep"])
    await api.client.delete(f"/v1/triggers/{tagged[0]}", headers=AUTH)  # finished: no item
    resp = await api.client.post("/v1/triggers/jobs", headers=AUTH,
                                 json={"action": "cancel", "filter": {"tag": "promo"}})
    started = await resp.json()
    assert resp.status == 202, started
    assert started["matched"] == 24 and started["filter"] == {"tag": "promo"}
    done = await job_done(api, started["jobId"])
    assert (done["matched"], done["done"], done["failed"]) == (24, 24, 0)
    states = {tid: t.status if (t := await api.env.store.get(tid)) else None
              for tid in [*tagged, other]}
    assert states == {tid: Status.CANCELLED for tid in tagged} | {other: Status.PENDING}
    resp = await api.client.get(f"/v1/triggers/jobs/{started['jobId']}", headers=OTHER)
    await assert_error(resp, 404, "not_found")


async def test_a_job_matching_nothing_is_done_at_once(api: Api) -> None:
    resp = await api.client.post("/v1/triggers/jobs", headers=AUTH,
                                 json={"action": "cancel", "filter": {"label": "k:v"}})
    job = await resp.json()
    assert resp.status == 202 and job["matched"] == 0
    assert (await job_done(api, job["jobId"]))["done"] == 0


async def test_bad_job_requests_are_400(api: Api) -> None:
    for body in ({"action": "pause", "filter": {"tag": "a"}, "policy": "all"},
                 {"action": "resume", "filter": {"tag": "a"}, "policy": "sometimes"},
                 {"action": "explode", "filter": {"tag": "a"}},
                 {"action": "cancel", "filter": {"status": "PENDING"}},
                 {"action": "cancel", "filter": {"tag": "a", "colour": "red"}},
                 {"action": "cancel", "filter": {"tag": "a"}, "policy": "all"},
                 {"action": "cancel"}, [1]):
        resp = await api.client.post("/v1/triggers/jobs", json=body, headers=AUTH)
        await assert_error(resp, 400, "invalid_request")


async def test_open_jobs_per_caller_are_capped(api: Api) -> None:
    await api.created_id(tags=["a"])
    # No runner can take a lease: every job stays unfinished.
    api.env.store.failures["claim_trigger_job"] = StoreError("down")
    for _ in range(MAX_OPEN_TRIGGER_JOBS):
        resp = await api.client.post("/v1/triggers/jobs", headers=AUTH,
                                     json={"action": "cancel", "filter": {"tag": "a"}})
        assert resp.status == 202
    resp = await api.client.post("/v1/triggers/jobs", headers=AUTH,
                                 json={"action": "cancel", "filter": {"tag": "a"}})
    await assert_error(resp, 429, "quota_exceeded")
    resp = await api.client.post("/v1/triggers/jobs", headers=OTHER,
                                 json={"action": "cancel", "filter": {"tag": "a"}})
    assert resp.status == 202  # another caller's quota
