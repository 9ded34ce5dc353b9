"""``python -m dispatcher``: one dispatcher process."""

from __future__ import annotations

import asyncio
import sys

import structlog

from dispatcher.dispatcher import Dispatcher
from dispatcher.http_channel import HttpChannel
from trigger_service.errors import TriggerError
from trigger_service.logs import configure_logging
from trigger_service.loop import run_loop
from trigger_service.runtime import Runtime
from trigger_service.settings import Settings
from trigger_service.supervisor import supervise

log = structlog.get_logger("dispatcher")


async def serve(settings: Settings) -> int:
    runtime = await Runtime.open(settings)
    channel = HttpChannel(settings.dispatch.callback_timeout_s)
    await channel.open()
    dispatcher = Dispatcher(settings, runtime.store, runtime.queue, channel, runtime.callers,
                            runtime.clock, runtime.metrics)

    async def report(stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), timeout=60)
            except TimeoutError:
                log.info("dispatcher_metrics", inflight=dispatcher.inflight,
                         **runtime.metrics.snapshot())

    log.info("dispatcher_started", queue=runtime.queue.queue_url)
    try:
        return await supervise({"dispatch": dispatcher.run, "report": report},
                               grace_s=settings.dispatch.callback_timeout_s + 5)
    finally:
        log.info("dispatcher_stopped", **runtime.metrics.snapshot())
        await channel.close()
        await runtime.close()


def main() -> None:
    try:
        settings = Settings.from_env()
    except TriggerError as e:
        print(f"dispatcher: {e}", file=sys.stderr)
        sys.exit(2)
    configure_logging(settings.log_level, settings.log_format)
    try:
        sys.exit(run_loop(serve(settings)))
    except TriggerError as e:
        log.error("startup_failed", error=str(e))
        sys.exit(1)


if __name__ == "__main__":
    main()
