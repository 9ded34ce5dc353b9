"""Flow control per destination: deliveries that share a key are started at most
``rate_per_second`` per second with at most ``parallelism`` open at once, over every
dispatcher. A trigger's own ``flowControl`` wins over its caller's default for the callback's
origin (``config.callers``). Pure: the values, their JSON shape and their checks.

The arithmetic the limiter runs (``core.ports.flow.FlowLimiter``, in Lua on Redis and in memory):

- a *rate slot* is the interval ``[start, start + 1000 / rate)``; a reservation takes the
  earliest one at or after ``max(due, now)`` that overlaps no other slot of the key
  (``earliest_gap``). Slots of a herd are laid end to end: spread, never refused.
- *admission* at the start: fewer than ``parallelism`` leases open and fewer than
  ``window_count`` starts in the last ``window_ms`` (``rate_window``): a start delayed past
  its slot (a full parallelism) never bunches with the ones on time.

Every key is its caller's: the limiter keeps a delivery's bounds under its ``FlowScope`` (the
caller, the key, and whether it is the caller's default for an origin), never under the key
alone, so a key another caller writes (even ``<caller>|<origin>``, the text of a default) names
a different place and cannot move this caller's slots nor hold its leases.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from trigger_service.core.errors import InvalidRequest

MAX_KEY_LEN = 200
MAX_RATE_PER_SECOND = 10_000.0
MAX_PARALLELISM = 10_000
FIELD = "flowControl"
# Slots are float milliseconds (1000 / 3 is not whole): ends that meet within this touch.
EPSILON_MS = 1e-6
_FIELDS = frozenset({"key", "ratePerSecond", "parallelism"})
_KEY_RE = re.compile(rf"[!-~]{{1,{MAX_KEY_LEN}}}")


@dataclass(frozen=True, slots=True)
class FlowControl:
    """A key and its bounds; at least one of the two bounds is set."""

    key: str
    rate_per_second: float | None = None
    parallelism: int | None = None

    @property
    def interval_ms(self) -> float:
        """The width of one rate slot (0: no rate bound)."""
        return 1000.0 / self.rate_per_second if self.rate_per_second else 0.0

    def to_json(self) -> dict[str, Any]:
        """The API's (and the stored column's) shape; an absent bound is null."""
        return {"key": self.key, "ratePerSecond": self.rate_per_second,
                "parallelism": self.parallelism}


@dataclass(frozen=True, slots=True)
class FlowScope:
    """Where the limiter keeps one key's slots, leases and window: in ``caller``'s namespace.
    ``default``: the caller's default for a callback origin (``config.flow_defaults``, key
    ``<caller>|<origin>``), kept apart from every key a caller writes, that text included.
    A trigger stored before keys were scoped is scoped by its own caller when delivered."""

    caller: str
    key: str
    default: bool = False


def rate_window(rate_per_second: float) -> tuple[int, int]:
    """(count, window ms): at most ``count`` starts in any ``window ms``. A whole number of
    starts, so a rate under 1 (0.5: one start in 2 s) and a fractional one (2.5: two in 800
    ms) are held exactly over the window."""
    count = max(1, math.floor(rate_per_second))
    return count, max(1, math.ceil(count * 1000 / rate_per_second))


def parse_flow_control(value: object) -> FlowControl | None:
    """``flowControl`` of a request: absent or null is None. Raises ``InvalidRequest``
    naming the field: ``key`` 1 to 200 printable ASCII characters (no spaces),
    ``ratePerSecond`` a number in (0, 10000], ``parallelism`` a whole number 1 to 10000, at
    least one of the two."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise InvalidRequest(f"{FIELD}: an object with key, ratePerSecond, parallelism",
                             field=FIELD)
    extra = sorted(set(value) - _FIELDS)
    if extra:
        raise InvalidRequest(f"{FIELD}.{extra[0]}: unknown field", field=f"{FIELD}.{extra[0]}")
    key = value.get("key")
    if not isinstance(key, str) or not _KEY_RE.fullmatch(key):
        raise InvalidRequest(f"{FIELD}.key: 1 to {MAX_KEY_LEN} printable ASCII characters, "
                             "no spaces", field=f"{FIELD}.key")
    rate, par = value.get("ratePerSecond"), value.get("parallelism")
    if rate is not None and (isinstance(rate, bool) or not isinstance(rate, int | float)
                             or not 0 < rate <= MAX_RATE_PER_SECOND):
        raise InvalidRequest(f"{FIELD}.ratePerSecond: a number over 0, at most "
                             f"{MAX_RATE_PER_SECOND:g}", field=f"{FIELD}.ratePerSecond")
    if par is not None and (isinstance(par, bool) or not isinstance(par, int)
                            or not 1 <= par <= MAX_PARALLELISM):
        raise InvalidRequest(f"{FIELD}.parallelism: a whole number, 1 to {MAX_PARALLELISM}",
                             field=f"{FIELD}.parallelism")
    if rate is None and par is None:
        raise InvalidRequest(f"{FIELD}: ratePerSecond or parallelism (or both) required",
                             field=FIELD)
    return FlowControl(key, None if rate is None else float(rate), par)


def flow_to_json(f: FlowControl) -> str:
    """The stored form (one text column)."""
    return json.dumps(f.to_json(), separators=(",", ":"), sort_keys=True)


def flow_from_json(text: str) -> FlowControl | None:
    """What ``flow_to_json`` stored; None for a value that no longer parses (an edited
    bound: such a trigger is delivered without flow control rather than never)."""
    try:
        return parse_flow_control(json.loads(text))
    except (InvalidRequest, ValueError):
        return None


def earliest_gap(slots: list[tuple[float, float]], at_ms: float, width_ms: float) -> float:
    """The earliest start ``>= at_ms`` of a slot ``width_ms`` wide that overlaps none of
    ``slots`` (sorted, disjoint ``(start, end)`` runs). The Lua script does the same."""
    t = at_ms
    for start, end in slots:
        if end <= t + EPSILON_MS:
            continue
        if start >= t + width_ms - EPSILON_MS:
            break
        t = end
    return t
