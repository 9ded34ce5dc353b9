"""Where a costly caller's sections run (:func:`app.cpu_shares.costly`): a worker process
of the API process's own, at a lower OS priority.

Not a thread: a thread shares the API process's GIL with its event loop, and each handoff
may wait the switch interval (5 ms), so tens of milliseconds of another caller's parsing
would still add to every other request. Not at the same priority: the worker runs at
``NICE`` (10) below the API, Cassandra and Redis on the same cores, so a costly caller's
parsing gets only the CPU the service's own work leaves idle.

A section is a module-level function and picklable arguments; the worker measures the
CPU it took (the worker's thread time: all of it was spent for the caller, but the
garbage collections, ``app/work_time.py``) and sends back
``(returned, value or exception, cpu_ms)`` for the parent to charge. An exception comes
back whole (``ApiError`` pickles its attributes, ``core/errors.py``); one that would not
survive the trip comes back as a ``RuntimeError`` naming it, with the worker's traceback
as a note (what the 500's log shows).

The API process starts the pool before it opens its port (``trigger_service/__main__``),
so the worker's start is never paid inside a request; elsewhere it starts on first use,
and a process that never meets a costly caller (the dispatcher, the sweeper, most tests)
starts none. Until its worker is up (imports and dateparser's warm-up: about a second)
sections run in a thread; so does
the one section a dead worker leaves (``BrokenProcessPool``), and the pool is made anew,
at most once every ``RESTART_S`` (a worker that cannot start would otherwise cost a
process start per section). :func:`shutdown` (the API's stop, and at exit) ends it.
"""

from __future__ import annotations

import asyncio
import atexit
import importlib
import math
import multiprocessing
import os
import pickle
import select
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

import structlog

from trigger_service.app.work_time import work_time_s
from trigger_service.core.errors import ApiError
from trigger_service.core.time.when import warm_up

log = structlog.get_logger(__name__)

# (returned?, the value or the exception, CPU milliseconds the section took)
Section = tuple[bool, Any, float]
NICE = 10
# One worker per API process: the API already runs a process per core (infra/app.sh), so
# one niced worker each can use every core the service leaves idle; a second would only
# contend for the same idle cores, at ~65 MB more (the API's modules) per API process. A
# costly caller's sections go one at a time, so another costly caller's wait for the
# worker is a section (tens of ms) per costly caller ahead of it.
WORKERS = 1
# A start method safe with threads in the parent (the Cassandra driver's): never fork.
START_METHOD = "forkserver"
RESTART_S = 10.0
PARENT_POLL_S = 1.0

# Sections while no worker is up. Two threads: two costly callers still run side by side,
# and the default executor (DNS lookups) is never starved.
_THREADS = ThreadPoolExecutor(max_workers=2, thread_name_prefix="costly")


def _start_worker(api_pid: int, main_module: str | None) -> None:
    """The worker's initializer: step back behind the service, end with ``api_pid``, then
    warm up: the parent's main module (``trigger_service.__main__``: all the API imports,
    among them every function it sends, a second of imports the first section would
    otherwise wait for; multiprocessing's own rule that a main module imports without
    side effects) and dateparser's data."""
    try:
        os.nice(NICE)
    except OSError:  # not allowed here (a sandbox): the section still runs, off the GIL
        pass
    threading.Thread(target=_exit_with, args=(api_pid,), daemon=True,
                     name="exit-with-api").start()
    if main_module is not None:
        importlib.import_module(main_module)
    warm_up()


def _exit_with(api_pid: int) -> None:
    """End this worker once the API process is gone. A pool's worker never learns of an
    API process killed outright (the fork server outlives it while the worker lives), and
    would wait for sections forever."""
    try:
        watched = os.pidfd_open(api_pid)
    except ProcessLookupError:  # gone already
        os._exit(0)
    except OSError:  # no pidfd here (an old kernel): ask every PARENT_POLL_S
        while _alive(api_pid):
            time.sleep(PARENT_POLL_S)
        os._exit(0)
    select.select([watched], [], [])  # readable once the process has exited
    os._exit(0)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's: the pid was reused, ours is gone
        return False
    return True


def measured(fn: Callable[..., Any], args: tuple[Any, ...],
             kwargs: Mapping[str, Any]) -> Section:
    """Run ``fn(*args, **kwargs)`` and measure the CPU it took in this thread; an
    ``Exception`` it raises is returned, not raised."""
    started = work_time_s()
    try:
        ok, value = True, fn(*args, **kwargs)
    except Exception as e:  # returned: charged like a value, raised by the parent
        ok, value = False, e
    return ok, value, (work_time_s() - started) * 1000


