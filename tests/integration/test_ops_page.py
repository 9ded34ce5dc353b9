"""The ops console (``GET /ops``) in a real headless Chromium against the real stack.

Debian's chromium (``infra/install.sh chromium``; ``make test`` runs it) driven by playwright's
async API; ``playwright install`` is never used. Triggers dead-letter for real (the receiver
answers 500, three attempts), then the page is used as an operator would: sign in, read the
overview, filter, open a dead letter, replay it, see it leave the list; a viewer may read but
not act; a bulk replay shows its progress. Screenshots go to ``var/screenshots/``.

The dead letters of every test share one keyspace and an ops token sees them all, so each
test filters by its own caller before it counts rows or replays in bulk.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Browser, BrowserContext, Page, async_playwright, expect

from tests.integration.conftest import Stack

pytestmark = pytest.mark.integration

CHROMIUM = Path(os.environ.get("CHROMIUM_BIN", "/usr/bin/chromium"))
SHOTS = Path(__file__).resolve().parents[2] / "var" / "screenshots"
DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}
# What a payload may try: markup that would run if the page ever parsed values as HTML.
XSS = '<img src=x onerror="window.__xss=1"><script>window.__xss=2</script>'
XSS_TAG = "campaign/spring-2027"  # a tag is plain (see core.tags); a label value may be markup

expect.set_options(timeout=15_000)


@pytest.fixture
def chromium() -> Path:
    """Debian's chromium (missing: the test fails, it is part of the suite); and the folder
    for the screenshots."""
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: run infra/install.sh chromium (make test does)")
    SHOTS.mkdir(parents=True, exist_ok=True)
    return CHROMIUM


@pytest.fixture
async def browser(chromium: Path) -> AsyncIterator[Browser]:
    async with async_playwright() as p:
        b = await p.chromium.launch(executable_path=str(chromium))
        try:
            yield b
        finally:
            await b.close()


class Console:
    """One browser context on the page, failing the test on any script error or CSP report
    (a broken page throws; it must not pass by showing nothing)."""

    def __init__(self, context: BrowserContext, page: Page) -> None:
        self.context = context
        self.page = page
        self.errors: list[str] = []
        page.on("pageerror", lambda e: self.errors.append(f"pageerror: {e}"))
        page.on("console", lambda m: self.errors.append(f"console: {m.text}")
                if m.type == "error" and not self._expected(m.text) else None)

    @staticmethod
    def _expected(text: str) -> bool:
        # The browser logs every non-2xx fetch; the tests provoke 403s (viewer) on purpose.
        return "status of 403" in text or "status of 404" in text

    @classmethod
    async def open(cls, browser: Browser, stack: Stack, viewport: dict[str, int],
                   **options: Any) -> Console:
        # The browser's zone is UTC, so a datetime-local filter value is a UTC time here.
        context = await browser.new_context(viewport=viewport,  # type: ignore[arg-type]
                                            timezone_id="UTC", **options)
        console = cls(context, await context.new_page())
        resp = await console.page.goto(str(stack.client.make_url("/ops")))
        assert resp is not None and resp.status == 200
        return console

    async def sign_in(self, token: str) -> None:
        page = self.page
        await expect(page.locator("#login")).to_be_visible()
        await expect(page.locator("#console")).to_be_hidden()
        await page.fill("#token", token)
        await page.click("#login-form button[type=submit]")
        await expect(page.locator("#console")).to_be_visible()
        await expect(page.locator("#login")).to_be_hidden()

    async def filter(self, **fields: str) -> None:
        page = self.page
        if "reason" in fields:
            await page.select_option("#f-reason", fields["reason"])
        for name, selector in (("caller", "#f-caller"), ("callbackPrefix", "#f-prefix"),
                               ("since", "#f-since"), ("until", "#f-until")):
            if name in fields:
                await page.fill(selector, fields[name])
        await page.click("#apply")

    def rows(self) -> Any:
        return self.page.locator("#dl-rows tr")

    def row(self, trigger_id: str) -> Any:
        return self.page.locator(f'#dl-rows tr[data-trigger-id="{trigger_id}"]')

    async def open_detail(self, trigger_id: str) -> None:
        await self.row(trigger_id).locator("button.open").click()
        await expect(self.page.locator("#detail")).to_be_visible()

    async def confirm(self) -> None:
        await expect(self.page.locator("#confirm")).to_be_visible()
        await self.page.click("#confirm-ok")
        await expect(self.page.locator("#confirm")).to_be_hidden()

    async def shot(self, name: str, *, full_page: bool = False) -> None:
        await self.page.screenshot(path=str(SHOTS / name), full_page=full_page)

    async def close(self) -> None:
        xss = await self.page.evaluate("window.__xss")
        await self.context.close()
        assert xss is None, "a value was parsed as HTML and ran"
        assert self.errors == []


async def dead_letters(stack: Stack, want: int, timeout_s: float = 60) -> list[dict[str, Any]]:
    """The test caller's dead letters (through the API, operator token) once there are
    ``want`` of them."""
    deadline = time.monotonic() + timeout_s
    while True:
        resp = await stack.client.get("/v1/dead-letters", params={"caller": stack.caller},
                                      headers=stack.auth(stack.token + "-ops"))
        assert resp.status == 200, await resp.text()
        items: list[dict[str, Any]] = (await resp.json())["items"]
        if len(items) >= want or time.monotonic() >= deadline:
            assert len(items) == want, items
            return items
        await asyncio.sleep(0.5)


async def failing_triggers(stack: Stack, *bodies: dict[str, Any]) -> list[str]:
    """Create triggers whose every attempt fails (500); wait until all are dead letters."""
    stack.receiver.default_status = 500
    await stack.start_dispatcher()
    ids = []
    for body in bodies:
        status, created, _ = await stack.post(body)
        assert status == 201, created
        ids.append(created["triggerId"])
    items = await dead_letters(stack, len(ids))
    assert {i["triggerId"] for i in items} == set(ids)
    return ids


async def overview_status(stack: Stack) -> int:
    resp = await stack.client.get("/v1/ops/overview", headers=stack.auth(stack.token + "-ops"))
    return resp.status


async def test_operator_filters_opens_and_replays(stack: Stack, browser: Browser) -> None:
    rec = stack.receiver
    a, b, c = await failing_triggers(
        stack,
        stack.body(delaySeconds=0, payload={"order": 1, "note": XSS}, tags=["vip", XSS_TAG],
                   labels={"team": XSS}),
        stack.body(delaySeconds=0, payload={"order": 2}),
        stack.body(delaySeconds=0, payload={"order": 3},
                   callbackUrl=rec.base_url + "other/path"))

    ui = await Console.open(browser, stack, DESKTOP)
    page = ui.page
    await ui.sign_in(stack.token + "-ops")

    # The overview: numbers when the endpoint exists, a plain message when it does not.
    if await overview_status(stack) == 200:
        await expect(page.locator("#overview-body")).to_be_visible()
        await expect(page.locator("#reasons")).to_contain_text("max_attempts")
        await expect(page.locator("#queues")).to_contain_text("Dead-letter queue")
    else:
        await expect(page.locator("#overview-message")).to_contain_text("404")

    # Filters: this caller's three, then the two whose callback starts with .../cb.
    await ui.filter(caller=stack.caller, reason="max_attempts")
    await expect(ui.rows()).to_have_count(3)
    await ui.filter(callbackPrefix=rec.base_url + "cb")
    await expect(ui.rows()).to_have_count(2)
    await expect(ui.row(c)).to_have_count(0)
    await expect(ui.row(a)).to_contain_text("max_attempts")
    await expect(ui.row(a)).to_contain_text(rec.base_url + "cb")
    # Time filters (datetime-local in the browser's zone, sent as UTC): dead an hour ago, none.
    now = datetime.now(UTC)
    await ui.filter(until=f"{now - timedelta(hours=1):%Y-%m-%dT%H:%M:%S}")
    await expect(ui.rows()).to_have_count(0)
    await expect(page.locator("#dl-message")).to_contain_text("No dead letters match")
    await ui.filter(until="", since=f"{now - timedelta(minutes=10):%Y-%m-%dT%H:%M:%S}")
    await expect(ui.rows()).to_have_count(2)
    await ui.shot("ops-list.png", full_page=True)

    # The detail: three attempts answered 500, the payload as text (markup not run).
    await ui.open_detail(a)
    await expect(page.locator("#attempt-rows tr")).to_have_count(3)
    for n in range(3):
        await expect(page.locator("#attempt-rows tr").nth(n)).to_contain_text("500")
    await expect(page.locator("#payload")).to_contain_text(json.dumps(XSS))  # pretty JSON
    await expect(page.locator("#payload img, #payload script")).to_have_count(0)
    await expect(page.locator("#detail-fields")).to_contain_text(a)
    # Its trigger's tags and labels, as text (a label's markup not run).
    await expect(page.locator("#detail-fields")).to_contain_text(f"vip, {XSS_TAG}, team:{XSS}")
    await expect(page.locator("#detail-fields img, #detail-fields script")).to_have_count(0)
    await ui.shot("ops-detail.png")

    # Replay it (confirmed): it leaves the list, now and after a reload, and fires once more.
    rec.default_status = 200
    await page.click("#replay-one")
    await ui.confirm()
    await expect(page.locator("#detail")).to_be_hidden()
    await expect(page.locator("#notice")).to_contain_text("Replayed")
    await expect(ui.row(a)).to_have_count(0)
    await expect(ui.rows()).to_have_count(1)
    await page.click("#apply")
    await expect(ui.row(b)).to_have_count(1)
    await expect(ui.row(a)).to_have_count(0)
    assert await rec.wait_for(lambda: len(rec.for_trigger(a)) == 4, 20)
    assert (await stack.wait_status(a, "FIRED", 10))["status"] == "FIRED"
    await ui.close()

    # A phone: the same page in one column, nothing wider than the screen.
    phone = await Console.open(browser, stack, PHONE, is_mobile=True, has_touch=True,
                               device_scale_factor=2)
    await phone.sign_in(stack.token + "-ops")
    await phone.filter(caller=stack.caller)
    await expect(phone.rows()).to_have_count(2)
    await phone.shot("ops-phone.png", full_page=True)
    assert await phone.page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    await phone.open_detail(b)
    await expect(phone.page.locator("#attempt-rows tr")).to_have_count(3)
    await phone.shot("ops-phone-detail.png")
    assert await phone.page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    await phone.close()


async def test_viewer_reads_and_bulk_replay_shows_progress(stack: Stack,
                                                           browser: Browser) -> None:
    rec = stack.receiver
    ids = await failing_triggers(stack, *(stack.body(delaySeconds=0, payload={"n": n})
                                          for n in range(3)))

    # A viewer sees the list and a detail; purging is refused, said, and then disabled.
    viewer = await Console.open(browser, stack, DESKTOP)
    await viewer.sign_in(stack.token + "-viewer")
    await viewer.filter(caller=stack.caller)
    await expect(viewer.rows()).to_have_count(3)
    await viewer.open_detail(ids[0])
    await viewer.page.click("#purge-one")
    await viewer.confirm()
    await expect(viewer.page.locator("#detail-message")).to_contain_text("403")
    await expect(viewer.page.locator("#purge-one")).to_be_disabled()
    await expect(viewer.page.locator("#replay-one")).to_be_disabled()
    await viewer.page.click("#detail-close")
    await expect(viewer.page.locator("#bulk-replay")).to_be_disabled()
    await expect(viewer.rows()).to_have_count(3)  # nothing was purged
    await viewer.close()

    # An operator replays the filter in bulk: a progress bar to the end, an empty list.
    rec.default_status = 200
    ops = await Console.open(browser, stack, DESKTOP)
    await ops.sign_in(stack.token + "-ops")
    await ops.filter(caller=stack.caller)
    await expect(ops.rows()).to_have_count(3)
    await ops.page.click("#bulk-replay")
    await expect(ops.page.locator("#confirm-text")).to_contain_text(stack.caller)
    await ops.confirm()
    await expect(ops.page.locator("#bulk")).to_be_visible()
    await expect(ops.page.locator("#bulk-text")).to_contain_text("3 of 3 replayed", timeout=60_000)
    await expect(ops.page.locator("#bulk-progress")).to_have_js_property("value", 3)
    await expect(ops.rows()).to_have_count(0)
    await expect(ops.page.locator("#dl-message")).to_contain_text("No dead letters match")
    await ops.shot("ops-bulk.png")
    await ops.close()
    assert await rec.wait_for(lambda: all(len(rec.for_trigger(t)) == 4 for t in ids), 30)
    await dead_letters(stack, 0, timeout_s=0)


async def test_the_recipients_panel_counts_and_looks_up_by_id(
        stack: Stack, browser: Browser) -> None:
    for rid, zone in (("ada", "Asia/Tokyo"), ("bob", "Europe/Berlin")):
        resp = await stack.client.put(f"/v1/recipients/{rid}", headers=stack.auth(), json={
            "timeZone": zone, "phone": "+15551234567", "channels": ["sms", "email"],
            "quietHours": {"start": "22:00", "end": "07:00"}, "locale": "en-US"})
        assert resp.status == 201, await resp.text()
    console = await Console.open(browser, stack, DESKTOP)
    await console.sign_in(stack.token + "-viewer")
    page = console.page
    await page.fill("#rc-caller", stack.caller)
    await page.fill("#rc-id", "ada")
    await page.click("#rc-lookup")
    await expect(page.locator("#rc-body")).to_be_visible()
    await expect(page.locator("#rc-count dd")).to_have_text("2")
    await expect(page.locator("#rc-profile")).to_contain_text("Asia/Tokyo")
    await expect(page.locator("#rc-profile")).to_contain_text("22:00-07:00")
    await page.locator("#recipients").scroll_into_view_if_needed()
    await page.locator("#recipients").screenshot(path=str(SHOTS / "ops-recipients.png"))
    await page.fill("#rc-id", "nobody")
    await page.click("#rc-lookup")
    await expect(page.locator("#rc-profile")).to_contain_text("no recipient nobody")
    await console.close()


async def test_the_trigger_panel_shows_attempts_and_runs_a_series_now(
        stack: Stack, browser: Browser) -> None:
    """An operator looks up a trigger that failed twice then was delivered (its attempts
    newest first), then a daily series, and runs it now: one extra occurrence arrives."""
    await stack.start_dispatcher(retry_backoff_s=(1, 1, 1))
    rec = stack.receiver
    status, got, _ = await stack.post(stack.body(delaySeconds=1))
    assert status == 201, got
    flaky = got["triggerId"]
    rec.script[flaky] = [500, 503]
    status, got, _ = await stack.post(stack.body(delaySeconds=3600, rrule="FREQ=DAILY"))
    assert status == 201, got
    series = got["triggerId"]
    assert await rec.wait_for(lambda: any(a.attempt == 3 for a in rec.for_trigger(flaky)),
                              timeout_s=30)
    console = await Console.open(browser, stack, DESKTOP)
    await console.sign_in(stack.token + "-ops")
    page = console.page
    await page.fill("#tr-id", flaky)
    await page.click("#tr-lookup")
    await expect(page.locator("#tr-body")).to_be_visible()
    await expect(page.locator("#tr-rows tr")).to_have_count(3)
    outcomes = [await c.inner_text() for c in await page.locator(
        "#tr-rows td[data-label=Outcome]").all()]
    assert outcomes == ["delivered", "retry", "retry"]
    await expect(page.locator("#tr-fields")).to_contain_text("FIRED")
    await expect(page.locator("#tr-run")).to_be_hidden()  # finished: nothing to run
    await page.locator("#trigger").scroll_into_view_if_needed()
    await page.locator("#trigger").screenshot(path=str(SHOTS / "ops-trigger.png"))

    await page.fill("#tr-id", series)
    await page.click("#tr-lookup")
    await expect(page.locator("#tr-none")).to_be_visible()
    await page.click("#tr-run")
    await console.confirm()
    await expect(page.locator("#notice")).to_contain_text("Running")
    assert await rec.wait_for(lambda: len([a for a in rec.arrivals if a.headers.get(
        "X-Trigger-Occurrence-Id", "").endswith(".1") and a.trigger_id != flaky]) == 1,
        timeout_s=30)
    assert rec.for_trigger(series) == []  # the series itself keeps its schedule
    await console.close()
