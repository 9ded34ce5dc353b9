"""``/healthz`` (alive), ``/readyz`` (dependencies reachable), ``/metrics`` (counters)."""

from __future__ import annotations

import asyncio

from aiohttp import web

from trigger_service.core.errors import NotReady
from trigger_service.http.keys import RUNTIME_KEY
from trigger_service.platform.metrics import prometheus_text

_CHECK_TIMEOUT_S = 3


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    """200 when every dependency answers; else ``503 not_ready`` with the ``down`` list."""
    checks = request.app[RUNTIME_KEY].health_checks()
    results = await asyncio.gather(
        *(asyncio.wait_for(c.ping(), timeout=_CHECK_TIMEOUT_S) for c in checks.values()),
        return_exceptions=True)
    down = [name for name, r in zip(checks, results, strict=True) if isinstance(r, BaseException)]
    if down:
        raise NotReady(f"unreachable: {', '.join(down)}", down=down)
    return web.json_response({"status": "ready"})


async def metrics(request: web.Request) -> web.Response:
    return web.Response(text=prometheus_text(request.app[RUNTIME_KEY].metrics.snapshot()),
                        content_type="text/plain")


def add_routes(app: web.Application) -> None:
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
