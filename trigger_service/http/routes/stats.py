"""``GET /v1/stats``: the durable counters, summed over every process and restart."""

from __future__ import annotations

from aiohttp import web

from trigger_service.http.keys import RUNTIME_KEY


async def stats(request: web.Request) -> web.Response:
    """``{"counters": {name: sum}}``: deliveries, duplicates (``duplicate_messages_total``,
    ``duplicate_deliveries_total``), takeovers, leaks healed, dead letters... as flushed by
    each process (every few seconds and when it stops)."""
    counters = await request.app[RUNTIME_KEY].store.read_counters()
    return web.json_response({"counters": dict(sorted(counters.items()))})


def add_routes(app: web.Application) -> None:
    app.router.add_get("/v1/stats", stats)
