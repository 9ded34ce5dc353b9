"""The registration half of the SSRF guard through the API: a broad caller's
callback host is resolved, and a name with a forbidden address is a 422 on every route that
takes a callback URL; a name that does not resolve is accepted, stored normalised."""

from __future__ import annotations

import ipaddress
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from structlog.testing import capture_logs

from tests.fake_runtime import fake_runtime
from tests.openapi_check import check_contract
from tests.unit.app.support import make_env
from tests.unit.http.test_routes import assert_error
from trigger_service.adapters.memory.dns import StaticResolver
from trigger_service.adapters.memory.store import MemoryLease
from trigger_service.app.callbacks import REFUSAL, vet_callback_host
from trigger_service.config.callers import CallerRegistry, hash_token
from trigger_service.core.errors import CallbackNotAllowed
from trigger_service.http.app import build_app

CALLERS = CallerRegistry.from_mapping({"callers": {
    "wide": {"token_sha256": hash_token("tok"),
             "callback_prefixes": ["https://", "http://", "https://orders.internal/"]},
}})
AUTH = {"Authorization": "Bearer tok"}
DNS = {
    "rebind.example": ["93.184.216.34", "127.0.0.1"],  # one bad address is enough
    "metadata.example": ["169.254.169.254"],
    "internal.example": ["10.0.0.7"],
    "six.example": ["::ffff:127.0.0.1"],
    "public.example": ["93.184.216.34", "2606:2800:220:1::1"],
    "orders.internal": ["10.1.1.1"],  # named by a prefix: whatever it resolves to
}

Client = TestClient[web.Request, web.Application]


@dataclass
class Api:
    client: Client
    resolver: StaticResolver

    async def post(self, url: str, path: str = "/v1/triggers") -> tuple[int, Any]:
        resp = await self.client.post(path, json={"callbackUrl": url, "delaySeconds": 60},
                                      headers=AUTH)
        return resp.status, await resp.json()


@pytest.fixture
async def api() -> AsyncIterator[Api]:
    resolver = StaticResolver(DNS)
    env = make_env(resolver=resolver)
    runtime = fake_runtime(env.settings, CALLERS, env.store, env.queue, env.cache,
                           MemoryLease(env.clock, 10_000), env.clock, env.metrics,
                           resolver=resolver)
    app = build_app(runtime, env.service)
    contract = check_contract(app)  # every exchange against openapi.yaml
    client: Client = TestClient(TestServer(app))
    await client.start_server()
    try:
        yield Api(client, resolver)
    finally:
        await client.close()
    contract.assert_clean()


@pytest.mark.parametrize(("url", "why"), [
    ("http://localhost/", "localhost"),
    ("http://2130706433/", "loopback"),
])
async def test_a_broad_caller_cannot_reach_internal_addresses(api: Api, url: str,
                                                              why: str) -> None:
    resp = await api.client.post("/v1/triggers", json={"callbackUrl": url, "delaySeconds": 60},
                                 headers=AUTH)
    body = await assert_error(resp, 422, "callback_not_allowed")
    # What the caller wrote itself may be named: it learns nothing from it.
    assert why in body["message"] and body["message"].startswith("callbackUrl: ")


@pytest.mark.parametrize(("url", "address"), [
    ("https://rebind.example/x", "127.0.0.1"),
    ("http://metadata.example/latest", "169.254.169.254"),
    ("https://internal.example/", "10.0.0.7"),
    ("https://six.example/", "::ffff:127.0.0.1"),
])
@pytest.mark.parametrize("path", ["/v1/triggers", "/v1/triggers/preview"])
async def test_a_name_resolving_inside_is_refused_without_saying_where(
        api: Api, url: str, address: str, path: str) -> None:
    """The refusal of a resolved name is one sentence for every name: neither the address
    nor its kind (a DNS oracle for the inside), on registration and preview alike."""
    with capture_logs() as logs:
        status, body = await api.post(url, path)
    assert (status, body["error"]) == (422, "callback_not_allowed")
    assert body["message"] == REFUSAL
    ip = ipaddress.ip_address(address)
    for secret in (address, str(ip), "loopback", "private", "link-local", "mapped"):
        assert secret not in body["message"]
    refused = [e for e in logs if e["event"] == "callback_host_refused"]
    assert refused and ipaddress.ip_address(refused[0]["address"]) == ip  # logged instead


async def test_public_unresolvable_and_named_hosts_are_accepted_normalised(api: Api) -> None:
    for url, stored in [("https://PUBLIC.example:443/a/../b", "https://public.example/b"),
                        ("https://not-yet.example/x", "https://not-yet.example/x"),
                        ("https://orders.internal/h", "https://orders.internal/h")]:
        status, body = await api.post(url)
        assert status == 201, body
        resp = await api.client.get(f"/v1/triggers/{body['triggerId']}", headers=AUTH)
        assert (await resp.json())["callbackUrl"] == stored
    assert "orders.internal" not in api.resolver.asked  # named: nothing to check


async def test_preview_patch_and_snooze_check_too(api: Api) -> None:
    status, body = await api.post("https://rebind.example/", "/v1/triggers/preview")
    assert (status, body["error"]) == (422, "callback_not_allowed")
    status, created = await api.post("https://public.example/")
    assert status == 201
    tid = created["triggerId"]
    resp = await api.client.patch(f"/v1/triggers/{tid}", headers=AUTH,
                                  json={"callbackUrl": "https://metadata.example/"})
    assert (resp.status, (await resp.json())["error"]) == (422, "callback_not_allowed")
    # The stored URL's name now resolves somewhere internal: a snooze re-checks it.
    api.resolver.table["public.example"] = StaticResolver({"x": ["10.9.9.9"]}).table["x"]
    resp = await api.client.post(f"/v1/triggers/{tid}/snooze", headers=AUTH,
                                 json={"delaySeconds": 60})
    assert (resp.status, (await resp.json())["error"]) == (422, "callback_not_allowed")


async def test_malformed_urls_are_400s(api: Api) -> None:
    for url in ("http://xn--a.com/", "https://h/hooks/..%2Fadmin", "http://u@h/"):
        resp = await api.client.post("/v1/triggers", headers=AUTH,
                                     json={"callbackUrl": url, "delaySeconds": 60})
        body = await assert_error(resp, 400, "invalid_request")
        assert body["field"] == "callbackUrl"


async def test_vet_skips_literals_and_missing_callbacks() -> None:
    wide = CALLERS.by_name("wide")
    assert wide is not None
    resolver = StaticResolver(DNS)
    await vet_callback_host(wide, "", resolver)
    await vet_callback_host(wide, "https://8.8.8.8/", resolver)
    assert resolver.asked == []
    with pytest.raises(CallbackNotAllowed):
        await vet_callback_host(wide, "https://rebind.example/", resolver)
