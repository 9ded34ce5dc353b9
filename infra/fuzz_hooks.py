"""Schemathesis hooks for ``infra/fuzz.sh``: weight the fields whose cost depends on their
content, and check each request's CPU on the API's side.

- ``flatmap_body``: four in five generated JSON bodies (and of the first 50 items of a batch)
  get a hostile ``when``, ``rrule``, ``cron`` or ``flowControl`` — the strings a review found
  to stall a worker (duration lists that made a regex backtrack, rules that never match,
  impossible crons, another caller's flow-control key) and random mixes of their tokens up
  to each field's length cap. The rest stay as schemathesis made them.
- ``api_cpu_bounded`` (a check): with ``FUZZ_API_PIDS`` set (the API's process ids, comma
  separated), the CPU seconds of the API's processes and of every process below them
  (where a costly caller's parsing runs) spent between sending a request and its answer
  stay under ``FUZZ_MAX_REQUEST_CPU_S`` (1 s). Requests go one at a time (``--workers 1``), so the
  delta is the request's, plus what the API's background loops did meanwhile.
"""

from __future__ import annotations

import os
import time
from typing import Any

import schemathesis
from hypothesis import strategies as st

_AMOUNTS = ["1", "2", "10", "1.5", "a", "an", "one", "999999", "0.001"]
_UNITS = ["hour", "hours", "minute", "min", "sec", "seconds", "day", "weeks", "hrs"]
_GLUE = [" ", "  ", ", ", " and ", ", and ", ",", "and", " ,  and "]
_WHEN_CAP = 200


def _durations(n: int, tail: str) -> str:
    return "in " + "1 hour " * n + tail


# What a review measured stalling an API worker, and its neighbours.
_KNOWN_WHENS = [_durations(n, "1") for n in (20, 25, 28)] + [
    "1 hour " * 28 + "from", "in " + "1 hour, and " * 16 + "x",
    "every " + "monday and " * 18 + "x", "every 1 minute " * 13 + "x",
    "tomorrow at " + "9" * 190, "in " + "1" * 197,
]
_KNOWN_RRULES = [
    "FREQ=DAILY;BYMONTH=2;BYMONTHDAY=30",
    "FREQ=MINUTELY;INTERVAL=7;BYMONTH=4;BYMONTHDAY=31",
    "FREQ=SECONDLY;BYMONTH=2;BYMONTHDAY=31",
    "FREQ=HOURLY;INTERVAL=13;BYMONTH=11;BYMONTHDAY=31",
    "FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=30",
    "FREQ=WEEKLY;BYDAY=MO;BYMONTHDAY=31;BYMONTH=4,6,9,11",
    "FREQ=MONTHLY;BYSETPOS=-366;BYDAY=MO",
    "FREQ=YEARLY;BYWEEKNO=53;BYDAY=MO;BYMONTH=1",
    "FREQ=MINUTELY;BYYEARDAY=366;BYMONTH=2",
]
_KNOWN_CRONS = ["0 0 30 2 *", "0 0 31 4,6,9,11 *", "* * 31 2 *", "0 0 30,31 2 1-5",
                "*/1 * 31 2 *", "59 23 31 11 *"]
_FLOW_KEYS = ["orders|https://hooks.orders.example:443", "dev|http://127.0.0.1:9",
              "|", "a|b|c", "x" * 200]

_WHEN = st.one_of(
    st.sampled_from(_KNOWN_WHENS),
    st.lists(st.one_of(st.sampled_from(_AMOUNTS), st.sampled_from(_UNITS),
                       st.sampled_from(_GLUE)), max_size=80)
    .map(lambda parts: ("in " + "".join(parts))[:_WHEN_CAP]),
    st.text(alphabet=" ,1aehnoru", max_size=_WHEN_CAP),
)
_RRULE = st.one_of(
    st.sampled_from(_KNOWN_RRULES),
    st.builds(lambda freq, interval, month, day: (
        f"FREQ={freq};INTERVAL={interval};BYMONTH={month};BYMONTHDAY={day}"),
        st.sampled_from(["SECONDLY", "MINUTELY", "HOURLY", "DAILY", "WEEKLY", "MONTHLY",
                         "YEARLY"]),
        st.integers(1, 1000), st.integers(1, 12), st.sampled_from([29, 30, 31, -31, -30])),
)
_CRON = st.one_of(
    st.sampled_from(_KNOWN_CRONS),
    st.builds(lambda day, month: f"0 0 {day} {month} *",
              st.sampled_from(["30", "31", "29,30,31", "L"]), st.sampled_from(["2", "4,6"])),
)
_FLOW = st.fixed_dictionaries({
    "key": st.one_of(st.sampled_from(_FLOW_KEYS),
                     st.text(alphabet="abc|:/.-x!~", min_size=1, max_size=40)),
    "ratePerSecond": st.sampled_from([0.0001, 0.001, 1, 1000]),
    "parallelism": st.sampled_from([1, 2, 10000]),
})


