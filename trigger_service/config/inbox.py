"""Settings of the in-app inbox and its live streams (section ``inbox`` of
``settings.Settings``); ``INBOX_VARIABLES`` are their rows of ``settings.VARIABLES``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trigger_service.config.parsers import at_least_one
from trigger_service.config.parsers import pos_float as _pos_float
from trigger_service.config.parsers import pos_int as _pos_int
from trigger_service.core.errors import ConfigError

Row = tuple[str, tuple[str, str], Callable[[str], Any], str]


@dataclass(frozen=True)
class InboxSettings:
    retention_days: int = 90
    heartbeat_s: float = 15.0
    # Each open stream holds one of the process's TRIGGER_LIMITS_MAX_CONNECTIONS slots: the caps
    # keep most of them for other requests (validate() holds max_streams to half of them at most).
    max_streams: int = 500
    max_streams_per_caller: int = 50
    # A stream ends (cleanly, after a retry: hint) within the last tenth of this, spread so
    # that streams opened together do not all reconnect together.
    stream_max_lifetime_s: float = 1800.0
    stream_retry_ms: int = 3000

    def validate(self, max_connections: int) -> None:
        """Cross-field checks; raises ``ConfigError`` naming the variable."""
        if self.retention_days < 1:
            raise ConfigError("TRIGGER_INBOX_RETENTION_DAYS must be >= 1")
        if self.max_streams > max_connections // 2:
            raise ConfigError("TRIGGER_INBOX_MAX_STREAMS must be at most half of "
                              "TRIGGER_LIMITS_MAX_CONNECTIONS (the other requests need slots too)")
        if self.max_streams_per_caller > self.max_streams:
            raise ConfigError("TRIGGER_INBOX_MAX_STREAMS_PER_CALLER must be at most "
                              "TRIGGER_INBOX_MAX_STREAMS")


INBOX_VARIABLES: tuple[Row, ...] = (
    ("TRIGGER_INBOX_RETENTION_DAYS", ("inbox", "retention_days"), _pos_int,
     "inbox messages expire this many days after they are stored (read or not)"),
    ("TRIGGER_INBOX_HEARTBEAT_S", ("inbox", "heartbeat_s"), _pos_float,
     "an inbox stream sends a comment line this often, so proxies keep it open"),
    ("TRIGGER_INBOX_MAX_STREAMS", ("inbox", "max_streams"), at_least_one,
     "open inbox streams per API process (at most half of TRIGGER_LIMITS_MAX_CONNECTIONS); one "
     "more is answered 429 too_many_streams"),
    ("TRIGGER_INBOX_MAX_STREAMS_PER_CALLER", ("inbox", "max_streams_per_caller"), at_least_one,
     "open inbox streams of one caller, counted across the API processes (Redis; each "
     "process also holds it to this alone); one more is answered 429 too_many_streams"),
    ("TRIGGER_INBOX_STREAM_MAX_LIFETIME_S", ("inbox", "stream_max_lifetime_s"), _pos_float,
     "an inbox stream is closed by the server after at most this (in its last tenth); the "
     "client reconnects with Last-Event-ID"),
    ("TRIGGER_INBOX_STREAM_RETRY_MS", ("inbox", "stream_retry_ms"), at_least_one,
     "the retry: hint a stream sends: how long an EventSource waits before it reconnects"),
)
