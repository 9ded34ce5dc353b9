"""The HTTP contract (the one tests/integration/test_api.py checks against real services) on
in-memory fakes and a manual clock: bodies, status codes, headers and the error shape."""

from __future__ import annotations

import math
import re
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from typing import Any

import pytest
from aiohttp import ClientResponse, web
from aiohttp.test_utils import TestClient

from tests.api_server import ApiTestServer
from tests.fake_runtime import fake_runtime
from tests.openapi_check import check_contract
from tests.unit.app.support import CALLBACK, NOW_MS, Env, make_env
from trigger_service.adapters.memory.store import MemoryLease
from trigger_service.app import cpu_shares
from trigger_service.config.callers import CallerRegistry, hash_token
from trigger_service.config.settings import Settings
from trigger_service.core.errors import CacheError, QueueError, StoreError
from trigger_service.core.model import Status, new_trigger_id
from trigger_service.http import parsing
from trigger_service.http.app import build_app
from trigger_service.platform.wiring import Runtime

CALLERS = CallerRegistry.from_mapping({"callers": {
    "orders": {"token_sha256": hash_token("tok"),
               "callback_prefixes": ["http://127.0.0.1:9000/"],
               "email_domains": ["example.com", "*.example.org"], "sms_country_codes": ["1"],
               "telegram_chats": [123456789, "@ada_reminders"]},
    "billing": {"token_sha256": hash_token("tok2"),
                "callback_prefixes": ["http://127.0.0.1:9000/"]},
}, "ops": {
    "alice": {"token_sha256": hash_token("op-tok"), "role": "operator"},
    "bob": {"token_sha256": hash_token("view-tok"), "role": "viewer"},
}})
OPERATOR = {"Authorization": "Bearer op-tok"}
VIEWER = {"Authorization": "Bearer view-tok"}
AUTH = {"Authorization": "Bearer tok"}
JSON = {"Content-Type": "application/json"}
OTHER = {"Authorization": "Bearer tok2"}
BODY: dict[str, Any] = {"callbackUrl": CALLBACK, "payload": {"k": [1, "é"]}, "delaySeconds": 600}
MS_Z = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")

Client = TestClient[web.Request, web.Application]


@dataclass
class Api:
    env: Env
    runtime: Runtime
    client: Client

    async def post(self, body: object, headers: dict[str, str] | None = None,
                   ) -> tuple[int, Any, ClientResponse]:
        resp = await self.client.post("/v1/triggers", json=body, headers=headers or AUTH)
        return resp.status, await resp.json(), resp

    async def created_id(self, **changes: object) -> str:
        status, body, _ = await self.post(BODY | changes)
        assert status == 201, body
        return str(body["triggerId"])


@asynccontextmanager
async def serving(env: Env, runtime: Runtime) -> AsyncIterator[Api]:
    """The API of ``runtime`` and ``env``'s service on a test server, every exchange checked
    against openapi.yaml (at the end)."""
    app = build_app(runtime, env.service)
    contract = check_contract(app)
    client: Client = TestClient(ApiTestServer(app))
    await client.start_server()
    try:
        yield Api(env, runtime, client)
    finally:
        await client.close()
    contract.assert_clean()


def memory_runtime(env: Env, settings: Settings | None = None) -> Runtime:
    """The route tests' runtime on ``env``'s fakes (``settings``: ``env``'s unless given)."""
    return fake_runtime(settings or env.settings, CALLERS, env.store, env.queue, env.cache,
                        MemoryLease(env.clock, 10_000), env.clock, env.metrics,
                        pings={"cassandra": env.store, "sqs": env.queue, "redis": env.cache})


