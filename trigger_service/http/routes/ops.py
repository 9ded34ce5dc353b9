"""``GET /v1/ops/overview`` (operators and viewers): the durable counters, dead letters by
reason, queue depths, each caller's circuit per callback origin and the fire lag of the last
5 minutes.

Breaker states and lag come from the ``OpsBoard`` the dispatchers publish to every second
(wherever they run); a board or SQS that does not answer leaves those parts empty (``[]``,
``null``) rather than failing the page. Only the counters need Cassandra (503 without it).
"""

from __future__ import annotations

import asyncio
from typing import Any

import structlog
from aiohttp import web

from trigger_service.core.dead_letters import DeadLetterReason
from trigger_service.core.errors import AdapterError
from trigger_service.core.ports.ops import BreakerView
from trigger_service.core.time.lag import LAG_WINDOW_S, percentile_s, window_slots
from trigger_service.core.time.timing import format_rfc3339_ms
from trigger_service.http.auth import require_ops
from trigger_service.http.keys import RUNTIME_KEY
from trigger_service.platform.wiring import Runtime

log = structlog.get_logger(__name__)

DEAD_LETTER_REASONS = tuple(r.value for r in DeadLetterReason)  # each counted, 0 or more
_SEVERITY = {"closed": 0, "half_open": 1, "open": 2}
_SQS_TIMEOUT_S = 3


async def queue_depths(runtime: Runtime) -> dict[str, int | None]:
    """Main queue and DLQ depths (None when SQS does not answer); sets ``queue_depth``."""
    try:
        main, dlq = await asyncio.wait_for(asyncio.gather(
            runtime.queue.visible_backlog(), runtime.queue.dead_letter_backlog()),
            timeout=_SQS_TIMEOUT_S)
    except (AdapterError, TimeoutError) as e:
        log.warning("queue_depth_unavailable", error=str(e))
        return {"main": None, "deadLetter": None}
    runtime.metrics.set("queue_depth", main, queue="main")
    runtime.metrics.set("queue_depth", dlq, queue="dead_letter")
    return {"main": main, "deadLetter": dlq}


def merge_breakers(views: list[BreakerView]) -> list[dict[str, str]]:
    """One entry per (caller, origin): the worst state any dispatcher has for it (the latest
    change among equals), sorted by caller and origin."""
    worst: dict[tuple[str, str], BreakerView] = {}
    for v in views:
        seen = worst.get((v.caller, v.origin))
        if seen is None or ((_SEVERITY.get(v.state, 0), v.changed_at_ms)
                            > (_SEVERITY.get(seen.state, 0), seen.changed_at_ms)):
            worst[(v.caller, v.origin)] = v
    return [{"caller": c, "origin": o, "state": v.state,
             "updatedAt": format_rfc3339_ms(v.changed_at_ms)}
            for (c, o), v in sorted(worst.items())]


def lag_view(counts: list[int] | None) -> dict[str, Any]:
    def ms(q: float) -> float | None:
        value = percentile_s(counts, q) if counts else None
        return None if value is None else round(value * 1000, 1)

    return {"windowS": LAG_WINDOW_S, "count": sum(counts) if counts else 0,
            "p50Ms": ms(0.50), "p95Ms": ms(0.95), "p99Ms": ms(0.99)}


async def _board(runtime: Runtime) -> tuple[list[BreakerView], list[int] | None]:
    now_ms = runtime.clock.now_ms()
    try:
        return (await runtime.board.read_breakers(now_ms),
                await runtime.board.read_lag(window_slots(now_ms)))
    except AdapterError as e:
        log.warning("ops_board_unavailable", error=str(e))
        return [], None


async def overview(request: web.Request) -> web.Response:
    require_ops(request)
    runtime = request.app[RUNTIME_KEY]
    counters = await runtime.store.read_counters()
    by_reason = {r: counters.get(f'dead_lettered_total{{reason="{r}"}}', 0)
                 for r in DEAD_LETTER_REASONS}
    queues = await queue_depths(runtime)
    breakers, lag = await _board(runtime)
    return web.json_response({
        "counters": dict(sorted(counters.items())),
        "deadLetters": {"byReason": by_reason},
        "queues": queues,
        "breakers": merge_breakers(breakers),
        "lag": lag_view(lag),
    })


def add_routes(app: web.Application) -> None:
    app.router.add_get("/v1/ops/overview", overview)
