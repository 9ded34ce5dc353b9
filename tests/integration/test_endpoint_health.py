"""Endpoint health on the real stack (Cassandra, LocalStack SQS, Redis): a success resets a
failing endpoint's record; an endpoint failing past a short ``disable_after_s`` (3 s) is
disabled, the operators' event arrives signed (verified with the standardwebhooks library),
occurrences due after that are held (PAUSED, not attempted), and enabling with a replay
delivers each held one exactly once, with an ``endpoint.enabled`` event; the SDK (sync and
async) and ``triggerctl endpoints`` list and enable."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest
from aiohttp import web
from standardwebhooks.webhooks import Webhook
from typer.testing import CliRunner

from tests.integration.conftest import Stack, serving
from tests.integration.helpers import until
from trigger_client import AsyncTriggerClient, TriggerClient
from trigger_client.cli.main import app
from trigger_service.core.endpoint_health import first_failure
from trigger_service.core.time.timing import format_rfc3339_ms
from trigger_service.core.urls import callback_origin

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

OPS_SECRET = "whsec_" + base64.b64encode(b"s" * 32).decode()


@dataclass
class OpsReceiver:
    """The operators' webhook: records each event's raw body and headers, answers 200."""

    port: int = 0
    events: list[tuple[str, dict[str, str]]] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.Response:
        self.events.append((await request.text(), dict(request.headers)))
        return web.Response(status=200)

    def of_type(self, kind: str) -> list[dict[str, Any]]:
        return [json.loads(raw) for raw, _ in self.events if json.loads(raw)["type"] == kind]


@pytest.fixture
async def ops() -> AsyncIterator[OpsReceiver]:
    async with serving(OpsReceiver()) as rec:
        yield rec


@pytest.fixture
def extra_env(ops: OpsReceiver) -> dict[str, str]:
    return {"TRIGGER_ENDPOINT_HEALTH_DISABLE_AFTER_S": "3",
            "TRIGGER_ENDPOINT_HEALTH_WRITE_EVERY_S": "1",
            "TRIGGER_ENDPOINT_HEALTH_REFRESH_S": "1",
            "TRIGGER_ENDPOINT_HEALTH_OPS_EVENTS_URL": f"http://127.0.0.1:{ops.port}/ops",
            "TRIGGER_ENDPOINT_HEALTH_OPS_EVENTS_SECRET": OPS_SECRET}


async def _endpoints(stack: Stack) -> list[dict[str, Any]]:
    resp = await stack.client.get("/v1/endpoints", headers=stack.auth())
    assert resp.status == 200, await resp.text()
    return list((await resp.json())["items"])


async def _register(stack: Stack, in_ms: int) -> str:
    status, got, _ = await stack.post(stack.body(
        fireAt=format_rfc3339_ms(int(time.time() * 1000) + in_ms)))
    assert status == 201, got
    return str(got["triggerId"])


async def test_a_success_resets_a_failing_endpoint(stack: Stack) -> None:
    await stack.start_dispatcher(endpoints=True)
    tid = await _register(stack, 300)
    stack.receiver.script[tid] = [503]  # then 200 on the retry (1 s later)

    async def failing() -> bool:
        return [e["state"] for e in await _endpoints(stack)] == ["failing"]

    assert await until(failing, 10)
    [e] = await _endpoints(stack)
    assert e["origin"] == callback_origin(stack.receiver.base_url) and e["failures"] >= 1
    assert e["lastError"] and e["disabledAt"] is None
    assert (await stack.wait_status(tid, "FIRED", 10))["status"] == "FIRED"

    async def healthy() -> bool:
        return await _endpoints(stack) == []

    assert await until(healthy, 5)


async def test_disabled_after_continuous_failure_then_held_then_replayed_once(
        stack: Stack, ops: OpsReceiver) -> None:
    stack.receiver.default_status = 503
    origin = callback_origin(stack.receiver.base_url)
    await stack.start_dispatcher(endpoints=True)
    # Failures spread over more than 3 s: three attempts each, a second apart.
    failing = [await _register(stack, ms) for ms in (300, 1_500, 3_000)]

    async def disabled_event() -> bool:
        return bool(ops.of_type("endpoint.disabled"))

    assert await until(disabled_event, 20)
    raw, headers = next((r, h) for r, h in ops.events
                        if json.loads(r)["type"] == "endpoint.disabled")
    event = Webhook(OPS_SECRET).verify(raw, headers)  # raises unless signed with the secret
    assert event["data"]["caller"] == stack.caller and event["data"]["origin"] == origin
    assert event["data"]["failures"] >= 2 and event["data"]["since"]
    [e] = await _endpoints(stack)
    assert e["state"] == "disabled" and e["disabledAt"]
    since = e["disabledAt"]

    held = [await _register(stack, 500), await _register(stack, 800)]
    for tid in held:
        view = await stack.wait_status(tid, "PAUSED", 10)
        assert view["status"] == "PAUSED" and view["lastError"] == "endpoint_disabled"
    assert all(not stack.receiver.for_trigger(tid) for tid in held)  # never attempted
    # A retry claimed ahead of its time before the disable (the claim lead) may still go
    # out; nothing claimed after it does.
    await asyncio.sleep(2.0)
    before = len(stack.receiver.arrivals)
    await asyncio.sleep(1.5)
    late = [(a.trigger_id, a.attempt, a.at_ms) for a in stack.receiver.arrivals[before:]]
    assert not late, (late, failing)  # the failing ones' retries are held too
    for tid in failing:  # each was sent (and failed) before the disable, or is held by it
        view = await stack.wait_status(tid, "PAUSED", 0)
        assert stack.receiver.for_trigger(tid) or view["status"] == "PAUSED", (tid, view)

    stack.receiver.default_status = 200
    resp = await stack.client.post("/v1/endpoints/enable", headers=stack.auth(),
                                   json={"origin": stack.receiver.base_url,
                                         "replaySince": since})
    got = await resp.json()
    assert resp.status == 200, got
    assert got["previousState"] == "disabled" and got["replay"]["triggerJobId"]
    for tid in held:
        assert (await stack.wait_status(tid, "FIRED", 15))["status"] == "FIRED"
    await asyncio.sleep(2)  # a second delivery would have come by now
    assert [len(stack.receiver.for_trigger(tid)) for tid in held] == [1, 1]
    assert await _endpoints(stack) == []

    async def enabled_event() -> bool:
        return bool(ops.of_type("endpoint.enabled"))

    assert await until(enabled_event, 10)
    [on] = ops.of_type("endpoint.enabled")
    assert on["data"]["by"] == f"caller:{stack.caller}" and on["data"]["origin"] == origin


async def test_the_enable_routes_refuse_bad_input(stack: Stack) -> None:
    for body in ({}, {"origin": "not a url"}, {"origin": "https://h/path"},
                 {"origin": "https://h", "replaySince": "yesterday"},
                 {"origin": "https://h", "extra": 1}):
        resp = await stack.client.post("/v1/endpoints/enable", headers=stack.auth(),
                                       json=body)
        assert resp.status == 400, body
        assert (await resp.json())["error"] == "invalid_request"
    ops_auth = stack.auth(stack.token + "-ops")
    resp = await stack.client.post("/v1/ops/endpoints/nobody/enable", headers=ops_auth,
                                   json={"origin": "https://h"})
    assert resp.status == 404
    viewer = stack.auth(stack.token + "-viewer")
    resp = await stack.client.post(f"/v1/ops/endpoints/{stack.caller}/enable",
                                   headers=viewer, json={"origin": "https://h"})
    assert resp.status == 403
    resp = await stack.client.post(f"/v1/ops/endpoints/{stack.caller}/enable",
                                   headers=ops_auth, json={"origin": "https://h"})
    got = await resp.json()
    assert resp.status == 200 and got["previousState"] is None, got
    resp = await stack.client.get("/v1/ops/endpoints", headers=viewer)
    assert resp.status == 200


async def _seed_disabled(stack: Stack) -> str:
    """A disabled record of the test caller's receiver, as a dispatcher writes it."""
    origin = callback_origin(stack.receiver.base_url)
    now_ms = int(time.time() * 1000)
    health = stack.runtime.endpoint_health
    h = await health.note_first_failure(first_failure(stack.caller, origin, now_ms - 9_000,
                                                      "HTTP 503"), 100)
    assert h is not None and await health.mark_disabled(h, now_ms)
    return origin


