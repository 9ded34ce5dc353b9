"""The ops console's "Paused callers" section in a real headless Chromium against the real
stack: an operator pauses the test caller (its paused trigger counted), then resumes it and
watches the resume job finish. Screenshots go to ``var/screenshots/``."""

from __future__ import annotations

import pytest
from playwright.async_api import Browser, expect

from tests.integration.conftest import Stack
from tests.integration.test_ops_page import DESKTOP, Console, browser, chromium  # noqa: F401

pytestmark = pytest.mark.integration


async def test_operator_pauses_and_resumes_a_caller(
        stack: Stack, browser: Browser) -> None:  # noqa: F811 (the fixture imported)
    status, got, _ = await stack.post(stack.body(delaySeconds=600))
    assert status == 201
    tid = got["triggerId"]
    resp = await stack.client.post(f"/v1/triggers/{tid}/pause", headers=stack.auth())
    assert resp.status == 200
    console = await Console.open(browser, stack, DESKTOP)
    page = console.page
    await console.sign_in(stack.token + "-ops")
    await page.fill("#pause-caller", stack.caller)
    await page.click("#pause-caller-button")
    await console.confirm()
    row = page.locator("#pc-rows tr", has_text=stack.caller)
    await expect(row).to_have_count(1)
    await expect(row.locator("td").nth(2)).to_have_text("1")
    await console.shot("ops-paused-callers.png", full_page=True)
    await page.select_option("#resume-policy", "latest")
    await row.locator("button").click()
    await console.confirm()
    await expect(page.locator("#resume-text")).to_contain_text("1 of 1 resumed, 0 failed (done)")
    await expect(row).to_have_count(0)
    await console.shot("ops-caller-resumed.png", full_page=True)
    view = await stack.wait_status(tid, "PENDING")
    assert view["status"] == "PENDING"
    await console.close()