def counted_parses(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """The bodies ``parsing.parse_register`` reads from now on (it is wrapped to note each).
    Counted in this process, so no caller is made costly (``app/cpu_shares.py`` would send
    its sections to the worker process, where the wrapper is not): on a slow machine the
    first parse (dateparser's warm-up) can cost more than ``COSTLY_MS`` by itself."""
    monkeypatch.setattr(cpu_shares, "COSTLY_MS", math.inf)
    parsed: list[object] = []
    parse = parsing.parse_register

    def counting(body: Any, **kwargs: Any) -> Any:
        parsed.append(body)
        return parse(body, **kwargs)

    monkeypatch.setattr(parsing, "parse_register", counting)
    return parsed


@pytest.fixture
async def api() -> AsyncIterator[Api]:
    env = make_env()
    async with serving(env, memory_runtime(env)) as served:
        yield served


async def assert_error(resp: ClientResponse, status: int, code: str,
                       extras: Iterable[str] = ()) -> dict[str, Any]:
    """The one error shape: exactly error + message (+ documented extras: ``field`` on every
    400 and 422 about a field), as JSON."""
    body = await resp.json()
    assert resp.status == status, body
    assert resp.content_type == "application/json"
    if code in ("invalid_request", "fire_at_out_of_range", "nonexistent_local_time"):
        extras = [*extras, "field"]
    assert set(body) == {"error", "message", *extras}
    assert body["error"] == code
    assert isinstance(body["message"], str) and body["message"]
    return dict(body)


# --- register ---------------------------------------------------------------------------
async def test_register_answers_201_with_id_fire_time_and_status(api: Api) -> None:
    status, body, resp = await api.post(BODY | {"delaySeconds": 600.25})
    assert status == 201
    assert set(body) == {"triggerId", "fireAt", "nextFireAt", "status"}
    assert body["status"] == "PENDING" and body["triggerId"].startswith("trg_")
    assert MS_Z.match(body["fireAt"]) and body["fireAt"] == "2023-11-14T22:23:20.250Z"
    assert "Idempotent-Replayed" not in resp.headers
    t = api.env.store.triggers[body["triggerId"]]
    assert t.caller == "orders" and t.fire_at_ms == NOW_MS + 600_250
    assert [m.trigger_id for m in api.env.queue.sent] == [t.trigger_id]


async def test_fire_at_with_an_offset_is_answered_in_utc(api: Api) -> None:
    status, body, _ = await api.post({"callbackUrl": CALLBACK,
                                      "fireAt": "2023-11-15T00:00:00.25+01:00"})
    assert status == 201 and body["fireAt"] == "2023-11-14T23:00:00.250Z"
    assert api.env.queue.sent == []  # 46 minutes ahead: the sweeper's


async def test_get_shows_the_whole_trigger(api: Api) -> None:
    tid = await api.created_id()
    resp = await api.client.get(f"/v1/triggers/{tid}", headers=AUTH)
    got = await resp.json()
    assert resp.status == 200
    assert got == {"triggerId": tid, "status": "PENDING", "fireAt": "2023-11-14T22:23:20.000Z",
                   "createdAt": "2023-11-14T22:13:20.000Z", "attempts": 0, "lastError": None,
                   "firedAt": None, "callbackUrl": CALLBACK, "payload": {"k": [1, "é"]},
                   "timeZone": None, "localTime": None, "rrule": None, "cron": None,
                   "dstPolicy": None, "exdates": None, "catchUp": None,
                   "nextFireAt": "2023-11-14T22:23:20.000Z",
                   "occurrencesFired": 0, "snoozedFrom": None,
                   "channels": None, "acknowledged": None, "jitterSeconds": 0,
                   "scheduledAt": "2023-11-14T22:23:20.000Z", "tags": [], "labels": {},
                   "recipient": None, "resolvedTimeZone": None, "expiresAt": None,
                   "maxLatenessSeconds": None, "flowControl": None, "priority": "normal"}


async def test_idempotent_replay_header_and_key_reuse(api: Api) -> None:
    key = {"Idempotency-Key": "k1"}
    s1, b1, r1 = await api.post(BODY, AUTH | key)
    api.env.clock.advance_ms(1_000)
    s2, b2, r2 = await api.post(BODY, AUTH | key)
    assert s1 == s2 == 201 and b1 == b2
    assert "Idempotent-Replayed" not in r1.headers
    assert r2.headers["Idempotent-Replayed"] == "true"
    _, _, r3 = await api.post(BODY | {"delaySeconds": 601}, AUTH | key)
    await assert_error(r3, 422, "idempotency_key_reused")
    assert list(api.env.store.triggers) == [b1["triggerId"]]


async def test_queue_failure_still_answers_201_and_is_counted(api: Api) -> None:
    api.env.queue.failures["send"] = QueueError("sqs down")
    status, body, _ = await api.post(BODY)
    assert status == 201
    assert api.env.store.triggers[body["triggerId"]].status is Status.PENDING
    assert api.env.metrics.snapshot()["enqueue_failures_total"] == 1


# --- errors -----------------------------------------------------------------------------
async def test_missing_or_unknown_token_is_401_everywhere_under_v1(api: Api) -> None:
    tid = await api.created_id()
    for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": "tok"},
                    {"Authorization": "Basic tok"}, {"Authorization": "Bearer "}):
        resp = await api.client.post("/v1/triggers", json=BODY, headers=headers)
        await assert_error(resp, 401, "unauthorized")
    for method, path in (("GET", "/v1/triggers"), ("GET", f"/v1/triggers/{tid}"),
                         ("DELETE", f"/v1/triggers/{tid}"), ("GET", "/v1/nope")):
        resp = await api.client.request(method, path)
        await assert_error(resp, 401, "unauthorized")
    assert list(api.env.store.triggers) == [tid]
    assert api.env.store.triggers[tid].status is Status.PENDING


