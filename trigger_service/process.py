"""What every ``python -m <service>`` entry point shares: settings from the environment
(bad ones exit 2 naming the variable), logging, and the event loop.

The loop is uvloop (libuv): it roughly halves the event loop's own CPU per request and per
cross-thread wake-up (every Cassandra response arrives from the driver's I/O thread), and CPU
is the limit on this 2-core machine. Tests keep asyncio's default loop, so everything also
works without it."""

from __future__ import annotations

import sys
from collections.abc import Callable, Coroutine
from typing import Any

import structlog
import uvloop

from trigger_service.errors import TriggerError
from trigger_service.logs import configure_logging
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
        sys.exit(uvloop.run(serve(settings)))
    except TriggerError as e:
        structlog.get_logger(name).error("startup_failed", error=str(e))
        sys.exit(1)