def _in_worker(fn: Callable[..., Any], args: tuple[Any, ...],
               kwargs: Mapping[str, Any]) -> Section:
    ok, value, cpu_ms = measured(fn, args, kwargs)
    return ok, value if ok else _portable(value), cpu_ms


def _portable(error: Exception) -> Exception:
    """``error`` as it may cross to the parent: whole when it pickles both ways, with the
    worker's traceback as a note unless it is an answer (an ``ApiError``); else a
    ``RuntimeError`` naming it. An exception that fails to unpickle would break the pool."""
    if not isinstance(error, ApiError):
        error.add_note("in the costly pool's worker:\n" + "".join(
            traceback.format_exception(error)))
    try:
        pickle.loads(pickle.dumps(error))
    except Exception:  # anything pickling raises: the substitute says what it was
        substitute = RuntimeError(f"{type(error).__qualname__}: {error}")
        for note in getattr(error, "__notes__", ()):
            substitute.add_note(note)
        return substitute
    return error


class WorkerPool:
    """The worker process and its life (the module docstring); one per process."""

    def __init__(self) -> None:
        self._executor: ProcessPoolExecutor | None = None
        self._ready: Future[int] | None = None
        self._restart_at_s = -math.inf
        self._closed = False

    def up(self) -> ProcessPoolExecutor | None:
        """The executor once its worker is up; None meanwhile (started now if need be),
        after :meth:`shutdown`, and until ``RESTART_S`` after it broke."""
        ready = self.starting()
        return self._executor if ready is not None and ready.done() else None

    def starting(self) -> Future[int] | None:
        """The worker's start (its pid once up), the pool started now if need be; None
        when no pool may start now."""
        if self._executor is None:
            if self._closed or time.monotonic() < self._restart_at_s:
                return None
            main = getattr(sys.modules["__main__"].__spec__, "name", None)  # python -m
            self._executor = ProcessPoolExecutor(
                WORKERS, mp_context=multiprocessing.get_context(START_METHOD),
                initializer=_start_worker, initargs=(os.getpid(), main))
            self._ready = self._executor.submit(os.getpid)
        return self._ready

    def broken(self, executor: ProcessPoolExecutor) -> None:
        if executor is self._executor:
            self._executor = self._ready = None
            self._restart_at_s = time.monotonic() + RESTART_S
            executor.shutdown(wait=False, cancel_futures=True)

    def shutdown(self) -> None:
        self._closed = True
        executor, self._executor, self._ready = self._executor, None, None
        if executor is not None:
            # Pending sections are cancelled (their requests are over); a running one ends
            # within its bound (tens of ms), then the worker exits.
            executor.shutdown(wait=True, cancel_futures=True)


_POOL = WorkerPool()
atexit.register(_POOL.shutdown)


async def run(fn: Callable[..., Any], args: tuple[Any, ...],
              kwargs: Mapping[str, Any]) -> Section:
    """``fn(*args, **kwargs)`` measured (:func:`measured`), in the worker when it is up,
    else in a thread; the section a dead worker dropped, or one whose arguments or answer
    would not pickle, runs again in a thread (parsing and planning are pure), never a
    500."""
    loop = asyncio.get_running_loop()
    executor = _POOL.up()
    if executor is not None:
        try:
            return await asyncio.wrap_future(executor.submit(_in_worker, fn, args, kwargs))
        except BrokenProcessPool:
            _POOL.broken(executor)
        except Exception as e:  # the section's own errors come back as values, not here
            # What failed is the trip: an argument or the answer did not pickle. The
            # section is pure; it runs again in a thread and the caller gets its answer.
            log.warning("costly_section_not_portable", section=getattr(fn, "__name__", "?"),
                        error=repr(e))
    # Not in a copy of this context: metered() there has no account either, and the
    # caller is charged this measure once, as from the worker.
    return await loop.run_in_executor(_THREADS, measured, fn, args, kwargs)


def shutdown() -> None:
    """End the pool (waiting for a running section) and start none again in this
    process: sections run in a thread from now on. Idempotent."""
    _POOL.shutdown()


def worker_started() -> Future[int] | None:
    """The worker's start, the pool started now if need be (``WorkerPool.starting``): for
    tests, and for whoever wants the worker warm before it is needed."""
    return _POOL.starting()
