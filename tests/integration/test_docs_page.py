"""The API reference (``GET /docs``) in a real headless Chromium: it loads ``/openapi.json``
under the strict CSP with no script error, shows every operation, the webhook and every
schema, and its filter narrows the list. Screenshots go to ``var/screenshots/``
(``api-reference.png`` is the one in docs/)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from playwright.async_api import Browser, Page, async_playwright, expect

from tests.integration.conftest import Stack
from tests.integration.test_ops_page import CHROMIUM, DESKTOP, PHONE, SHOTS
from tests.openapi_check import spec

pytestmark = pytest.mark.integration

METHODS = ("get", "put", "post", "delete", "patch")


@pytest.fixture
async def chromium_browser() -> AsyncIterator[Browser]:
    """Debian's chromium, as the ops page's test uses it (missing: the test fails)."""
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: run infra/install.sh chromium (make test does)")
    SHOTS.mkdir(parents=True, exist_ok=True)
    async with async_playwright() as p:
        b = await p.chromium.launch(executable_path=str(CHROMIUM))
        try:
            yield b
        finally:
            await b.close()


def collect_errors(page: Page) -> list[str]:
    """Script errors and console errors of ``page`` as they happen."""
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(f"pageerror: {e}"))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    return errors


async def test_docs_render_every_operation_and_schema(chromium_browser: Browser,
                                                      stack: Stack) -> None:
    doc = spec()
    n_ops = sum(m in item for item in doc["paths"].values() for m in METHODS)
    for name, viewport in (("api-reference.png", DESKTOP), ("api-reference-phone.png", PHONE)):
        context = await chromium_browser.new_context(
            viewport=viewport)  # type: ignore[arg-type]
        page = await context.new_page()
        errors = collect_errors(page)
        resp = await page.goto(str(stack.client.make_url("/docs")))
        assert resp is not None and resp.status == 200
        await expect(page.locator("body[data-ready]")).to_have_count(1)
        await expect(page.locator("#operations section.op")).to_have_count(n_ops)
        await expect(page.locator("#webhooks section.op")).to_have_count(
            len(doc["webhooks"]))  # the callback, the caller's events
        await expect(page.locator("#schemas section.op")).to_have_count(
            len(doc["components"]["schemas"]))
        await expect(page.locator("#op-registerTrigger")).to_contain_text("Idempotency-Key")
        await expect(page.locator("#hook-callback")).to_contain_text("webhook-signature")
        await page.screenshot(path=str(SHOTS / name))
        await page.fill("#filter", "dead-letters")
        visible = page.locator("#nav-list li:visible")
        await expect(visible).to_have_count(6)
        assert errors == []
        await context.close()
