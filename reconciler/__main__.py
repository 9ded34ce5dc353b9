"""``python -m reconciler [--once]``: the periodic safety net (``--once``: a single pass)."""

from __future__ import annotations

import argparse
import sys

import structlog

from reconciler.reconciler import Reconciler
from trigger_service.errors import TriggerError
from trigger_service.logs import configure_logging
from trigger_service.loop import run_loop
from trigger_service.runtime import Runtime
from trigger_service.settings import Settings
from trigger_service.supervisor import supervise

log = structlog.get_logger("reconciler")


async def serve(settings: Settings, once: bool) -> int:
    runtime = await Runtime.open(settings)
    reconciler = Reconciler(settings, runtime.store, runtime.queue, runtime.clock,
                            runtime.metrics)
    try:
        if once:
            report = await reconciler.run_once()
            print(f"scanned {report.scanned}, re-injected {report.reinjected}")
            return 0
        return await supervise({"reconcile": reconciler.run})
    finally:
        await runtime.close()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m reconciler")
    parser.add_argument("--once", action="store_true", help="run a single pass and exit")
    args = parser.parse_args()
    try:
        settings = Settings.from_env()
    except TriggerError as e:
        print(f"reconciler: {e}", file=sys.stderr)
        sys.exit(2)
    configure_logging(settings.log_level, settings.log_format)
    try:
        sys.exit(run_loop(serve(settings, args.once)))
    except TriggerError as e:
        log.error("reconcile_failed", error=str(e))
        sys.exit(1)


if __name__ == "__main__":
    main()
