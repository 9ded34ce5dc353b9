"""``GET /v1/ops/flow`` (operators and viewers): flow control per key of a caller,
as the dispatchers publish it every second on the ``FlowBoard``: each key's bounds, its deliveries
open now (over every dispatcher) and the delay flow control added to the starts of the last
minute (the median of the dispatcher with the most of them; the maximum over all). A board
that does not answer leaves the list empty rather than failing the page."""

from __future__ import annotations

from typing import Any

import structlog
from aiohttp import web

from trigger_service.core.errors import AdapterError
from trigger_service.core.flow import FlowScope
from trigger_service.core.ports.flow import FlowView
from trigger_service.http.auth import require_ops
from trigger_service.http.keys import RUNTIME_KEY

log = structlog.get_logger(__name__)

WINDOW_S = 60  # dispatcher.flow_control.RECENT_S
MAX_KEYS = 100  # the busiest first (open now, then the longest delay)


def merge_flow(views: list[FlowView]) -> list[dict[str, Any]]:
    """One entry per key of a caller (``core.flow.FlowScope``: two callers' equal keys are
    two entries) over every dispatcher's view of it."""
    by_scope: dict[FlowScope, list[FlowView]] = {}
    for v in views:
        by_scope.setdefault(v.scope, []).append(v)
    rows: list[dict[str, Any]] = []
    for scope, vs in by_scope.items():
        busiest = max(vs, key=lambda v: v.recent)
        rows.append({"caller": scope.caller, "key": scope.key, "default": scope.default,
                     "ratePerSecond": busiest.rate_per_second,
                     "parallelism": busiest.parallelism,
                     "openNow": sum(v.open_now for v in vs),
                     "delayP50Seconds": round(busiest.delay_p50_s, 3),
                     "delayMaxSeconds": round(max(v.delay_max_s for v in vs), 3),
                     "recentStarts": sum(v.recent for v in vs), "dispatchers": len(vs)})
    rows.sort(key=lambda r: (-r["openNow"], -r["delayMaxSeconds"], r["caller"], r["key"]))
    return rows[:MAX_KEYS]


async def flow(request: web.Request) -> web.Response:
    require_ops(request)
    runtime = request.app[RUNTIME_KEY]
    try:
        views = await runtime.flow_board.read_flow(runtime.clock.now_ms())
    except AdapterError as e:
        log.warning("flow_board_unavailable", error=str(e))
        views = []
    return web.json_response({"windowS": WINDOW_S, "keys": merge_flow(views)})


def add_routes(app: web.Application) -> None:
    app.router.add_get("/v1/ops/flow", flow)
