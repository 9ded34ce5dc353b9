"""One supervisor per process: start every task, wait for the first failure or SIGTERM/SIGINT,
stop intake, let the tasks drain within a grace period, cancel what is left, report errors.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import structlog

from trigger_service.errors import AdapterError

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
    code = 0
    try:
        done, _ = await asyncio.wait([*tasks, stop_wait], return_when=asyncio.FIRST_COMPLETED)
        for t in done:
            if t is stop_wait:
                log.info("shutdown_requested")
                continue
            code = 1
            exc = t.exception()
            log.error("task_stopped_unexpectedly", task=t.get_name(),
                      error=repr(exc) if exc else "returned")
        stop.set()
        pending = [t for t in tasks if not t.done()]
        if pending:
            _, still = await asyncio.wait(pending, timeout=grace_s)
            for t in still:
                log.warning("task_cancelled_after_grace", task=tasks[t])
                t.cancel()
            await asyncio.gather(*still, return_exceptions=True)
        for t, name in tasks.items():
            if t.cancelled():
                continue
            exc = t.exception()
            if exc is not None:
                code = 1
                log.error("task_failed", task=name, error=repr(exc))
    finally:
        stop_wait.cancel()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
    return code