@pytest.mark.parametrize("content_type", [
    "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
    "application/jsonx", "text/json"])
async def test_a_body_that_says_it_is_not_json_is_415(api: Api, content_type: str) -> None:
    # found by the fuzzer: text and multipart bodies that parsed as JSON were accepted
    body = b'{"callbackUrl": "http://127.0.0.1:9000/cb", "delaySeconds": 1}'
    resp = await api.client.post("/v1/triggers", data=body,
                                 headers=AUTH | {"Content-Type": content_type})
    await assert_error(resp, 415, "unsupported_media_type")
    assert api.env.store.triggers == {}


@pytest.mark.parametrize("content_type", [
    "application/json", "application/json; charset=utf-8",
    "Application/JSON"])
async def test_json_media_types_are_read(api: Api, content_type: str) -> None:
    body = b'{"callbackUrl": "http://127.0.0.1:9000/cb", "delaySeconds": 1}'
    resp = await api.client.post("/v1/triggers", data=body,
                                 headers=AUTH | {"Content-Type": content_type})
    assert resp.status == 201, await resp.text()


@pytest.mark.parametrize(
    ("data", "headers", "field"),
    [
        (b"{oops", {}, "body"),
        (b'{"callbackUrl": "http://127.0.0.1:9000/cb", "delaySeconds": 1, "extra": 1}', {},
         "extra"),
        (b'{"callbackUrl": "http://127.0.0.1:9000/cb", "delaySeconds": 1, '
         b'"fireAt": "2030-01-01T00:00:00Z"}', {}, "delaySeconds/fireAt"),
        (b'{"callbackUrl": "http://127.0.0.1:9000/cb", "delaySeconds": 1}',
         {"Idempotency-Key": "k" * 256}, "Idempotency-Key"),
    ],
)
async def test_invalid_register_is_400_naming_the_field(
    api: Api, data: bytes, headers: dict[str, str], field: str
) -> None:
    resp = await api.client.post("/v1/triggers", data=data, headers=AUTH | JSON | headers)
    body = await assert_error(resp, 400, "invalid_request")
    assert body["message"].startswith(field)
    assert api.env.store.triggers == {} and api.env.store.idempotency == {}


@pytest.mark.parametrize(("query", "field"), [({"limit": "0"}, "limit"),
                                              ({"cursor": "@@@"}, "cursor"),
                                              ({"status": "DONE"}, "status"),
                                              ({"sort": "asc"}, "sort")])
async def test_invalid_list_query_is_400_naming_the_parameter(
    api: Api, query: dict[str, str], field: str
) -> None:
    resp = await api.client.get("/v1/triggers", params=query, headers=AUTH)
    body = await assert_error(resp, 400, "invalid_request")
    assert body["message"].startswith(field)


async def test_too_large_body_or_payload_is_413(api: Api) -> None:
    resp = await api.client.post("/v1/triggers", data=b"x" * 100_000, headers=AUTH)
    await assert_error(resp, 413, "payload_too_large")
    _, _, resp = await api.post(BODY | {"payload": "x" * 5_000})
    body = await assert_error(resp, 413, "payload_too_large")
    assert body["message"].startswith("payload")
    assert api.env.store.triggers == {}


async def test_callback_outside_the_callers_prefixes_is_422(api: Api) -> None:
    for url in ("http://127.0.0.1:9001/cb", "http://127.0.0.1.evil.example:9000/",
                "https://127.0.0.1:9000/cb"):
        _, _, resp = await api.post(BODY | {"callbackUrl": url})
        await assert_error(resp, 422, "callback_not_allowed")
    assert api.env.store.triggers == {}


async def test_unknown_route_and_unknown_trigger_are_the_same_404(api: Api) -> None:
    tid = await api.created_id()
    resp = await api.client.get("/nope")
    route = await assert_error(resp, 404, "not_found")
    for method, path, headers in (("GET", f"/v1/triggers/{new_trigger_id(NOW_MS)}", AUTH),
                                  ("GET", f"/v1/triggers/{tid}", OTHER),
                                  ("DELETE", f"/v1/triggers/{tid}", OTHER),
                                  ("GET", "/v1/triggers/not-an-id", AUTH),
                                  ("GET", "/v1/nope", AUTH)):
        resp = await api.client.request(method, path, headers=headers)
        body = await assert_error(resp, 404, "not_found")
        assert set(body) == set(route)
    assert api.env.store.triggers[tid].status is Status.PENDING


