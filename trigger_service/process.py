"""What every ``python -m <service>`` entry point shares: settings from the environment
(bad ones exit 2 naming the variable), logging, the uvloop event loop, and a periodic
metrics line."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Coroutine
from typing import Any

import structlog

from trigger_service.errors import TriggerError
from trigger_service.logs import configure_logging
from trigger_service.loop import run_loop
from trigger_service.settings import Settings

Serve = Callable[[Settings], Coroutine[Any, Any, int]]


def run_process(name: str, serve: Serve) -> None:
    """Build the settings, configure logging, run ``serve`` and exit with its code."""
    try:
        settings = Settings.from_env()
    except TriggerError as e:
        print(f"{name}: {e}", file=sys.stderr)
        sys.exit(2)
    configure_logging(settings.log_level, settings.log_format)
    try:
        sys.exit(run_loop(serve(settings)))
    except TriggerError as e:
        structlog.get_logger(name).error("startup_failed", error=str(e))
        sys.exit(1)


async def report_every(stop: asyncio.Event, period_s: float, emit: Callable[[], None]) -> None:
    """Call ``emit`` every ``period_s`` until ``stop`` (a supervised task)."""
    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), timeout=period_s)
        except TimeoutError:
            emit()
