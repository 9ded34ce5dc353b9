"""The callback receiver: an in-process aiohttp server on 127.0.0.1 that records every
delivery (trigger id, arrival ms, attempt header, the payload's key) and answers 200.

The arrival time is taken first thing in the handler; the registering client shares the
event loop, which can only make an arrival look later, never earlier."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from bench.chaos.stack import now_ms


@dataclass(frozen=True)
class Delivery:
    trigger_id: str
    at_ms: int
    attempt: int
    key: str | None
    body_trigger_id: str | None
    fire_at: str | None


@dataclass
class Receiver:
    port: int
    deliveries: list[Delivery] = field(default_factory=list)
    _runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/{tail:.*}", self.handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def handle(self, request: web.Request) -> web.Response:
        at = now_ms()
        raw = await request.read()
        try:
            body: Any = json.loads(raw)
        except ValueError:
            body = {}
        payload = body.get("payload") if isinstance(body, dict) else None
        key = payload.get("key") if isinstance(payload, dict) else None
        self.deliveries.append(Delivery(
            request.headers.get("X-Trigger-Id", ""), at,
            int(request.headers.get("X-Trigger-Attempt", "0") or 0), key,
            body.get("triggerId") if isinstance(body, dict) else None,
            body.get("fireAt") if isinstance(body, dict) else None))
        return web.Response(status=200)

    def delivered_ids(self) -> set[str]:
        return {d.trigger_id for d in self.deliveries}
