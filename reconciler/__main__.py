"""``python -m reconciler [--once | --rezone | --reencrypt]``: the periodic safety net and
the redrive mirror (poison messages SQS moved aside become FAILED triggers and dead letters).

``--once``: a single reconcile pass. ``--rezone``: a single rezone pass (wall-clock
occurrences resolved with older zone rules are resolved again and moved); the long-running
reconciler also runs one at start, so a deployment with a newer ``tzdata`` catches up.
``--reencrypt``: one pass that seals every signing secret, and every trigger row's payload
and plan, still in clear or under an older key under the current key
(docs/operations/security.md, "Encryption at rest"); exits 1 if a value could not be opened.
"""

from __future__ import annotations

import argparse

import structlog

from reconciler.reconciler import Reconciler
from reconciler.redrive import RedriveMirror
from reconciler.rezone import Rezoner
from trigger_service.config.settings import Settings
from trigger_service.core.errors import AdapterError
from trigger_service.platform.process import Component, main_for, run_process
from trigger_service.platform.wiring import Runtime

log = structlog.get_logger("reconciler")


async def build(runtime: Runtime) -> Component:
    try:
        await rezoner(runtime).run_once()
    except AdapterError as e:
        log.warning("rezone_at_start_failed", error=str(e))  # the next start tries again
    reconciler = Reconciler(runtime.settings, runtime.store, runtime.queue, runtime.clock,
                            runtime.metrics)
    mirror = RedriveMirror(runtime.settings, runtime.store, runtime.queue, runtime.clock,
                           runtime.metrics)
    return Component({"reconcile": reconciler.run, "redrive": mirror.run}, report=False)


def rezoner(runtime: Runtime) -> Rezoner:
    return Rezoner(runtime.settings, runtime.store, runtime.queue, runtime.clock,
                   runtime.metrics)


async def once(settings: Settings) -> int:
    runtime = await Runtime.open(settings)
    try:
        report = await Reconciler(settings, runtime.store, runtime.queue, runtime.clock,
                                  runtime.metrics).run_once()
        print(f"scanned {report.scanned}, re-injected {report.reinjected}")
        return 0
    finally:
        await runtime.close()


async def rezone_once(settings: Settings) -> int:
    runtime = await Runtime.open(settings)
    try:
        report = await rezoner(runtime).run_once()
        print(f"zone rules {report.current}: checked {report.checked}, moved {report.moved}")
        return 0
    finally:
        await runtime.close()


async def reencrypt_once(settings: Settings) -> int:
    runtime = await Runtime.open(settings)
    try:
        failed = 0
        for what, reseal in (("signing secrets", runtime.store.reseal_secrets),
                             ("trigger rows", runtime.store.reseal_triggers)):
            r = await reseal()
            failed += r.failed
            print(f"{what}: scanned {r.scanned}, resealed {r.resealed}, unreadable {r.failed}, "
                  f"changed meanwhile {r.raced}")
        return 1 if failed else 0
    finally:
        await runtime.close()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m reconciler")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--once", action="store_true", help="run a single pass and exit")
    mode.add_argument("--rezone", action="store_true",
                      help="re-resolve wall-clock occurrences under the current zone rules")
    mode.add_argument("--reencrypt", action="store_true",
                      help="seal stored secrets, payloads and plans under the current key")
    args = parser.parse_args()
    if args.once:
        run_process("reconciler", once)
    elif args.rezone:
        run_process("reconciler", rezone_once)
    elif args.reencrypt:
        run_process("reconciler", reencrypt_once)
    else:
        main_for("reconciler", build)


if __name__ == "__main__":
    main()
