"""The CPU a section of synchronous work took in this thread, without the garbage
collections that ran meanwhile.

A caller's CPU share (``app/cpu_shares.py``) is charged the thread time its parsing took.
The thread time also holds any garbage collection that ran meanwhile, and a collection walks
objects of every request the process holds, not the section's: it runs when the process's
allocations since the last one reach a threshold (``platform/heap.py``: 15,000 for the
youngest generation), and the allocation that crosses it may be any section's. Measured
during a batch of 1,000 plain items with 200 registrations in flight: sections of
0.1 ms charged 9-17 ms, all of it a youngest-generation collection. Charged to the caller,
that marked a healthy caller costly (``cpu_shares.COSTLY_MS``) and sent every item of its
next ten seconds through the worker process. So no collection is charged: what a section
allocates costs it the allocations themselves, and the collections they bring are shared
by everyone.

The collections are timed by a ``gc.callbacks`` hook installed on import: two calls per
collection, a few microseconds, next to collections that take milliseconds.
"""

from __future__ import annotations

import gc
import threading
import time
from typing import Any


class _Spent(threading.local):
    gc_s: float = 0.0
    started_s: float | None = None


_SPENT = _Spent()


def _on_gc(phase: str, info: dict[str, Any]) -> None:
    if phase == "start":
        _SPENT.started_s = time.thread_time()
    elif _SPENT.started_s is not None:
        _SPENT.gc_s += time.thread_time() - _SPENT.started_s
        _SPENT.started_s = None


if _on_gc not in gc.callbacks:
    gc.callbacks.append(_on_gc)


def work_time_s() -> float:
    """This thread's CPU seconds so far less its garbage collections' (a clock to subtract
    readings of, like ``time.thread_time``)."""
    return time.thread_time() - _SPENT.gc_s
