"""Time arithmetic, all in integer epoch milliseconds (``*_ms``) or aware UTC datetimes.

Pure functions: the current time is always an argument (it comes from the injected Clock).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
DAY_MS = 86_400_000
# SQS's caps, here because the dispatcher, the sweeper and the settings plan with them (and
# the core is the layer they all may import); the adapter's own are in adapters.schema.
SQS_MAX_DELAY_S = 900  # on a message's delay
SQS_MAX_BATCH = 10  # on the messages of one batch request, and of one receive
# The instants every zone's wall clock can still show (a day inside datetime's range, so
# that any UTC offset stays inside it too).
WALL_MIN_MS = (datetime(1, 1, 2, tzinfo=UTC) - _EPOCH) // timedelta(milliseconds=1)
WALL_MAX_MS = (datetime(9999, 12, 30, tzinfo=UTC) - _EPOCH) // timedelta(milliseconds=1)

def ms_to_datetime(ms: int) -> datetime:
    """Epoch milliseconds to an aware UTC datetime."""
    return _EPOCH + timedelta(milliseconds=ms)


def datetime_to_ms(dt: datetime) -> int:
    """Aware datetime to epoch milliseconds (floors sub-millisecond digits, exact integer math).

    Raises ``ValueError`` for a naive datetime.
    """
    if dt.tzinfo is None:
        raise ValueError("naive datetime: time inside the service is aware UTC")
    return (dt - _EPOCH) // timedelta(milliseconds=1)


_RFC3339_RE = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$"
)


def parse_rfc3339_ms(text: str) -> int:
    """Parse an RFC 3339 timestamp that carries ``Z`` or an offset; epoch ms, sub-ms floored.

    Raises ``ValueError`` for anything else (no offset, date only, out-of-range fields).
    """
    m = _RFC3339_RE.match(text)
    if not m:
        raise ValueError("not an RFC 3339 timestamp with a time zone offset or Z")
    frac = (m.group(7) or "")[:7]  # '.' + at most 6 digits: Python's datetime holds microseconds
    offset = m.group(8)
    offset = "+00:00" if offset in ("Z", "z") else offset
    iso = f"{m.group(1)}-{m.group(2)}-{m.group(3)}T{m.group(4)}:{m.group(5)}:{m.group(6)}"
    dt = datetime.fromisoformat(iso + frac + offset)
    try:
        return datetime_to_ms(dt.astimezone(UTC))
    except OverflowError as e:  # 9999-12-31T23:59:59-23:59 is past datetime.max in UTC
        raise ValueError("out of the range of supported times (years 1 to 9999 in UTC)") from e


def format_rfc3339_ms(ms: int) -> str:
    """Epoch ms as UTC RFC 3339 with exactly millisecond precision, e.g. ``...T14:31:00.250Z``."""
    dt = ms_to_datetime(ms)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def sqs_delay_s(due_ms: int, now_ms: int, lead_s: int) -> int:
    """Whole seconds to keep a message hidden so that it shows up ``lead_s`` before ``due_ms``.

    Rounded down (never later than asked) and never negative; the SQS adapter clamps it to
    what the call allows. The dispatcher holds an early message to the millisecond.
    """
    return max(0, (due_ms - now_ms) // 1000 - lead_s)


def retry_backoff_s(attempts: int, schedule_s: Sequence[int]) -> int:
    """The wait after the ``attempts``-th failed attempt (1-based); the last value repeats."""
    return schedule_s[min(max(attempts, 1) - 1, len(schedule_s) - 1)]


def ceil_div(a: int, b: int) -> int:
    """``ceil(a / b)`` in exact integer arithmetic."""
    return -(-a // b)


def seconds_until(until_ms: int, now_ms: int) -> int:
    """Whole seconds from ``now_ms`` to ``until_ms``, at least 1: a ``Retry-After``."""
    return max(1, ceil_div(until_ms - now_ms, 1000))
