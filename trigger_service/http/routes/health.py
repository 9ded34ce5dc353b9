"""``/healthz`` (alive), ``/readyz`` (dependencies reachable, checked at most once a second:
``http.readiness``), ``/metrics`` (Prometheus; with
``TRIGGER_METRICS_TOKEN`` set it needs ``Authorization: Bearer <it>``, else 401; production
refuses a public address without one)."""

from __future__ import annotations

from aiohttp import web

from trigger_service.core.errors import NotReady, Unauthorized
from trigger_service.http.keys import RUNTIME_KEY
from trigger_service.http.readiness import Readiness
from trigger_service.http.routes.ops import queue_depths
from trigger_service.platform.metrics import CONTENT_TYPE, metrics_authorized

READINESS_KEY = web.AppKey("readiness", Readiness)


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    """200 when every dependency answered at the last check (at most a second old); else
    ``503 not_ready`` with the ``down`` list."""
    down = await request.app[READINESS_KEY].down()
    if down:
        raise NotReady(f"unreachable: {', '.join(down)}", down=down)
    return web.json_response({"status": "ready"})


async def metrics(request: web.Request) -> web.Response:
    """prometheus_client's text format; in multiprocess mode every process of this host
    (the dispatchers' fire lag too). Queue depths are read from SQS for each scrape."""
    runtime = request.app[RUNTIME_KEY]
    if not metrics_authorized(request.headers.get("Authorization", ""),
                              runtime.settings.metrics_token):
        raise Unauthorized("missing or wrong metrics token")
    await queue_depths(runtime)
    return web.Response(body=runtime.metrics.exposition(aggregate=True),
                        headers={"Content-Type": CONTENT_TYPE})


def add_routes(app: web.Application) -> None:
    runtime = app[RUNTIME_KEY]
    app[READINESS_KEY] = Readiness(runtime.clock, runtime.health_checks())
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
