"""``python -m reconciler [--once]``: the periodic safety net (``--once``: a single pass)."""

from __future__ import annotations

import argparse

from reconciler.reconciler import Reconciler
from trigger_service.process import run_process
from trigger_service.runtime import Runtime
from trigger_service.settings import Settings
from trigger_service.supervisor import supervise


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
    run_process("reconciler", lambda settings: serve(settings, args.once))


if __name__ == "__main__":
    main()
