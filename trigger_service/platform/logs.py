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
from collections.abc import MutableMapping
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


def configure_logging(level: str = "INFO", fmt: str = "json") -> None:
    logging.basicConfig(stream=sys.stderr, level=level, format="%(message)s")
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