async def test_the_sdk_sync_and_async_and_triggerctl(stack: Stack) -> None:
    origin = await _seed_disabled(stack)
    url = str(stack.client.make_url("")).rstrip("/")
    async with AsyncTriggerClient(url, stack.token) as sdk:
        [e] = await sdk.endpoints.list()
        assert (e.caller, e.origin, e.state, e.failures) == (stack.caller, origin,
                                                             "disabled", 1)
        assert e.disabled_at is not None and e.last_error == "HTTP 503"
        ops_sdk = AsyncTriggerClient(url, stack.token + "-ops")
        assert stack.caller in {x.caller for x in await ops_sdk.endpoints.list_all()}
        await ops_sdk.aclose()
    argv = ["--api-url", url, "--token", stack.token]
    listed = await asyncio.to_thread(CliRunner().invoke, app,
                                     [*argv, "endpoints", "list", "--output", "json"])
    assert listed.exit_code == 0, listed.stdout
    assert origin in listed.stdout and "disabled" in listed.stdout
    enabled = await asyncio.to_thread(CliRunner().invoke, app, [
        *argv, "endpoints", "enable", stack.receiver.base_url, "--replay-since",
        "2026-01-01T00:00:00Z"])
    assert enabled.exit_code == 0, enabled.stdout
    assert f"{origin} enabled (was disabled)" in enabled.stdout
    sync = TriggerClient(url, stack.token)
    try:
        assert await asyncio.to_thread(sync.endpoints.list) == []
        again = await asyncio.to_thread(sync.endpoints.enable, origin,
                                        datetime(2026, 1, 1, tzinfo=UTC))
        assert again.previous_state is None and again.trigger_job_id is None
    finally:
        await asyncio.to_thread(sync.close)
