"""Sections for the costly pool's tests (``test_costly_pool.py``): module-level, so that
they pickle by name, in a module light to import in the worker."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable

from trigger_service.app import costly_pool
from trigger_service.app.cpu_shares import metered
from trigger_service.core.errors import InvalidRequest, RateLimited


def where() -> tuple[int, int]:
    """The pid and the OS priority of the process running it."""
    return os.getpid(), os.getpriority(os.PRIO_PROCESS, 0)


def spin_metered(ms: float) -> int:
    """About ``ms`` of CPU, metered as the real sections are (no account in the worker)."""
    with metered():
        end = time.thread_time() + ms / 1000
        while time.thread_time() < end:
            pass
    return os.getpid()


def refuse(message: str, **extra: object) -> None:
    raise InvalidRequest(message, **extra)


def rate_limit(seconds: int) -> None:
    raise RateLimited("slow down", seconds)


def fail_plainly() -> None:
    raise KeyError("a bug")


class Unpicklable(Exception):
    """An exception whose pickle cannot be read back (its ``__init__`` takes no
    positional argument, its ``args`` hold one)."""

    def __init__(self, *, code: int) -> None:
        super().__init__(f"code {code}")


def fail_unpicklably() -> None:
    raise Unpicklable(code=1)


def pid_after(delay_s: float) -> int:
    time.sleep(delay_s)
    return os.getpid()


def place() -> tuple[int, str]:
    """The process and the thread running it."""
    return os.getpid(), threading.current_thread().name


def main() -> None:
    """``python -m tests.unit.limits.sections``: start a costly pool, print its worker's
    pid, and die as an API process killed outright does."""
    started = costly_pool.worker_started()
    assert started is not None
    print(started.result(timeout=60), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    main()


def call(work: Callable[[], object]) -> object:
    """``work()``: an argument that may not pickle (a closure)."""
    return work()


def closure_answer() -> Callable[[], int]:
    """An answer that does not pickle (a closure over this process's pid)."""
    pid = os.getpid()
    return lambda: pid
