"""The driver's server warnings, once per kind a minute (``platform.logs.OncePerKind``)."""

from __future__ import annotations

import logging

from trigger_service.platform.logs import OncePerKind


class Clock:
    def __init__(self) -> None:
        self.now_s = 1000.0

    def __call__(self) -> float:
        return self.now_s


def record(msg: str, *args: object) -> logging.LogRecord:
    return logging.LogRecord("cassandra.protocol", logging.WARNING, __file__, 1, msg, args,
                             None)


def batch_warning(partitions: int) -> logging.LogRecord:
    return record("Server warning: %s", f"Unlogged batch covering {partitions} partitions")


def test_one_line_per_kind_a_minute_then_the_count_held_back() -> None:
    clock = Clock()
    once = OncePerKind("Server warning", every_s=60, monotonic_s=clock)
    assert once.filter(batch_warning(21))
    assert [once.filter(batch_warning(n)) for n in (19, 20, 22)] == [False, False, False]
    clock.now_s += 59
    assert not once.filter(batch_warning(23))
    clock.now_s += 1
    later = batch_warning(24)
    assert once.filter(later)
    assert "4 more like it held back" in later.getMessage()
    assert "covering 24 partitions" in later.getMessage()


def test_other_kinds_and_other_lines_pass() -> None:
    once = OncePerKind("Server warning", monotonic_s=Clock())
    assert once.filter(batch_warning(21))
    assert once.filter(record("Server warning: %s", "Batch of size 5211 exceeds 5120"))
    assert all(once.filter(record("Host %s is down", "127.0.0.1")) for _ in range(3))
