"""Every endpoint and every error of the API, against real Cassandra, SQS and Redis."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta

import pytest

from tests.integration.conftest import Stack
from trigger_service.core.time.timing import format_rfc3339_ms, parse_rfc3339_ms

pytestmark = pytest.mark.integration


def assert_error(status: int, body: object, want_status: int, code: str) -> None:
    assert status == want_status, body
    assert isinstance(body, dict) and body["error"] == code and isinstance(body["message"], str)


async def test_register_get_and_list(stack: Stack) -> None:
    before = int(time.time() * 1000)
    status, body, _ = await stack.post(stack.body(delaySeconds=600, payload={"k": [1, "é"]}))
    assert status == 201, body
    assert body["status"] == "PENDING" and body["triggerId"].startswith("trg_")
    fire_at = parse_rfc3339_ms(body["fireAt"])
    assert before + 600_000 <= fire_at <= int(time.time() * 1000) + 600_000
    assert body["fireAt"] == format_rfc3339_ms(fire_at)  # UTC, millisecond precision

    resp = await stack.client.get(f"/v1/triggers/{body['triggerId']}", headers=stack.auth())
    got = await resp.json()
    assert resp.status == 200
    assert got["triggerId"] == body["triggerId"] and got["status"] == "PENDING"
    assert got["payload"] == {"k": [1, "é"]} and got["attempts"] == 0
    assert got["lastError"] is None and got["firedAt"] is None
    assert got["callbackUrl"] == stack.receiver.base_url + "cb"
    assert set(got) == {"triggerId", "status", "fireAt", "createdAt", "attempts", "lastError",
                        "firedAt", "callbackUrl", "payload", "timeZone", "localTime", "rrule",
                        "cron", "dstPolicy", "exdates", "catchUp", "nextFireAt", "occurrencesFired",
                        "snoozedFrom", "channels", "acknowledged", "jitterSeconds", "scheduledAt",
                        "tags", "labels", "recipient", "resolvedTimeZone", "expiresAt",
                        "maxLatenessSeconds", "flowControl", "priority"}


async def test_fire_at_with_offset_is_stored_in_utc(stack: Stack) -> None:
    day = datetime.now(UTC).date() + timedelta(days=30)
    status, body, _ = await stack.post(stack.body(fireAt=f"{day}T09:00:00.250-05:00"))
    assert status == 201, body
    assert body["fireAt"] == f"{day}T14:00:00.250Z"


async def test_list_orders_newest_first_filters_and_pages(stack: Stack) -> None:
    ids = []
    for delay in (500, 100, 300, 200, 400):
        _, body, _ = await stack.post(stack.body(delaySeconds=delay))
        ids.append((delay, body["triggerId"]))
        await asyncio.sleep(0.002)  # distinct creation times: the order is theirs
    cancel_id = dict(ids)[300]
    resp = await stack.client.delete(f"/v1/triggers/{cancel_id}", headers=stack.auth())
    assert resp.status == 200

    seen: list[str] = []
    cursor = None
    for _ in range(10):
        q = {"limit": "2"} | ({"cursor": cursor} if cursor else {})
        resp = await stack.client.get("/v1/triggers", params=q, headers=stack.auth())
        page = await resp.json()
        assert resp.status == 200 and len(page["items"]) <= 2
        seen += [i["triggerId"] for i in page["items"]]
        cursor = page["nextCursor"]
        if cursor is None:
            break
    assert seen == [tid for _, tid in reversed(ids)]  # newest created first
    resp = await stack.client.get("/v1/triggers", params={"status": "PENDING"},
                                  headers=stack.auth())
    pending = [i["triggerId"] for i in (await resp.json())["items"]]
    assert pending == [tid for d, tid in sorted(ids) if tid != cancel_id]  # by fire time

    resp = await stack.client.get("/v1/triggers", params={"status": "CANCELLED"},
                                  headers=stack.auth())
    page = await resp.json()
    assert [i["triggerId"] for i in page["items"]] == [cancel_id]
    assert page["nextCursor"] is None

    # Another caller sees none of them.
    resp = await stack.client.get("/v1/triggers", headers=stack.auth(stack.token + "-other"))
    assert (await resp.json())["items"] == []


async def test_cancel_is_idempotent_and_hidden_from_other_callers(stack: Stack) -> None:
    _, body, _ = await stack.post(stack.body(delaySeconds=600))
    tid = body["triggerId"]
    other = stack.auth(stack.token + "-other")
    resp = await stack.client.delete(f"/v1/triggers/{tid}", headers=other)
    assert_error(resp.status, await resp.json(), 404, "not_found")
    resp = await stack.client.get(f"/v1/triggers/{tid}", headers=other)
    unknown = await stack.client.get(
        "/v1/triggers/trg_01HF7YAT3V8C3JV1RRETHBJNRB", headers=stack.auth())
    other_body, unknown_body = await resp.json(), await unknown.json()
    assert resp.status == unknown.status == 404
    assert other_body["error"] == unknown_body["error"] == "not_found"

    for _ in range(2):
        resp = await stack.client.delete(f"/v1/triggers/{tid}", headers=stack.auth())
        assert resp.status == 200
        assert await resp.json() == {"triggerId": tid, "status": "CANCELLED"}
    resp = await stack.client.get(f"/v1/triggers/{tid}", headers=stack.auth())
    assert (await resp.json())["status"] == "CANCELLED"


async def test_unauthorized(stack: Stack) -> None:
    for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": stack.token},
                    {"Authorization": f"Basic {stack.token}"}):
        resp = await stack.client.post("/v1/triggers", json=stack.body(delaySeconds=1),
                                       headers=headers)
        assert_error(resp.status, await resp.json(), 401, "unauthorized")
    resp = await stack.client.get("/v1/triggers", headers={})
    assert_error(resp.status, await resp.json(), 401, "unauthorized")


@pytest.mark.parametrize(
    ("mutate", "status", "code", "field"),
    [
        (lambda b: b | {"delaySeconds": 3661 * 86400}, 400, "fire_at_out_of_range", None),
        (lambda b: b | {"delaySeconds": 1, "payload": "x" * 5000}, 413, "payload_too_large",
         None),
        (lambda b: b | {"delaySeconds": 1, "callbackUrl": "http://127.0.0.1:1/"}, 422,
         "callback_not_allowed", None),
        # Not a URL at all (the port is not a number): invalid, and certainly not allowed.
        (lambda b: b | {"delaySeconds": 1, "callbackUrl": "http://127.0.0.1:9000.evil.example/"},
         400, "invalid_request", "callbackUrl"),
        (lambda b: b | {"delaySeconds": 1, "callbackUrl": "http://127.0.0.1.evil.example/"},
         422, "callback_not_allowed", None),
        (lambda b: {"payload": 1, "delaySeconds": 1}, 400, "invalid_request", "callbackUrl"),
        (lambda b: b | {"delaySeconds": "10"}, 400, "invalid_request", "delaySeconds"),
        (lambda b: b | {"delaySeconds": 1, "fireAt": "2030-01-01T00:00:00Z"}, 400,
         "invalid_request", "delaySeconds/fireAt"),
        (lambda b: b | {"fireAt": "next tuesday"}, 400, "invalid_request", "fireAt"),
        (lambda b: b | {"delaySeconds": 1, "extra": True}, 400, "invalid_request", "extra"),
    ],
)
async def test_register_errors(stack: Stack, mutate, status, code, field) -> None:  # type: ignore[no-untyped-def]
    base = {"callbackUrl": stack.receiver.base_url + "cb", "payload": None}
    st, body, _ = await stack.post(mutate(base))
    assert_error(st, body, status, code)
    if field:
        assert body["message"].startswith(field)


async def test_malformed_json_and_wrong_methods(stack: Stack) -> None:
    resp = await stack.client.post("/v1/triggers", data=b"{oops",
                                   headers=stack.auth() | {"Content-Type": "application/json"})
    assert_error(resp.status, await resp.json(), 400, "invalid_request")
    resp = await stack.client.put("/v1/triggers", headers=stack.auth())
    assert_error(resp.status, await resp.json(), 405, "method_not_allowed")
    resp = await stack.client.get("/nope")
    assert_error(resp.status, await resp.json(), 404, "not_found")
    resp = await stack.client.post("/v1/triggers", data=b"x" * 100_000, headers=stack.auth())
    assert_error(resp.status, await resp.json(), 413, "payload_too_large")
    resp = await stack.client.get("/v1/triggers", params={"limit": "0"}, headers=stack.auth())
    assert_error(resp.status, await resp.json(), 400, "invalid_request")
    resp = await stack.client.get("/v1/triggers/not-an-id", headers=stack.auth())
    assert_error(resp.status, await resp.json(), 404, "not_found")


async def test_health_ready_and_metrics(stack: Stack) -> None:
    resp = await stack.client.get("/healthz")
    assert resp.status == 200
    resp = await stack.client.get("/readyz")
    assert resp.status == 200, await resp.text()
    await stack.post(stack.body(delaySeconds=600))
    resp = await stack.client.get("/metrics")
    assert "triggers_registered_total 1" in await resp.text()


async def test_readyz_names_the_dependency_that_is_down(stack: Stack) -> None:
    from trigger_service.adapters.redis.client import RedisPing, open_client

    real = stack.runtime.pings["redis"]
    nowhere = open_client("redis://127.0.0.1:1/0")
    stack.runtime.pings["redis"] = RedisPing(nowhere)
    try:
        resp = await stack.client.get("/readyz")
        body = await resp.json()
        assert resp.status == 503 and body["error"] == "not_ready" and body["down"] == ["redis"]
        assert "redis" in body["message"]
    finally:
        await nowhere.aclose()
        stack.runtime.pings["redis"] = real
