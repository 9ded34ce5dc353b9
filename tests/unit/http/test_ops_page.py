"""``GET /ops``: the console's page and files load without a token, under a strict CSP, and
the script never turns a value into HTML (the browser test, tests/integration/
test_ops_page.py, drives the page itself)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from importlib.resources import files

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from tests.fake_runtime import fake_runtime
from tests.openapi_check import check_contract
from tests.unit.app.support import make_env
from trigger_service.adapters.memory.store import MemoryLease
from trigger_service.config.callers import CallerRegistry, hash_token
from trigger_service.http.app import build_app

Client = TestClient[web.Request, web.Application]
CALLERS = CallerRegistry.from_mapping({"callers": {
    "orders": {"token_sha256": hash_token("tok"), "callback_prefixes": ["http://127.0.0.1:9/"]},
}})


@pytest.fixture
async def client() -> AsyncIterator[Client]:
    env = make_env()
    runtime = fake_runtime(env.settings, CALLERS, env.store,
                           env.queue, env.cache, MemoryLease(env.clock, 10_000), env.clock,
                           env.metrics, pings={})
    app = build_app(runtime, env.service)
    contract = check_contract(app)  # every exchange against openapi.yaml
    c: Client = TestClient(TestServer(app))
    await c.start_server()
    try:
        yield c
    finally:
        await c.close()
    contract.assert_clean()


def assert_strict_csp(headers: object) -> None:
    csp = headers["Content-Security-Policy"]  # type: ignore[index]
    assert "default-src 'none'" in csp
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp and "unsafe-eval" not in csp
    assert headers["X-Content-Type-Options"] == "nosniff"  # type: ignore[index]


@pytest.mark.parametrize("path", ["/ops", "/ops/"])
async def test_the_page_needs_no_token(client: Client, path: str) -> None:
    resp = await client.get(path)
    assert resp.status == 200
    assert resp.content_type == "text/html"
    assert resp.headers["Cache-Control"] == "no-store"
    assert_strict_csp(resp.headers)
    html = await resp.text()
    assert "<title>Ops console" in html
    # Script and styles come from files (the CSP allows no inline code).
    assert re.search(r'<script src="/ops/static/ops\.js" defer></script>', html)
    assert '<link rel="stylesheet" href="/ops/static/ops.css">' in html
    assert not re.search(r"<script>|<style>|\son[a-z]+=", html), "inline code"


@pytest.mark.parametrize(("name", "content_type"),
                         [("ops.js", "text/javascript"), ("ops.css", "text/css")])
async def test_the_assets_need_no_token(client: Client, name: str, content_type: str) -> None:
    resp = await client.get(f"/ops/static/{name}")
    assert resp.status == 200
    assert resp.content_type == content_type
    assert_strict_csp(resp.headers)
    assert await resp.read() == files("trigger_service.http").joinpath("static", name).read_bytes()


@pytest.mark.parametrize("name", ["ops.html", "../app.py", "%2e%2e%2fapp.py", "missing.js"])
async def test_only_the_listed_assets_are_served(client: Client, name: str) -> None:
    resp = await client.get(f"/ops/static/{name}")
    assert resp.status == 404
    assert (await resp.json())["error"] == "not_found"


async def test_the_api_still_needs_a_token(client: Client) -> None:
    resp = await client.get("/v1/dead-letters")
    assert resp.status == 401


def test_the_script_builds_no_html_from_strings() -> None:
    """Values reach the page as text nodes only: no sink that parses HTML or code."""
    js = files("trigger_service.http").joinpath("static", "ops.js").read_text()
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(",
                 "new Function", "DOMParser", "createContextualFragment"):
        assert sink not in js, sink
