"""``python -m dispatcher``: one dispatcher process."""

from __future__ import annotations

import asyncio

import structlog

from dispatcher.dispatcher import Dispatcher
from dispatcher.http_channel import HttpChannel
from trigger_service.process import run_process
from trigger_service.runtime import Runtime
from trigger_service.settings import Settings
from trigger_service.supervisor import every, supervise

log = structlog.get_logger("dispatcher")


async def serve(settings: Settings) -> int:
    runtime = await Runtime.open(settings)
    channel = HttpChannel(settings.dispatch.callback_timeout_s)
    await channel.open()
    dispatcher = Dispatcher(settings, runtime.store, runtime.queue, channel, runtime.callers,
                            runtime.clock, runtime.metrics)

    async def report(stop: asyncio.Event) -> None:
        async def line() -> None:
            log.info("dispatcher_metrics", inflight=dispatcher.inflight,
                     **runtime.metrics.snapshot())

        await every(stop, 60, line, name="report")

    log.info("dispatcher_started", queue=runtime.queue.queue_url)
    try:
        return await supervise({"dispatch": dispatcher.run, "report": report},
                               grace_s=settings.dispatch.callback_timeout_s + 5)
    finally:
        log.info("dispatcher_stopped", **runtime.metrics.snapshot())
        await channel.close()
        await runtime.close()


def main() -> None:
    run_process("dispatcher", serve)


if __name__ == "__main__":
    main()
