"""Settings of the API's protections (section ``limits`` of ``settings.Settings``): the
deployment kind, slow and idle clients, the connection cap and the ``/metrics`` token;
``LIMIT_VARIABLES`` are their rows of ``settings.VARIABLES``. Per-caller request rates and
quotas live in the callers file (``config.callers``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trigger_service.config.parsers import at_least_one
from trigger_service.config.parsers import pos_float as _pos_float

Row = tuple[str, tuple[str, str], Callable[[str], Any], str]
ENVIRONMENTS = ("development", "production")
# aiohttp closes an idle keep-alive connection after this at most (the setting's ceiling).
MAX_KEEPALIVE_S = 75.0
# A waiting refusal keeps its connection (and a slot of its caller's share) this long at most.
MAX_REFUSAL_WAIT_S = 5.0


def _fraction(raw: str) -> float:
    value = float(raw)
    if not 0 < value <= 1:
        raise ValueError("a fraction above 0, at most 1")
    return value


def _refusal_wait(raw: str) -> float:
    value = float(raw)
    if not 0 <= value <= MAX_REFUSAL_WAIT_S:
        raise ValueError(f"0 (answer at once) to {MAX_REFUSAL_WAIT_S:g}")
    return value


def env_kind(raw: str) -> str:
    if raw not in ENVIRONMENTS:
        raise ValueError(f"one of {', '.join(ENVIRONMENTS)}")
    return raw


def _keepalive(raw: str) -> float:
    value = _pos_float(raw)
    if value > MAX_KEEPALIVE_S:
        raise ValueError(f"at most {MAX_KEEPALIVE_S:g}")
    return value


@dataclass(frozen=True)
class LimitSettings:
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    keepalive_timeout_s: float = 30.0
    max_connections: int = 2_000
    # The connections one caller may hold in a process, as a fraction of max_connections:
    # four callers' floods together before the process is full of busy connections.
    caller_connection_share: float = 0.25
    # Kept-alive connections no caller has used (health checks, 401s) wait this long only.
    anonymous_idle_s: float = 5.0
    # Each caller's CPU for parsing and planning time fields, per process (app/cpu_shares.py):
    # a fifth of a core once its burst is spent (measured: a hostile caller's share at half a
    # core left another caller's p99 at 240 ms, at a fifth about 110 ms; bench "hostile").
    caller_cpu_ms_per_s: float = 200.0
    caller_cpu_burst_ms: float = 1000.0
    # A caller refused for going too fast is answered after this (at most its Retry-After):
    # measured, a caller retrying its 429s at once from 8 connections sent ~1,000 a second.
    refusal_wait_s: float = 1.0
    max_line_bytes: int = 8190
    max_field_bytes: int = 8190
    max_headers: int = 64

    @property
    def connections_per_caller(self) -> int:
        """The connections one caller may hold in a process (at least one)."""
        return max(1, int(self.max_connections * self.caller_connection_share))


LIMIT_VARIABLES: tuple[Row, ...] = (
    ("TRIGGER_LIMITS_HEADER_TIMEOUT_S", ("limits", "header_timeout_s"), _pos_float,
     "a new connection must have sent a whole request head within this, else 408 and closed"),
    ("TRIGGER_LIMITS_BODY_TIMEOUT_S", ("limits", "body_timeout_s"), _pos_float,
     "a request body must have arrived whole within this, else 408 and closed"),
    ("TRIGGER_LIMITS_KEEPALIVE_TIMEOUT_S", ("limits", "keepalive_timeout_s"), _keepalive,
     "an idle keep-alive connection (or one slow to send its next request) is closed after "
     "this; at most 75"),
    ("TRIGGER_LIMITS_MAX_CONNECTIONS", ("limits", "max_connections"), at_least_one,
     "open connections per API process; one more takes the slot of the kept-alive connection "
     "idle the longest, or is answered 503 and closed when none is idle"),
    ("TRIGGER_LIMITS_CALLER_CONNECTION_SHARE", ("limits", "caller_connection_share"), _fraction,
     "the fraction of TRIGGER_LIMITS_MAX_CONNECTIONS one caller may hold (busy or idle); its "
     "request on one more connection is answered 429 too_many_connections and closed"),
    ("TRIGGER_LIMITS_ANONYMOUS_IDLE_S", ("limits", "anonymous_idle_s"), _pos_float,
     "a kept-alive connection that only unauthenticated requests used is closed after idling "
     "this long"),
    ("TRIGGER_LIMITS_CALLER_CPU_MS_PER_S", ("limits", "caller_cpu_ms_per_s"), _pos_float,
     "CPU milliseconds per second one caller's requests may spend in an API process reading "
     "and planning when/rrule/cron values (after its burst); past it 429 rate_limited"),
    ("TRIGGER_LIMITS_CALLER_CPU_BURST_MS", ("limits", "caller_cpu_burst_ms"), _pos_float,
     "the CPU milliseconds a caller may spend so at once before the per-second share applies"),
    ("TRIGGER_LIMITS_REFUSAL_WAIT_S", ("limits", "refusal_wait_s"), _refusal_wait,
     "a 429 rate_limited (the caller's request rate, CPU share or rotations) is answered "
     "after this, or its Retry-After if shorter, which then counts the wait: a client that "
     "retries at once gets one answer per connection per wait; 0 answers at once"),
    ("TRIGGER_LIMITS_MAX_LINE_BYTES", ("limits", "max_line_bytes"), at_least_one,
     "longest request line or header line; longer is 431"),
    ("TRIGGER_LIMITS_MAX_FIELD_BYTES", ("limits", "max_field_bytes"), at_least_one,
     "longest header value; longer is 431"),
    ("TRIGGER_LIMITS_MAX_HEADERS", ("limits", "max_headers"), at_least_one,
     "most header lines in a request; more is 400"),
)
