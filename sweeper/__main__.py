"""``python -m sweeper``: one sweeper process (run several; they share the shards)."""

from __future__ import annotations

import asyncio

import structlog

from sweeper.sweeper import Sweeper
from trigger_service.process import run_process
from trigger_service.redis_lease import RedisLease
from trigger_service.runtime import Runtime
from trigger_service.settings import Settings
from trigger_service.supervisor import every, supervise

log = structlog.get_logger("sweeper")


async def serve(settings: Settings) -> int:
    runtime = await Runtime.open(settings)
    lease = RedisLease.from_url(settings.redis.url, int(settings.sweep.lease_ttl_s * 1000),
                                settings.sweep.group)
    sweeper = Sweeper(settings, runtime.store, runtime.queue, lease, runtime.clock,
                      runtime.metrics)

    async def report(stop: asyncio.Event) -> None:
        async def line() -> None:
            log.info("sweeper_metrics", owner=sweeper.owner, shards=len(sweeper.owned),
                     pending=sweeper.pending, **runtime.metrics.snapshot())

        await every(stop, 60, line, name="report")

    log.info("sweeper_started", owner=sweeper.owner)
    try:
        return await supervise({"sweep": sweeper.run, "report": report})
    finally:
        log.info("sweeper_stopped", owner=sweeper.owner, **runtime.metrics.snapshot())
        await lease.close()
        await runtime.close()


def main() -> None:
    run_process("sweeper", serve)


if __name__ == "__main__":
    main()
