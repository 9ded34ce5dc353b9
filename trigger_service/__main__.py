"""``python -m trigger_service``: the HTTP API."""

from __future__ import annotations

import asyncio
import sys

import structlog
from aiohttp import web

from trigger_service.api import build_app
from trigger_service.errors import TriggerError
from trigger_service.logs import configure_logging
from trigger_service.loop import run_loop
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
    try:
        settings = Settings.from_env()
    except TriggerError as e:
        print(f"trigger_service: {e}", file=sys.stderr)
        sys.exit(2)
    configure_logging(settings.log_level, settings.log_format)
    try:
        sys.exit(run_loop(serve(settings)))
    except TriggerError as e:
        log.error("startup_failed", error=str(e))
        sys.exit(1)


if __name__ == "__main__":
    main()