def _hostile(item: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    """``item`` with one costly field made hostile (half the time: it unchanged)."""
    def put(field: str, value: Any) -> dict[str, Any]:
        out = dict(item)
        out[field] = value
        if field in ("rrule", "cron"):
            out.pop("when", None)
            out.pop("rrule" if field == "cron" else "cron", None)
        if field == "when":
            out.pop("rrule", None)
            out.pop("cron", None)
            out.pop("fireAt", None)
        return out

    return st.one_of(
        st.just(item),
        _WHEN.map(lambda v: put("when", v)),
        _RRULE.map(lambda v: put("rrule", v)),
        _CRON.map(lambda v: put("cron", v)),
        _FLOW.map(lambda v: put("flowControl", v)),
    )


@schemathesis.hook
def flatmap_body(ctx: Any, body: Any) -> Any:
    """A body (or a batch's items) with its costly fields weighted toward hostile values."""
    if not isinstance(body, dict):
        return st.just(body)
    items = body.get("items")
    if isinstance(items, list) and items:
        return st.tuples(*(_hostile(i) if isinstance(i, dict) else st.just(i)
                           for i in items[:50])).map(
            lambda new: {**body, "items": [*new, *items[50:]]})
    return _hostile(body)


def _stat(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None


_TREE: dict[str, Any] = {"at": -1e9, "pids": []}
_TREE_EVERY_S = 2.0


def _api_tree(roots: list[int]) -> list[int]:
    """The API processes and every process below them (the costly callers' parsing runs in
    their worker processes), looked up again every ``_TREE_EVERY_S``; not this process
    (schemathesis: a child of the API's process when the test suite runs it)."""
    if time.monotonic() - _TREE["at"] < _TREE_EVERY_S:
        return list(_TREE["pids"])
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (fields := _stat(int(entry))) is not None:
            children.setdefault(int(fields[1]), []).append(int(entry))  # ppid
    tree, todo = [], list(roots)
    while todo:
        pid = todo.pop()
        if pid == os.getpid():
            continue
        tree.append(pid)
        todo += children.get(pid, [])
    _TREE.update(at=time.monotonic(), pids=tree)
    return tree


def _api_cpu_s() -> float | None:
    roots = [int(p) for p in os.environ.get("FUZZ_API_PIDS", "").split(",") if p.strip()]
    if not roots:
        return None
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in _api_tree(roots):
        if (fields := _stat(pid)) is not None:
            total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    return total


_STARTED: dict[str, float] = {}


@schemathesis.hook
def before_call(ctx: Any, case: Any, **kwargs: Any) -> None:
    cpu = _api_cpu_s()
    if cpu is not None:
        _STARTED["cpu"] = cpu
        _STARTED["wall"] = time.monotonic()


@schemathesis.check
def api_cpu_bounded(ctx: Any, response: Any, case: Any) -> None:
    """The API spent at most ``FUZZ_MAX_REQUEST_CPU_S`` CPU seconds on this request."""
    start, now = _STARTED.pop("cpu", None), _api_cpu_s()
    if start is None or now is None:
        return
    limit = float(os.environ.get("FUZZ_MAX_REQUEST_CPU_S", "1"))
    spent = now - start
    if spent > limit:
        raise AssertionError(f"the API spent {spent:.2f} CPU-s on one request "
                             f"(limit {limit} s): {case.method} {case.path}")
