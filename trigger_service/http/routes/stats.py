"""``GET /v1/stats``: the durable counters, summed over every process and restart; a caller
sees only its own (those labelled with its name), an operator or viewer every one."""

from __future__ import annotations

from aiohttp import web

from trigger_service.http.auth import scope_of
from trigger_service.http.keys import RUNTIME_KEY
from trigger_service.platform.metrics import caller_counters


async def stats(request: web.Request) -> web.Response:
    """``{"counters": {name: sum}}`` as flushed by each process (every few seconds and when
    it stops). For an ops token: every counter (deliveries, duplicates
    ``duplicate_messages_total``, ``duplicate_deliveries_total``, takeovers, leaks healed,
    dead letters...). For a caller's token: only its own, e.g.
    ``deliveries_total{caller="orders",outcome="fired"}``; the service-wide ones describe
    every tenant's traffic, so a caller does not see them."""
    scope = scope_of(request)
    counters = await request.app[RUNTIME_KEY].store.read_counters()
    if scope is not None:
        counters = caller_counters(counters, scope)
    return web.json_response({"counters": dict(sorted(counters.items()))})


def add_routes(app: web.Application) -> None:
    app.router.add_get("/v1/stats", stats)
