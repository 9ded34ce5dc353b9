"""structlog set-up: key-value events, JSON lines (or console) on stderr.

Secrets never reach the log: ``redact`` runs on every event before it is rendered and
replaces the value of any key that names a secret (token, secret, password, authorization,
cookie, api key; at any depth of dicts and lists) and any ``Bearer ...`` credential inside a
string with ``[redacted]``.
"""

from __future__ import annotations

import logging
import re
import sys
import time
from collections.abc import Callable, MutableMapping
from typing import Any

import structlog
from opentelemetry import trace

REDACTED = "[redacted]"
_SECRET_KEY = re.compile(r"token|secret|passw|authorization|cookie|api[_-]?key|credential",
                         re.IGNORECASE)
_BEARER = re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]+")


def _scrub(key: str, value: Any, depth: int = 0) -> Any:
    if _SECRET_KEY.search(key):
        return REDACTED
    if depth > 5:
        return value
    if isinstance(value, str):
        return _BEARER.sub(lambda m: f"{m.group(1)} {REDACTED}", value)
    if isinstance(value, dict):
        return {k: _scrub(str(k), v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_scrub("", v, depth + 1) for v in value]
    return value


def redact(_logger: Any, _method: str, event: MutableMapping[str, Any]
           ) -> MutableMapping[str, Any]:
    """structlog processor: secrets out of the event (see the module)."""
    for key in list(event):
        event[key] = _scrub(key, event[key])
    return event


def add_trace_ids(_logger: Any, _method: str, event: MutableMapping[str, Any]
                  ) -> MutableMapping[str, Any]:
    """``trace_id`` and ``span_id`` of the current span (W3C hex), when there is one: a log
    line of a request or an occurrence step names its trace (``core.trace_context``)."""
    ctx = trace.get_current_span().get_span_context()
    if ctx.is_valid:
        event.setdefault("trace_id", format(ctx.trace_id, "032x"))
        event.setdefault("span_id", format(ctx.span_id, "016x"))
    return event


class OncePerKind(logging.Filter):
    """Lets a record of ``prefix`` through once per kind (its text with the numbers taken
    out) every ``every_s``; the next one let through says how many were held back since
    the last.

    For the Cassandra driver's ``Server warning: ...`` lines: it logs one for every response
    that carries a warning. The service's coalesced writes are unlogged batches across
    partitions on purpose (one request instead of many, ``adapters.cassandra.coalescing``),
    and a node left at Cassandra's defaults (10 partitions, 5 KiB) warns about most of
    them: during a batch create, thousands of lines a second, about 5 % of the API's CPU
    spent logging them. Everything else passes."""

    def __init__(self, prefix: str, every_s: float = 60.0,
                 monotonic_s: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self._prefix = prefix
        self._every_s = every_s
        self._now = monotonic_s
        self._kinds: dict[str, tuple[float, int]] = {}  # kind -> (let through at, held)

    def filter(self, record: logging.LogRecord) -> bool:
        if not isinstance(record.msg, str) or not record.msg.startswith(self._prefix):
            return True
        kind = re.sub(r"\d+", "N", record.getMessage())[:200]
        now = self._now()
        last = self._kinds.get(kind)
        if last is not None and now - last[0] < self._every_s:
            self._kinds[kind] = (last[0], last[1] + 1)
            return False
        if len(self._kinds) > 100:  # kinds are few; a bound all the same
            self._kinds.clear()
        held = 0 if last is None else last[1]
        self._kinds[kind] = (now, 0)
        if held:
            record.msg = f"{record.msg} ({held} more like it held back since the last)"
        return True


def configure_logging(level: str = "INFO", fmt: str = "json") -> None:
    logging.basicConfig(stream=sys.stderr, level=level, format="%(message)s")
    protocol = logging.getLogger("cassandra.protocol")
    if not any(isinstance(f, OncePerKind) for f in protocol.filters):
        protocol.addFilter(OncePerKind("Server warning"))
    for noisy in ("cassandra", "botocore", "aiobotocore", "aiohttp.access"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, logging.getLevelName(level)))
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer() if fmt == "json"
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            add_trace_ids,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            redact,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level)),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )


def log_notices(name: str, notices: tuple[str, ...]) -> None:
    """One ``setting_deprecated`` warning per old setting name the environment used."""
    log = structlog.get_logger(name)
    for notice in notices:
        log.warning("setting_deprecated", detail=notice)
