"""``python -m trigger_service``: the HTTP API."""

from __future__ import annotations

import asyncio

import structlog
from aiohttp import web

from trigger_service.api import build_app
from trigger_service.process import run_process
from trigger_service.runtime import Runtime
from trigger_service.service import TriggerService
from trigger_service.settings import Settings
from trigger_service.supervisor import supervise

log = structlog.get_logger("trigger_service")


async def serve(settings: Settings) -> int:
    runtime = await Runtime.open(settings)
    service = TriggerService(
        settings, runtime.store, runtime.queue, runtime.cache, runtime.clock, runtime.metrics)
    app = build_app(runtime, service)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, settings.api.host, settings.api.port, backlog=1024)

    async def http(stop: asyncio.Event) -> None:
        await site.start()
        log.info("api_listening", url=f"http://{settings.api.host}:{settings.api.port}")
        await stop.wait()
        # Drain: stop accepting, let in-flight requests finish, then flush queued sends.
        await runner.cleanup()
        await service.close()

    try:
        return await supervise({"http": http})
    finally:
        await runtime.close()


def main() -> None:
    run_process("trigger_service", serve)


if __name__ == "__main__":
    main()
