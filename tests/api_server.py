"""``ApiTestServer``: aiohttp's ``TestServer`` on the API's own runner (``GuardedAppRunner``,
with the app's limit settings), so tests see the answers production gives to requests
aiohttp cannot parse."""

from __future__ import annotations

from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestServer

from trigger_service.http.keys import RUNTIME_KEY
from trigger_service.http.server import GuardedAppRunner


class ApiTestServer(TestServer):
    async def _make_runner(self, **kwargs: Any) -> web.AppRunner:
        runtime = self.app[RUNTIME_KEY]
        return GuardedAppRunner(self.app, runtime.settings.limits, runtime.metrics, **kwargs)
