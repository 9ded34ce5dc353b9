"""Run a process's main coroutine on uvloop.

uvloop (libuv) roughly halves the event loop's own CPU cost per request and per
cross-thread wake-up (every Cassandra response arrives from the driver's I/O thread). On this
2-core machine CPU is the limit for both registration and delivery, so it is worth a
dependency. Tests keep the default loop, so everything also works without it.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any, TypeVar

import uvloop

T = TypeVar("T")


def run_loop(main: Coroutine[Any, Any, T]) -> T:
    return uvloop.run(main)
