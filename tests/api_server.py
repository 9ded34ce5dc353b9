"""``ApiTestServer``: aiohttp's ``TestServer`` on the API's own runner (``ApiRunner``), so
tests see the answers production gives to requests aiohttp cannot parse."""

from __future__ import annotations

from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestServer

from trigger_service.http.server import ApiRunner


class ApiTestServer(TestServer):
    async def _make_runner(self, **kwargs: Any) -> web.AppRunner:
        return ApiRunner(self.app, **kwargs)
