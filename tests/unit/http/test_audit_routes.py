"""The audit log through the API on in-memory fakes: an entry per mutating request (refusals
with their code), a caller's own listing, the operators' listing, paging and creates."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from tests.unit.app.support import make_env
from tests.unit.http.test_routes import AUTH, OPERATOR, OTHER, VIEWER, Api, memory_runtime, serving
from trigger_service.config.audit import AuditSettings
from trigger_service.http.audit import AUDITED
from trigger_service.http.routes.audit import AUDIT_KEY

RECIPIENT = {"timeZone": "America/New_York", "phone": "+15551234567"}


async def _entries(api: Api, path: str, headers: dict[str, str],
                   **query: str) -> list[dict[str, Any]]:
    app = api.client.app
    assert isinstance(app, web.Application)
    await app[AUDIT_KEY].drain()
    resp = await api.client.get(path, params=query, headers=headers)
    body = await resp.json()
    assert resp.status == 200, body
    return list(body["items"])


async def _step(api: Api, method: str, path: str, headers: dict[str, str] = AUTH,
                json: object = None) -> int:
    api.env.clock.advance_ms(10)  # one entry a millisecond: their order is the requests'
    resp = await api.client.request(method, path, headers=headers, json=json)
    return resp.status


async def test_each_mutation_is_an_entry_of_its_caller_newest_first(api: Api) -> None:
    tid = await api.created_id(delaySeconds=3600)
    steps = [("POST", f"/v1/triggers/{tid}/pause", None), ("POST", f"/v1/triggers/{tid}/resume",
             {}), ("PATCH", f"/v1/triggers/{tid}", {"payload": {"v": 2}}),
             ("POST", f"/v1/triggers/{tid}/run", None), ("DELETE", f"/v1/triggers/{tid}", None),
             ("POST", f"/v1/triggers/{tid}/pause", None),
             ("POST", "/v1/signing-secrets/rotate", None),
             ("PUT", "/v1/recipients/ada", RECIPIENT), ("DELETE", "/v1/recipients/ada", None)]
    statuses = [await _step(api, m, p, json=j) for m, p, j in steps]
    assert statuses[-4] == 409  # a pause after the cancel
    items = await _entries(api, "/v1/audit", AUTH)
    assert [(e["action"], e["target"], e["outcome"]) for e in reversed(items)] == [
        ("pause", tid, "ok"), ("resume", tid, "ok"), ("patch", tid, "ok"), ("run", tid, "ok"),
        ("cancel", tid, "ok"), ("pause", tid, "not_editable"),
        ("rotate_secret", "orders", "ok"), ("recipient_put", "ada", "ok"),
        ("recipient_delete", "ada", "ok")]
    assert {e["actor"] for e in items} == {"orders"}
    assert all(len(e["requestId"]) == 16 and e["at"].endswith("Z") for e in items)
    assert await _entries(api, "/v1/audit", OTHER) == []  # another caller sees none
    mine = await _entries(api, "/v1/audit", AUTH, action="pause")
    assert [e["outcome"] for e in mine] == ["not_editable", "ok"]


async def test_the_request_id_is_the_answers(api: Api) -> None:
    tid = await api.created_id()
    resp = await api.client.delete(f"/v1/triggers/{tid}", headers=AUTH)
    [entry] = await _entries(api, "/v1/audit", AUTH)
    assert entry["requestId"] == resp.headers["X-Request-Id"]


async def test_operators_see_every_entry_and_their_own_by_name(api: Api) -> None:
    tid = await api.created_id()
    assert await _step(api, "DELETE", f"/v1/triggers/{tid}") == 200
    assert await _step(api, "POST", "/v1/ops/callers/billing/pause", OPERATOR) == 200
    assert await _step(api, "POST", "/v1/ops/callers/billing/pause", VIEWER) == 403
    every = await _entries(api, "/v1/ops/audit", VIEWER)
    assert [(e["actor"], e["action"], e["target"], e["outcome"]) for e in every] == [
        ("bob", "caller_pause", "billing", "forbidden"), ("alice", "caller_pause", "billing", "ok"),
        ("orders", "cancel", tid, "ok")]
    only = await _entries(api, "/v1/ops/audit", OPERATOR, actor="alice")
    assert [e["action"] for e in only] == ["caller_pause"]
    # The operators' actions are not in any caller's own listing.
    assert [e["action"] for e in await _entries(api, "/v1/audit", AUTH)] == ["cancel"]
    assert [e["action"] for e in await _entries(api, "/v1/audit", OTHER)] == []
    resp = await api.client.get("/v1/ops/audit", headers=AUTH)
    assert (resp.status, (await resp.json())["error"]) == (403, "forbidden")


async def test_pages_go_on_with_the_cursor_without_repeats(api: Api) -> None:
    tids = [await api.created_id() for _ in range(5)]
    for tid in tids:
        await _step(api, "DELETE", f"/v1/triggers/{tid}")
    seen: list[str] = []
    cursor = ""
    for _ in range(5):
        app = api.client.app
        assert isinstance(app, web.Application)
        await app[AUDIT_KEY].drain()
        resp = await api.client.get("/v1/audit", params={"limit": "2", "cursor": cursor},
                                    headers=AUTH)
        body = await resp.json()
        seen += [e["target"] for e in body["items"]]
        if body["nextCursor"] is None:
            break
        cursor = body["nextCursor"]
    assert seen == tids[::-1]


async def test_bad_queries_are_400(api: Api) -> None:
    for query in ({"action": "explode"}, {"since": "yesterday"}, {"cursor": "nope"},
                  {"actor": "alice"}):
        resp = await api.client.get("/v1/audit", params=query, headers=AUTH)
        assert (resp.status, (await resp.json())["error"]) == (400, "invalid_request"), query


async def test_creates_are_counted_not_logged_unless_asked(api: Api) -> None:
    await api.created_id()
    assert await _entries(api, "/v1/audit", AUTH) == []
    assert api.env.metrics.snapshot().get("audit_creates_total") == 1


async def test_creates_are_logged_with_the_setting() -> None:
    env = make_env()
    settings = env.settings.__class__(**{**env.settings.__dict__,
                                         "audit": AuditSettings(creates=True)})
    async with serving(env, memory_runtime(env, settings)) as api:
        tid = await api.created_id()
        [entry] = await _entries(api, "/v1/audit", AUTH)
        assert (entry["action"], entry["target"], entry["outcome"]) == ("create", tid, "ok")


async def test_a_failed_write_is_counted_and_the_answer_unchanged(api: Api) -> None:
    from trigger_service.core.errors import StoreError
    tid = await api.created_id()
    api.env.store.failures["append_audit"] = StoreError("down")
    assert await _step(api, "DELETE", f"/v1/triggers/{tid}") == 200
    del api.env.store.failures["append_audit"]
    assert await _entries(api, "/v1/audit", AUTH) == []
    assert api.env.metrics.snapshot().get('audit_write_failures_total{reason="error"}') == 1


async def test_a_job_by_filter_and_a_bulk_replay_are_one_entry_each(api: Api) -> None:
    await api.created_id(tags=["promo"])
    resp = await api.client.post("/v1/triggers/jobs", headers=AUTH,
                                 json={"action": "pause", "filter": {"tag": "promo"}})
    job = (await resp.json())["jobId"]
    api.env.clock.advance_ms(10)
    resp = await api.client.post("/v1/dead-letters/replay", headers=AUTH, json={})
    refused = await resp.json()  # nothing to replay: the refusal is the entry
    api.env.clock.advance_ms(10)
    resp = await api.client.post("/v1/triggers/jobs", headers=AUTH,
                                 json={"action": "explode", "filter": {"tag": "promo"}})
    assert resp.status == 400  # no action to record: not an entry
    items = await _entries(api, "/v1/audit", AUTH)
    assert [(e["action"], e["target"], e["outcome"]) for e in items] == [
        ("replay", "", refused["error"]), ("pause", job, "ok")]


# Mutating routes that are not the audit log's actions, each for a stated reason.
NOT_AUDITED = {
    ("POST", "/v1/triggers/preview"): "computes, stores nothing",
    ("POST", "/v1/triggers/{id}/ack"): "a recipient's acknowledgement, not an admin action",
    ("POST", "/ack/{token}"): "a recipient's signed link",
    ("POST", "/v1/inbox/{recipient}/{message_id}/read"): "a recipient's inbox",
    ("DELETE", "/v1/inbox/{recipient}/{message_id}"): "a recipient's inbox",
}


async def test_every_mutating_route_is_audited_or_says_why_not(api: Api) -> None:
    mutating = {(r.method, r.resource.canonical) for r in api.client.app.router.routes()
                if r.method in ("POST", "PUT", "PATCH", "DELETE") and r.resource is not None}
    missing = sorted(mutating - set(AUDITED) - set(NOT_AUDITED))
    assert missing == []
    assert set(AUDITED) <= mutating  # no entry for a route that does not exist
