"""The API's listening side: aiohttp's HTTP server with deadlines for slow clients, a cap on
open connections, and its own error answers in the API's JSON shape.

- **Request head deadline** (``TRIGGER_LIMITS_HEADER_TIMEOUT_S``): a new connection that has not
  sent a whole request line and headers within it gets ``408 request_timeout`` and is closed
  (a slowloris client holds a connection for this long at most). On a kept-alive connection
  the keep-alive timeout bounds the wait for the next request, partial head included
  (aiohttp closes a connection still waiting for a whole request when it runs out).
- **Body deadline**: ``http.guards.body_deadline_middleware`` (then at most ``LINGER_S``
  more to drain what is left before the connection closes).
- **Idle keep-alive** (``TRIGGER_LIMITS_KEEPALIVE_TIMEOUT_S``, at most 75 s): aiohttp's own.
- **Connection cap** (``TRIGGER_LIMITS_MAX_CONNECTIONS``): one connection over it is answered
  ``503 too_many_connections`` at once and closed, without reading it; the kernel's listen
  backlog (1024) holds connections that arrive faster than they are accepted.
- **Head sizes** (``TRIGGER_LIMITS_MAX_LINE_BYTES``, ``_FIELD_BYTES``, ``_HEADERS``): aiohttp's
  parser limits; over them the answer is ``431 headers_too_large`` (a line or a value) or
  ``400 invalid_request`` (too many headers, or anything else malformed), as JSON.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import structlog
from aiohttp import web
from aiohttp.http_exceptions import LineTooLong
from aiohttp.web_protocol import RequestHandler

from trigger_service.config.limits import LimitSettings
from trigger_service.core.ports import Metrics
from trigger_service.http.guards import REQUEST_ID_HEADER, new_request_id

log = structlog.get_logger(__name__)
# After answering a request whose body was not read whole (a 401, a 429, a 408), aiohttp reads
# and drops what is left for this long so the client sees the answer rather than a reset;
# aiohttp's 10 s would let every slow body hold its connection that much longer.
LINGER_S = 2.0


def _raw_answer(status: int, reason: str, code: str, message: str) -> bytes:
    """A whole HTTP/1.1 answer for a connection that never reached the application."""
    body = json.dumps({"error": code, "message": message}).encode()
    head = (f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n"
            f"{REQUEST_ID_HEADER}: {new_request_id()}\r\n\r\n")
    return head.encode() + body


class _Handler(RequestHandler):
    """aiohttp's connection handler; only its own error answers (a request head it could
    not parse, a handler that escaped every middleware) are ours: JSON, without details."""

    def handle_error(self, request: Any, status: int = 500, exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        if request.writer.output_size > 0:  # what aiohttp does: the answer has begun
            raise ConnectionError("response already started")
        if isinstance(exc, LineTooLong):
            status, code, text = 431, "headers_too_large", "a request line or header is too long"
        elif 400 <= status < 500:
            code, text = "invalid_request", "malformed HTTP request"
        else:
            status, code, text = 500, "internal_error", "unexpected error; it has been logged"
        rid = new_request_id()
        # The type only: the message quotes the offending line, which may hold a credential.
        log.info("http_error", status=status, error=type(exc).__name__, request_id=rid)
        response = web.json_response({"error": code, "message": text}, status=status,
                                     headers={REQUEST_ID_HEADER: rid})
        response.force_close()
        return response


class GuardedServer(web.Server):
    """``web.Server`` with the head deadline and the connection cap (see the module)."""

    def __init__(self, plain: web.Server, limits: LimitSettings, metrics: Metrics) -> None:
        # Built from the application's own server, so the app's handler, request factory
        # and handler arguments stay exactly aiohttp's.
        super().__init__(plain.request_handler, request_factory=self._noting(plain),
                         handler_cancellation=plain.handler_cancellation,
                         loop=asyncio.get_running_loop(), **plain._kwargs)
        self._limits = limits
        self._metrics = metrics
        self._heads: set[RequestHandler] = set()  # connections that sent a whole head

    def _noting(self, plain: web.Server) -> Any:
        factory = plain.request_factory

        def make(message: Any, payload: Any, protocol: RequestHandler, writer: Any,
                 task: Any) -> Any:
            self._heads.add(protocol)
            return factory(message, payload, protocol, writer, task)

        return make

    def __call__(self) -> RequestHandler:
        return _Handler(self, loop=self._loop, **self._kwargs)

    def connection_made(self, handler: RequestHandler, transport: asyncio.Transport) -> None:
        if len(self._connections) >= self._limits.max_connections:
            self._metrics.inc("http_connections_refused_total")
            transport.write(_raw_answer(503, "Service Unavailable", "too_many_connections",
                                        "this server has too many open connections; retry"))
            transport.close()
            return
        super().connection_made(handler, transport)
        self._loop.call_later(self._limits.header_timeout_s, self._head_deadline, handler,
                              transport)

    def connection_lost(self, handler: RequestHandler, exc: BaseException | None = None) -> None:
        self._heads.discard(handler)
        super().connection_lost(handler, exc)

    def _head_deadline(self, handler: RequestHandler, transport: asyncio.Transport) -> None:
        if handler in self._heads or transport.is_closing():
            return
        self._metrics.inc("http_head_timeouts_total")
        transport.write(_raw_answer(408, "Request Timeout", "request_timeout",
                                    "the request head did not arrive in time"))
        transport.close()


class GuardedAppRunner(web.AppRunner):
    """``web.AppRunner`` whose server is a ``GuardedServer`` with ``limits``' handler
    arguments (keep-alive, head sizes). Start it with ``web.TCPSite`` as usual."""

    def __init__(self, app: web.Application, limits: LimitSettings, metrics: Metrics,
                 **kwargs: Any) -> None:
        super().__init__(app, keepalive_timeout=limits.keepalive_timeout_s,
                         max_line_size=limits.max_line_bytes,
                         max_field_size=limits.max_field_bytes,
                         max_headers=limits.max_headers, lingering_time=LINGER_S, **kwargs)
        self._limits = limits
        self._metrics = metrics

    async def _make_server(self) -> web.Server:
        return GuardedServer(await super()._make_server(), self._limits, self._metrics)