async def test_wrong_method_is_405(api: Api) -> None:
    resp = await api.client.put("/v1/triggers", headers=AUTH)
    await assert_error(resp, 405, "method_not_allowed")
    resp = await api.client.post("/healthz")
    await assert_error(resp, 405, "method_not_allowed")


async def test_405_names_the_allowed_methods(api: Api) -> None:
    resp = await api.client.put("/v1/triggers", headers=AUTH)
    await assert_error(resp, 405, "method_not_allowed")
    assert set(resp.headers.get("Allow", "").replace(" ", "").split(",")) >= {"GET", "POST"}


async def test_store_failure_is_503_without_the_drivers_text(api: Api) -> None:
    driver_text = "NoHostAvailable: 10.0.0.7:9042 timed out"
    api.env.store.failures["create"] = StoreError(driver_text)
    _, _, resp = await api.post(BODY)
    body = await assert_error(resp, 503, "dependency_unavailable")
    # Generic: not even which dependency; the request id ties it to the logged error.
    assert "cassandra" not in body["message"]
    assert resp.headers["X-Request-Id"] in body["message"]
    assert "10.0.0.7" not in body["message"] and "NoHostAvailable" not in body["message"]
    assert api.env.queue.sent == []
    api.env.store.failures["get"] = StoreError(driver_text)
    resp = await api.client.get(f"/v1/triggers/{new_trigger_id(NOW_MS)}", headers=AUTH)
    body = await assert_error(resp, 503, "dependency_unavailable")
    assert "10.0.0.7" not in body["message"]


async def test_unexpected_error_is_500_without_its_text(api: Api) -> None:
    api.env.store.failures["list_by_caller"] = RuntimeError("secret internals")
    resp = await api.client.get("/v1/triggers", headers=AUTH)
    body = await assert_error(resp, 500, "internal_error")
    assert "secret" not in body["message"]


# --- cancel and list --------------------------------------------------------------------
async def test_cancel_answers_200_then_409_once_in_flight(api: Api) -> None:
    tid = await api.created_id()
    for _ in range(2):
        resp = await api.client.delete(f"/v1/triggers/{tid}", headers=AUTH)
        assert resp.status == 200
        assert await resp.json() == {"triggerId": tid, "status": "CANCELLED"}
    other = await api.created_id()
    t = api.env.store.triggers[other]
    api.env.store.triggers[other] = replace(t, status=Status.IN_FLIGHT, claim_id="c1")
    resp = await api.client.delete(f"/v1/triggers/{other}", headers=AUTH)
    body = await assert_error(resp, 409, "not_cancellable", extras=["status"])
    assert body["status"] == "IN_FLIGHT"


async def test_list_pages_round_trip_the_cursor(api: Api) -> None:
    ids = {delay: await api.created_id(delaySeconds=delay) for delay in (500, 100, 300, 200, 400)}
    seen: list[str] = []
    cursor: str | None = None
    for _ in range(10):
        params = {"limit": "2", "status": "pending"} | ({"cursor": cursor} if cursor else {})
        resp = await api.client.get("/v1/triggers", params=params, headers=AUTH)
        page = await resp.json()
        assert resp.status == 200 and set(page) == {"items", "nextCursor"}
        assert 1 <= len(page["items"]) <= 2
        seen += [item["triggerId"] for item in page["items"]]
        cursor = page["nextCursor"]
        if cursor is None:
            break
    assert seen == [ids[d] for d in sorted(ids)]  # pending: by fire time
    newest: list[str] = []
    cursor = None
    for _ in range(10):  # without a status: newest first, its own cursor
        params = {"limit": "2"} | ({"cursor": cursor} if cursor else {})
        resp = await api.client.get("/v1/triggers", params=params, headers=AUTH)
        page = await resp.json()
        assert resp.status == 200, page
        newest += [item["triggerId"] for item in page["items"]]
        cursor = page["nextCursor"]
        if cursor is None:
            break
    assert sorted(newest) == sorted(ids.values()) and len(newest) == len(ids)
    resp = await api.client.get("/v1/triggers", headers=OTHER)
    assert await resp.json() == {"items": [], "nextCursor": None}


