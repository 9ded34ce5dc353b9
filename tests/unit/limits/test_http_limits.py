"""The API's limits on in-memory fakes and a manual clock: 429 rate_limited with
Retry-After, failing open, the pending quota, request ids, and the /metrics token."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from tests.fake_runtime import fake_runtime
from tests.openapi_check import check_contract
from tests.unit.app.support import CALLBACK, Env, make_env
from tests.unit.app.support import SETTINGS as BASE
from tests.unit.http.test_routes import counted_parses
from trigger_service.adapters.memory.limits import MemoryPendingQuota, MemoryRateLimiter
from trigger_service.adapters.memory.store import MemoryLease
from trigger_service.app.quota import QuotaGate
from trigger_service.app.triggers import TriggerService
from trigger_service.config.callers import CallerRegistry, hash_token
from trigger_service.core.errors import StoreError
from trigger_service.http.app import build_app
from trigger_service.http.keys import RUNTIME_KEY
from trigger_service.http.routes.audit import AUDIT_KEY

CALLERS = CallerRegistry.from_mapping({"callers": {
    "limited": {"token_sha256": hash_token("lim"), "rate_per_s": 2, "burst": 3,
                "max_pending": 2, "callback_prefixes": ["http://127.0.0.1:9000/"]},
    "free": {"token_sha256": hash_token("free"),
             "callback_prefixes": ["http://127.0.0.1:9000/"]},
}, "ops": {"alice": {"token_sha256": hash_token("op"), "role": "operator"}}})
LIMITED = {"Authorization": "Bearer lim"}
FREE = {"Authorization": "Bearer free"}
OPS = {"Authorization": "Bearer op"}
BODY = {"callbackUrl": CALLBACK, "delaySeconds": 600}

Client = TestClient[web.Request, web.Application]


@dataclass
class Api:
    env: Env
    limiter: MemoryRateLimiter
    quota: MemoryPendingQuota
    client: Client

    async def status_of(self, path: str, headers: dict[str, str]) -> int:
        resp = await self.client.get(path, headers=headers)
        return resp.status


# The limiter's own Retry-After, answered at once: the refusal wait has tests of its own
# (test_refusal_wait.py), and on a manual clock it would only wait for real.
SETTINGS = replace(BASE, limits=replace(BASE.limits, refusal_wait_s=0))


@pytest.fixture
async def api() -> AsyncIterator[Api]:
    env = make_env(SETTINGS)
    limiter, quota = MemoryRateLimiter(env.clock), MemoryPendingQuota()
    gate = QuotaGate(quota, lambda n: getattr(CALLERS.by_name(n), "max_pending", None),
                     env.metrics)
    service = TriggerService(env.settings, env.store, env.store, env.queue, env.cache,
                             env.clock, env.metrics, gate)
    runtime = fake_runtime(env.settings, CALLERS, env.store, env.queue, env.cache,
                           MemoryLease(env.clock, 10_000), env.clock, env.metrics,
                           limiter=limiter, quota=quota)
    app = build_app(runtime, service)
    contract = check_contract(app)  # every exchange against openapi.yaml
    client: Client = TestClient(TestServer(app))
    await client.start_server()
    try:
        yield Api(env, limiter, quota, client)
    finally:
        await client.close()
    contract.assert_clean()


async def error_of(resp: Any, status: int, code: str) -> dict[str, Any]:
    body = await resp.json()
    assert resp.status == status, body
    assert set(body) == {"error", "message"} and body["error"] == code
    return dict(body)


async def test_over_its_rate_a_caller_gets_429_with_retry_after(api: Api) -> None:
    statuses = [await api.status_of("/v1/triggers", LIMITED) for _ in range(3)]
    assert statuses == [200] * 3
    resp = await api.client.get("/v1/triggers/trg_x", headers=LIMITED)
    await error_of(resp, 429, "rate_limited")
    assert resp.headers["Retry-After"] == "1"  # 500 ms to the next token, rounded up
    assert api.env.metrics.snapshot()["rate_limited_total"] == 1
    api.env.clock.advance_ms(500)
    assert await api.status_of("/v1/triggers", LIMITED) == 200


async def test_every_v1_request_counts_even_refused_ones_and_posts(api: Api) -> None:
    resp = await api.client.post("/v1/triggers", json=BODY, headers=LIMITED)
    assert resp.status == 201
    assert await api.status_of("/v1/triggers/trg_nope", LIMITED) == 404
    assert await api.status_of("/v1/nothing-here", LIMITED) == 404
    assert await api.status_of("/v1/triggers", LIMITED) == 429


async def test_a_keyed_retry_over_the_rate_is_429_before_its_body_is_parsed(
        api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    """An answered key is no pass: telling its replay from 422 parses and plans the body
    (a `when`, an RRULE, a DNS name), the work the rate bounds."""
    parsed = counted_parses(monkeypatch)
    key = {**LIMITED, "Idempotency-Key": "k1"}
    first = await api.client.post("/v1/triggers", json=BODY, headers=key)
    assert first.status == 201
    replay = await api.client.post("/v1/triggers", json=BODY, headers=key)
    assert replay.status == 201 and replay.headers["Idempotent-Replayed"] == "true"
    resp = await api.client.post("/v1/triggers", json={**BODY, "payload": 1}, headers=key)
    await error_of(resp, 422, "idempotency_key_reused")
    assert len(parsed) == 3  # the bucket (burst 3) is empty now
    for body in (BODY, {**BODY, "payload": 1}, {**BODY, "payload": 2}) * 3:
        resp = await api.client.post("/v1/triggers", json=body, headers=key)
        await error_of(resp, 429, "rate_limited")
        assert resp.headers["Retry-After"] == "1"
    assert len(parsed) == 3 and api.env.metrics.snapshot()["rate_limited_total"] == 9
    api.env.clock.advance_ms(500)  # one token back: the retry gets its trigger
    resp = await api.client.post("/v1/triggers", json=BODY, headers=key)
    assert resp.status == 201 and resp.headers["Idempotent-Replayed"] == "true"
    assert (await resp.json())["triggerId"] == (await first.json())["triggerId"]
    assert len(parsed) == 4 and len(api.env.store.triggers) == 1


async def test_callers_without_a_rate_and_ops_users_are_not_limited(api: Api) -> None:
    for _ in range(20):
        assert await api.status_of("/v1/triggers", FREE) == 200
        assert await api.status_of("/v1/dead-letters", OPS) == 200
    assert await api.status_of("/healthz", {}) == 200  # outside /v1/: never limited


async def test_unauthenticated_requests_are_401_before_any_bucket(api: Api) -> None:
    for _ in range(5):
        resp = await api.client.get("/v1/triggers", headers={"Authorization": "Bearer bad"})
        await error_of(resp, 401, "unauthorized")
    assert api.limiter._buckets == {}


async def test_redis_down_fails_open_and_is_counted(api: Api) -> None:
    api.limiter.fail = True
    assert [await api.status_of("/v1/triggers", LIMITED) for _ in range(5)] == [200] * 5
    assert api.env.metrics.snapshot()["rate_limit_errors_total"] == 5


async def test_max_pending_refuses_registrations_beyond_it_until_one_is_cancelled(
        api: Api) -> None:
    api.limiter.fail = True  # this test is about the quota only
    ids = []
    for _ in range(2):
        resp = await api.client.post("/v1/triggers", json=BODY, headers=LIMITED)
        assert resp.status == 201
        ids.append((await resp.json())["triggerId"])
    resp = await api.client.post("/v1/triggers", json=BODY, headers=LIMITED)
    await error_of(resp, 429, "quota_exceeded")
    assert "Retry-After" not in resp.headers
    assert len(api.env.store.triggers) == 2  # nothing was written
    resp = await api.client.delete(f"/v1/triggers/{ids[0]}", headers=LIMITED)
    assert resp.status == 200
    resp = await api.client.post("/v1/triggers", json=BODY, headers=LIMITED)
    assert resp.status == 201
    # A fire time that has passed stops counting: the bucket empties itself.
    api.env.clock.advance_ms(601_000)
    for _ in range(2):
        resp = await api.client.post("/v1/triggers", json=BODY, headers=LIMITED)
        assert resp.status == 201


async def test_a_failed_registration_or_a_replay_gives_its_place_back(api: Api) -> None:
    api.limiter.fail = True
    api.env.store.failures["create"] = StoreError("down")
    resp = await api.client.post("/v1/triggers", json=BODY, headers=LIMITED)
    assert resp.status == 503
    assert api.quota.counted.get("limited", {}) == {}
    del api.env.store.failures["create"]
    key = {**LIMITED, "Idempotency-Key": "k1"}
    for _ in range(3):
        resp = await api.client.post("/v1/triggers", json=BODY, headers=key)
        assert resp.status == 201
    assert len(api.quota.counted["limited"]) == 1


async def test_the_quota_fails_open_when_redis_is_down(api: Api) -> None:
    api.limiter.fail = api.quota.fail = True
    for _ in range(4):
        resp = await api.client.post("/v1/triggers", json=BODY, headers=LIMITED)
        assert resp.status == 201
    assert api.env.metrics.snapshot()["quota_errors_total"] == 4


async def test_every_answer_carries_a_fresh_request_id(api: Api) -> None:
    seen = set()
    for path, headers in [("/healthz", {}), ("/v1/triggers", FREE), ("/nowhere", {}),
                          ("/v1/triggers", {})]:
        resp = await api.client.get(path, headers={**headers, "X-Request-Id": "forged"})
        rid = resp.headers["X-Request-Id"]
        assert len(rid) == 16 and rid != "forged"
        seen.add(rid)
    assert len(seen) == 4


async def test_a_500_names_its_request_id_and_nothing_else(api: Api) -> None:
    api.env.store.failures["list_by_caller"] = RuntimeError("secret internals at 10.1.2.3")
    resp = await api.client.get("/v1/triggers", headers=FREE)
    body = await error_of(resp, 500, "internal_error")
    assert resp.headers["X-Request-Id"] in body["message"]
    assert "10.1.2.3" not in body["message"]


async def test_metrics_need_the_token_when_one_is_set(api: Api) -> None:
    assert (await api.client.get("/metrics")).status == 200  # none set: open (loopback)
    assert api.client.app is not None
    runtime = api.client.app[RUNTIME_KEY]
    runtime.settings = replace(runtime.settings, metrics_token="m-token")
    await error_of(await api.client.get("/metrics"), 401, "unauthorized")
    bad = {"Authorization": "Bearer wrong"}
    await error_of(await api.client.get("/metrics", headers=bad), 401, "unauthorized")
    ok = await api.client.get("/metrics", headers={"Authorization": "Bearer m-token"})
    assert ok.status == 200 and b"trigger_" in await ok.read()


async def test_a_503_logs_the_drivers_text_under_the_id_it_answers(
        api: Api, capsys: pytest.CaptureFixture[str]) -> None:
    api.env.store.failures["list_by_caller"] = StoreError("NoHostAvailable: 10.0.0.7:9042")
    resp = await api.client.get("/v1/triggers", headers=FREE)
    body = await error_of(resp, 503, "dependency_unavailable")
    rid = resp.headers["X-Request-Id"]
    assert rid in body["message"] and "10.0.0.7" not in body["message"]
    logged = [line for line in capsys.readouterr().out.splitlines() if "dependency_error" in line]
    assert len(logged) == 1 and rid in logged[0] and "10.0.0.7:9042" in logged[0]


async def test_requests_the_rate_limit_refuses_write_no_audit_entry(api: Api) -> None:
    # A flood of refused requests must cost the audit log nothing: its writes in flight
    # are bounded for all callers, so they would crowd out other callers' entries.
    statuses = [(await api.client.delete(f"/v1/triggers/trg_nope{n}", headers=LIMITED)).status
                for n in range(8)]
    assert statuses[:3] == [404] * 3 and set(statuses[3:]) == {429}
    app = api.client.app
    assert isinstance(app, web.Application)
    await app[AUDIT_KEY].drain()
    resp = await api.client.get("/v1/ops/audit", params={"actor": "limited"}, headers=OPS)
    body = await resp.json()
    assert resp.status == 200, body
    assert [e["outcome"] for e in body["items"]] == ["not_found"] * 3  # the 429s: none
