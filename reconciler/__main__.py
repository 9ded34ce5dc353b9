"""``python -m reconciler [--once]``: the periodic safety net (``--once``: a single pass) and
the redrive mirror (poison messages SQS moved aside become FAILED triggers and dead letters)."""

from __future__ import annotations

import argparse

from reconciler.reconciler import Reconciler
from reconciler.redrive import RedriveMirror
from trigger_service.config.settings import Settings
from trigger_service.platform.process import Component, main_for, run_process
from trigger_service.platform.wiring import Runtime


async def build(runtime: Runtime) -> Component:
    reconciler = Reconciler(runtime.settings, runtime.store, runtime.queue, runtime.clock,
                            runtime.metrics)
    mirror = RedriveMirror(runtime.settings, runtime.store, runtime.queue, runtime.clock,
                           runtime.metrics)
    return Component({"reconcile": reconciler.run, "redrive": mirror.run}, report=False)


async def once(settings: Settings) -> int:
    runtime = await Runtime.open(settings)
    try:
        report = await Reconciler(settings, runtime.store, runtime.queue, runtime.clock,
                                  runtime.metrics).run_once()
        print(f"scanned {report.scanned}, re-injected {report.reinjected}")
        return 0
    finally:
        await runtime.close()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m reconciler")
    parser.add_argument("--once", action="store_true", help="run a single pass and exit")
    if parser.parse_args().once:
        run_process("reconciler", once)
    else:
        main_for("reconciler", build)


if __name__ == "__main__":
    main()
