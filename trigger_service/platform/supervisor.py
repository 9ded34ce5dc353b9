"""One supervisor per process: start every task, wait for the first failure or SIGTERM/SIGINT,
stop intake, let the tasks drain within a grace period, cancel what is left, report errors.

Also the two loop shapes every component uses: :func:`every` (a periodic step that survives
a dependency outage) and :func:`run_together` (child loops that live and die together).
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import structlog

from trigger_service.core.errors import AdapterError

log = structlog.get_logger(__name__)

Runner = Callable[[asyncio.Event], Coroutine[Any, Any, None]]


async def every(
    stop: asyncio.Event, period_s: float, step: Callable[[], Awaitable[object]], *, name: str
) -> None:
    """Run ``step`` now and then every ``period_s`` until ``stop`` (returns promptly on it).

    An ``AdapterError`` (Cassandra, SQS or Redis away) is logged and the loop goes on: the
    dependency may come back and the next round retries. Anything else propagates to the
    supervisor, which stops the process.
    """
    while not stop.is_set():
        try:
            await step()
        except AdapterError as e:
            log.warning("periodic_step_failed", step=name, error=str(e))
        try:
            await asyncio.wait_for(stop.wait(), timeout=period_s)
        except TimeoutError:
            pass


async def run_together(stop: asyncio.Event, loops: list[Coroutine[Any, Any, None]]) -> None:
    """Run ``loops`` until ``stop`` is set or one of them fails; then cancel the rest.

    A loop's exception is re-raised here (after the others are cancelled and awaited); a loop
    that returns early is fine (it had nothing more to do).
    """
    tasks = [asyncio.create_task(c) for c in loops]
    stop_wait = asyncio.create_task(stop.wait())
    try:
        pending: set[asyncio.Task[Any]] = {*tasks, stop_wait}
        while not stop.is_set():
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for t in done:
                if t is not stop_wait and t.exception() is not None:
                    raise t.exception()  # type: ignore[misc]
            if stop_wait in done or not (pending - {stop_wait}):
                return
    finally:
        for t in [*tasks, stop_wait]:
            t.cancel()
        await asyncio.gather(*tasks, stop_wait, return_exceptions=True)


async def supervise(runners: dict[str, Runner], *, grace_s: float = 15.0) -> int:
    """Run ``runner(stop)`` for each entry until a signal or a failure; return an exit code.

    Each runner must return soon after ``stop`` is set (that is its drain). A runner that
    returns or raises before ``stop`` is set is a failure: everything else is stopped.
    """
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    tasks: dict[asyncio.Task[None], str] = {
        asyncio.create_task(r(stop), name=name): name for name, r in runners.items()}
    stop_wait = asyncio.create_task(stop.wait())
    try:
        done, _ = await asyncio.wait([*tasks, stop_wait], return_when=asyncio.FIRST_COMPLETED)
        code = _report_early_exits(done, stop_wait, stop.is_set())
        stop.set()
        await _drain(tasks, grace_s)
        for t, name in tasks.items():
            if not t.cancelled() and t.exception() is not None:
                code = 1
                log.error("task_failed", task=name, error=repr(t.exception()))
    finally:
        stop_wait.cancel()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
    return code


def _report_early_exits(done: set[asyncio.Task[Any]], stop_wait: asyncio.Task[Any],
                        stopping: bool) -> int:
    """1 if a runner ended before it was asked to. A runner that returns in the same loop
    turn as the signal (its drain was quick) is not early: ``stop`` was already set."""
    code = 0
    if stopping:
        log.info("shutdown_requested")
    for t in done:
        if t is stop_wait:
            continue
        if stopping and t.exception() is None:
            continue
        code = 1
        exc = t.exception()
        log.error("task_stopped_unexpectedly", task=t.get_name(),
                  error=repr(exc) if exc else "returned")
    return code


async def _drain(tasks: dict[asyncio.Task[None], str], grace_s: float) -> None:
    pending = [t for t in tasks if not t.done()]
    if not pending:
        return
    _, still = await asyncio.wait(pending, timeout=grace_s)
    for t in still:
        log.warning("task_cancelled_after_grace", task=tasks[t])
        t.cancel()
    await asyncio.gather(*still, return_exceptions=True)
