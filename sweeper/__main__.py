"""``python -m sweeper``: one sweeper process (run several; they share the shards)."""

from __future__ import annotations

import asyncio
import sys

import structlog

from sweeper.sweeper import Sweeper
from trigger_service.errors import TriggerError
from trigger_service.logs import configure_logging
from trigger_service.loop import run_loop
from trigger_service.redis_lease import RedisLease
from trigger_service.runtime import Runtime
from trigger_service.settings import Settings
from trigger_service.supervisor import supervise

log = structlog.get_logger("sweeper")


async def serve(settings: Settings) -> int:
    runtime = await Runtime.open(settings)
    lease = RedisLease.from_url(settings.redis.url, int(settings.sweep.lease_ttl_s * 1000),
                                settings.sweep.group)
    sweeper = Sweeper(settings, runtime.store, runtime.queue, lease, runtime.clock,
                      runtime.metrics)

    async def report(stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), timeout=60)
            except TimeoutError:
                log.info("sweeper_metrics", owner=sweeper.owner, shards=len(sweeper.owned),
                         pending=sweeper.pending, **runtime.metrics.snapshot())

    log.info("sweeper_started", owner=sweeper.owner)
    try:
        return await supervise({"sweep": sweeper.run, "report": report})
    finally:
        log.info("sweeper_stopped", owner=sweeper.owner, **runtime.metrics.snapshot())
        await lease.close()
        await runtime.close()


def main() -> None:
    try:
        settings = Settings.from_env()
    except TriggerError as e:
        print(f"sweeper: {e}", file=sys.stderr)
        sys.exit(2)
    configure_logging(settings.log_level, settings.log_format)
    try:
        sys.exit(run_loop(serve(settings)))
    except TriggerError as e:
        log.error("startup_failed", error=str(e))
        sys.exit(1)


if __name__ == "__main__":
    main()
