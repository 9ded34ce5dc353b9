"""The ops console's "Endpoints" panel in a real headless Chromium against the real stack:
a disabled endpoint of the test caller is listed (caller, origin, failing since, failures,
last error), and an operator enables it with a "replay held since" time. Screenshots go to
``var/screenshots/``."""

from __future__ import annotations

import time

import pytest
from playwright.async_api import Browser, expect

from tests.integration.conftest import Stack
from tests.integration.test_ops_page import DESKTOP, Console, browser, chromium  # noqa: F401
from trigger_service.core.endpoint_health import failed_again, first_failure
from trigger_service.core.urls import callback_origin

pytestmark = pytest.mark.integration


async def test_operator_sees_a_disabled_endpoint_and_enables_it(
        stack: Stack, browser: Browser) -> None:  # noqa: F811 (the fixture imported)
    # The record a dispatcher would have written after days of 503s (the dispatcher's part:
    # tests/integration/test_endpoint_health.py).
    origin = callback_origin(stack.receiver.base_url)
    now_ms = int(time.time() * 1000)
    health = stack.runtime.endpoint_health
    h = await health.note_first_failure(first_failure(stack.caller, origin,
                                                      now_ms - 5 * 86_400_000, "HTTP 503"), 100)
    assert h is not None
    h = failed_again(h, now_ms - 60_000, "HTTP 503 Service Unavailable", 4_211)
    assert await health.note_failures(h) and await health.mark_disabled(h, now_ms - 60_000)
    console = await Console.open(browser, stack, DESKTOP)
    try:
        page = console.page
        await console.sign_in(stack.token + "-ops")
        row = page.locator("#ep-rows tr", has_text=stack.caller)
        await expect(row).to_have_count(1)
        await expect(row.locator("td").nth(1)).to_have_text(origin)
        await expect(row.locator("td").nth(2)).to_have_text("disabled")
        await expect(row.locator("td").nth(4)).to_have_text("4,212")
        await expect(row.locator("td").nth(5)).to_have_text("HTTP 503 Service Unavailable")
        await console.shot("ops-endpoints.png", full_page=True)
        await page.fill("#ep-since", "2026-01-01T00:00:00")
        await row.locator("button").click()
        await console.confirm()
        await expect(row).to_have_count(0)
        await expect(page.locator("#notice")).to_contain_text(
            f"{origin} enabled for {stack.caller}")
        await console.shot("ops-endpoint-enabled.png", full_page=True)
        assert await health.endpoint_health(stack.caller) == []
    finally:
        await console.close()
