"""The CPU a section of synchronous work took in this thread, without the process's full
garbage collections.

A caller's CPU share (``app/cpu_shares.py``) is charged the thread time its parsing took.
The thread time also holds any garbage collection that ran meanwhile, and a full (oldest
generation) collection walks the whole process's heap: tens to hundreds of milliseconds in a
process holding many requests' objects, on whatever section allocated last. Charged to the
caller it would mark a healthy caller costly and spend its share for work nobody asked of
it (seen: a batch of 300 plain items refused in part on a loaded test box). The young
generations' collections are proportional to what the section itself allocated, and stay
charged.

The collections are timed by a ``gc.callbacks`` hook installed on import: two calls per
collection, a few microseconds, next to collections that take milliseconds.
"""

from __future__ import annotations

import gc
import threading
import time
from typing import Any

FULL = 2  # the oldest generation: a full collection


class _Spent(threading.local):
    full_gc_s: float = 0.0
    started_s: float | None = None


_SPENT = _Spent()


def _on_gc(phase: str, info: dict[str, Any]) -> None:
    if info.get("generation") != FULL:
        return
    if phase == "start":
        _SPENT.started_s = time.thread_time()
    elif _SPENT.started_s is not None:
        _SPENT.full_gc_s += time.thread_time() - _SPENT.started_s
        _SPENT.started_s = None


if _on_gc not in gc.callbacks:
    gc.callbacks.append(_on_gc)


def work_time_s() -> float:
    """This thread's CPU seconds so far less its full collections' (a clock to subtract
    readings of, like ``time.thread_time``)."""
    return time.thread_time() - _SPENT.full_gc_s
