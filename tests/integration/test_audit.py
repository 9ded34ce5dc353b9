"""The audit log on the real stack (Cassandra, SQS, Redis, a dispatcher): an entry per
mutating request of the caller, refusals with their code, none of them in another caller's
listing, all of them in the operators' (with the operator's own actions by name); and the
ops console's Audit panel in a headless Chromium (a screenshot in var/screenshots/)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from aiohttp import web
from playwright.async_api import Browser, expect

from tests.integration.conftest import Stack
from tests.integration.test_dead_letters import wait_listed
from tests.integration.test_ops_page import DESKTOP, SHOTS, Console, browser, chromium
from trigger_service.http.routes.audit import AUDIT_KEY

pytestmark = pytest.mark.integration
__all__ = ["browser", "chromium"]  # the fixtures


async def _entries(stack: Stack, path: str, token: str, **params: str) -> list[dict[str, Any]]:
    """Every entry of a listing, all pages (after the writes in flight landed)."""
    app = stack.client.app
    assert isinstance(app, web.Application)
    await app[AUDIT_KEY].drain()
    items: list[dict[str, Any]] = []
    cursor = ""
    for _ in range(100):
        resp = await stack.client.get(path, headers=stack.auth(token),
                                      params={**params, **({"cursor": cursor} if cursor else {})})
        page = await resp.json()
        assert resp.status == 200, page
        items += page["items"]
        if not page["nextCursor"]:
            return items
        cursor = page["nextCursor"]
    raise AssertionError("the listing did not end")


async def _ok(stack: Stack, method: str, path: str, status: int = 200, **kw: Any) -> Any:
    resp = await stack.client.request(method, path, headers=stack.auth(), **kw)
    body = await resp.json()
    assert resp.status == status, body
    await asyncio.sleep(0.002)  # one entry a millisecond at least: the order is the calls'
    return body


async def test_every_action_is_audited_for_its_caller_and_operators(
        stack: Stack, browser: Browser) -> None:
    started = time.time()
    await stack.start_dispatcher(max_attempts=1)
    # Two dead letters (one to replay, one to purge).
    dead = []
    for _ in range(2):
        _, body, _ = await stack.post(stack.body(delaySeconds=1))
        stack.receiver.script[body["triggerId"]] = [500]
        dead.append(body["triggerId"])
    letters = {i["triggerId"]: i["id"] for i in await wait_listed(stack, 2)}
    replayed, purged = letters[dead[0]], letters[dead[1]]

    _, body, _ = await stack.post(stack.body(delaySeconds=3600))
    tid = body["triggerId"]
    # Run now fires its trigger at once, so it acts on a second one: a cancel after it
    # would race the delivery.
    _, body, _ = await stack.post(stack.body(delaySeconds=3600))
    ran = body["triggerId"]
    await _ok(stack, "POST", f"/v1/triggers/{tid}/pause")
    await _ok(stack, "POST", f"/v1/triggers/{tid}/resume", json={})
    await _ok(stack, "PATCH", f"/v1/triggers/{tid}", json={"payload": {"v": 2}})
    await _ok(stack, "POST", f"/v1/triggers/{ran}/run", 202)
    await _ok(stack, "DELETE", f"/v1/triggers/{tid}")
    await _ok(stack, "POST", f"/v1/triggers/{tid}/pause", 409)  # refused: recorded too
    await _ok(stack, "POST", f"/v1/dead-letters/{replayed}/replay", 202)
    await _ok(stack, "DELETE", f"/v1/dead-letters/{purged}")
    await _ok(stack, "POST", "/v1/signing-secrets/rotate", 201)
    await _ok(stack, "PUT", "/v1/recipients/ada", 201, json={"timeZone": "Europe/Berlin"})
    await _ok(stack, "DELETE", "/v1/recipients/ada")
    operator = stack.token + "-ops"
    resp = await stack.client.post(f"/v1/ops/callers/{stack.caller}/pause",
                                   headers=stack.auth(operator))
    assert resp.status == 200
    resp = await stack.client.post(f"/v1/ops/callers/{stack.caller}/resume",
                                   headers=stack.auth(operator), json={})
    assert resp.status == 202

    want = [("pause", tid, "ok"), ("resume", tid, "ok"), ("patch", tid, "ok"),
            ("run", ran, "ok"), ("cancel", tid, "ok"), ("pause", tid, "not_editable"),
            ("replay", replayed, "ok"), ("purge", purged, "ok"),
            ("rotate_secret", stack.caller, "ok"), ("recipient_put", "ada", "ok"),
            ("recipient_delete", "ada", "ok")]
    mine = await _entries(stack, "/v1/audit", stack.token)
    assert [(e["action"], e["target"], e["outcome"]) for e in reversed(mine)] == want
    assert {e["actor"] for e in mine} == {stack.caller}
    # Another caller sees none of them; the operators see them all, and their own.
    assert await _entries(stack, "/v1/audit", stack.token + "-other") == []
    theirs = await _entries(stack, "/v1/ops/audit", operator, actor=stack.caller)
    assert theirs == mine
    since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started - 1))
    ops = [(e["action"], e["outcome"]) for e in await _entries(
        stack, "/v1/ops/audit", operator, since=since)
        if e["target"] == stack.caller and e["actor"].endswith("_op")]  # this test's operator
    assert ops == [("caller_resume", "ok"), ("caller_pause", "ok")]
    resp = await stack.client.get("/v1/ops/audit", headers=stack.auth())
    assert resp.status == 403

    # The ops console's Audit panel: newest first, filtered by actor, a page at a time.
    console = await Console.open(browser, stack, DESKTOP)
    try:
        await console.sign_in(operator)
        page = console.page
        await page.fill("#au-actor", stack.caller)
        await page.click("#au-apply")
        rows = page.locator("#au-rows tr")
        await expect(rows).to_have_count(len(want))
        await expect(rows.first).to_contain_text("recipient_delete")
        await expect(rows.nth(5)).to_contain_text("not_editable")
        await page.locator("#audit").scroll_into_view_if_needed()
        SHOTS.mkdir(parents=True, exist_ok=True)
        await page.locator("#audit").screenshot(path=str(SHOTS / "ops-audit-desktop.png"))
    finally:
        await console.close()