async def test_list_filters_by_status(api: Api) -> None:
    keep, gone = await api.created_id(), await api.created_id(delaySeconds=30)
    await api.client.delete(f"/v1/triggers/{gone}", headers=AUTH)
    resp = await api.client.get("/v1/triggers", params={"status": "cancelled"}, headers=AUTH)
    page = await resp.json()
    assert [i["triggerId"] for i in page["items"]] == [gone] and page["nextCursor"] is None
    assert page["items"][0]["status"] == "CANCELLED"
    resp = await api.client.get("/v1/triggers", params={"status": "PENDING"}, headers=AUTH)
    assert [i["triggerId"] for i in (await resp.json())["items"]] == [keep]


# --- health, readiness, metrics ----------------------------------------------------------
async def test_healthz_and_readyz_answer_200_without_a_token(api: Api) -> None:
    resp = await api.client.get("/healthz")
    assert resp.status == 200 and await resp.json() == {"status": "ok"}
    resp = await api.client.get("/readyz")
    assert resp.status == 200 and await resp.json() == {"status": "ready"}
    assert api.env.store.calls["ping"] == api.env.queue.calls["ping"] == 1
    assert api.env.cache.calls["ping"] == 1


async def test_readyz_is_503_naming_what_is_down(api: Api) -> None:
    api.env.cache.failures["ping"] = CacheError("redis refused")
    resp = await api.client.get("/readyz")
    body = await assert_error(resp, 503, "not_ready", extras=["down"])
    assert body["down"] == ["redis"] and "redis" in body["message"]
    api.env.store.failures["ping"] = StoreError("cassandra refused")
    api.env.clock.advance_ms(1_000)  # the last answer stands for a second
    resp = await api.client.get("/readyz")
    body = await assert_error(resp, 503, "not_ready", extras=["down"])
    assert body["down"] == ["cassandra", "redis"]


async def test_readyz_checks_at_most_once_a_second(api: Api) -> None:
    for _ in range(5):
        resp = await api.client.get("/readyz")
        assert resp.status == 200
    assert api.env.store.calls["ping"] == api.env.cache.calls["ping"] == 1
    api.env.cache.failures["ping"] = CacheError("redis refused")
    api.env.clock.advance_ms(999)
    assert (await api.client.get("/readyz")).status == 200  # still the last answer
    api.env.clock.advance_ms(1)
    await assert_error(await api.client.get("/readyz"), 503, "not_ready", extras=["down"])
    assert api.env.store.calls["ping"] == api.env.cache.calls["ping"] == 2


async def test_metrics_shows_the_counters_in_prometheus_text_format(api: Api) -> None:
    key = AUTH | {"Idempotency-Key": "k1"}
    await api.post(BODY, key)
    await api.post(BODY, key)
    resp = await api.client.get("/metrics")
    text = await resp.text()
    assert resp.status == 200 and resp.content_type == "text/plain"
    assert "trigger_triggers_registered_total 1.0\n" in text
    assert "trigger_idempotent_replays_total 1.0\n" in text


async def test_stats_sums_the_durable_counters_and_needs_a_token(api: Api) -> None:
    mine = {'deliveries_total{caller="orders",outcome="fired"}': 3,
            'delivery_attempts_total{caller="orders"}': 5}
    theirs = {'deliveries_total{caller="billing",outcome="fired"}': 9,
              'rate_limited_total{caller="billing"}': 2}
    service = {"duplicate_messages_total": 4, 'deliveries_total{outcome="fired"}': 12}
    await api.env.store.add_counters(mine | theirs | service)
    # A caller sees only its own counters: not another tenant's, nor the service's sums.
    resp = await api.client.get("/v1/stats", headers=AUTH)
    assert resp.status == 200
    assert await resp.json() == {"counters": mine}
    resp = await api.client.get("/v1/stats", headers=OTHER)
    assert await resp.json() == {"counters": theirs}
    for headers in (OPERATOR, VIEWER):  # ops tokens see every caller's and the service's
        resp = await api.client.get("/v1/stats", headers=headers)
        assert await resp.json() == {"counters": mine | theirs | service}
    await assert_error(await api.client.get("/v1/stats"), 401, "unauthorized")


async def test_ops_tokens_cannot_use_caller_endpoints(api: Api) -> None:
    for headers in (OPERATOR, VIEWER):
        status, body, _ = await api.post(BODY, headers)
        assert (status, body["error"]) == (403, "forbidden")
        resp = await api.client.get("/v1/triggers", headers=headers)
        await assert_error(resp, 403, "forbidden")
    # ...but they authenticate: the durable counters are readable by every role.
    resp = await api.client.get("/v1/stats", headers=VIEWER)
    assert resp.status == 200
