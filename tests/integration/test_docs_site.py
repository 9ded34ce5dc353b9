"""The docs site (``make docs``: mkdocs-material, ``--strict``) built into a temporary folder,
served as static files and opened in a real headless Chromium: the home page links every
page, the API reference holds every operation of ``openapi.yaml``, the settings page every
setting, and no page makes a failed request (no font or script from a CDN: the site works
offline) or a script error. Screenshots go to ``var/screenshots/docs-*.png``."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web
from playwright.async_api import Browser, expect

from tests.integration.helpers import free_port
from tests.integration.test_docs_page import METHODS, chromium_browser, collect_errors
from tests.integration.test_ops_page import DESKTOP, SHOTS
from tests.openapi_check import spec
from trigger_service.config.settings import REPO_ROOT, VARIABLES

pytestmark = pytest.mark.integration

__all__ = ["chromium_browser"]  # the fixture, shared with the API reference's test


@pytest.fixture
async def site(tmp_path: Path) -> AsyncIterator[str]:
    """The built site, served on a free local port: its base URL."""
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir",
         str(tmp_path)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"}, check=False)
    assert done.returncode == 0, done.stderr
    app = web.Application()
    app.router.add_static("/", tmp_path)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def test_three_pages_of_the_built_site_render(chromium_browser: Browser,
                                                    site: str) -> None:
    doc = spec()
    paths = [(m.upper(), p) for p, item in doc["paths"].items() for m in METHODS if m in item]
    context = await chromium_browser.new_context(viewport=DESKTOP)  # type: ignore[arg-type]
    page = await context.new_page()
    errors = collect_errors(page)
    page.on("requestfailed", lambda r: errors.append(f"request failed: {r.url}"))

    await page.goto(f"{site}/index.html")
    nav = page.locator("nav.md-nav--primary")
    # The nav by purpose: a page of each kind, the deployment pages and the glossary.
    for title in ("The five-minute tour", "Call the API", "API reference",
                  "Remind people (time zones, DST, rules)", "Deliver by email, SMS, push, inbox",
                  "Settings", "Deploy for production", "Run from the container image",
                  "Deploy on Kubernetes", "Upgrade, back up and restore", "Runbooks",
                  "Glossary", "Architecture", "Measure it yourself"):
        await expect(nav.get_by_text(title, exact=True).first).to_be_attached()
    await page.screenshot(path=str(SHOTS / "docs-home.png"))

    await page.goto(f"{site}/api-reference.html")
    content = page.locator("article.md-content__inner")
    text = await content.inner_text()
    missing = [f"{m} {p}" for m, p in paths if p not in text]
    assert missing == [], missing
    await page.screenshot(path=str(SHOTS / "docs-api-reference.png"))

    await page.goto(f"{site}/operations/settings.html")
    # Every setting, one table a process; the names renamed this release.
    *by_process, renamed = await page.locator(
        "article.md-content__inner table").all_inner_texts()
    every = "\n".join(by_process)
    assert [v.name for v in VARIABLES if v.name not in every] == []
    assert len(by_process) == 5 and "TRIGGER_DISPATCH_CALLBACK_TIMEOUT_S" in by_process[1]
    assert "TRIGGER_CALLBACK_TIMEOUT_S" in renamed
    await page.screenshot(path=str(SHOTS / "docs-settings.png"))
    await page.goto(f"{site}/operations/settings.html#every-setting-by-process")
    await page.screenshot(path=str(SHOTS / "docs-settings-by-process.png"))

    assert errors == []
    await context.close()
