"""The API's runner: aiohttp's own answers in the API's ``{"error", "message"}`` shape too.

aiohttp refuses a request it cannot parse (a header line over 8,190 bytes, more than 128
headers, a request line or header that is not HTTP/1.x, bad body framing) in its connection
handler, before any application code or middleware runs, with a ``text/plain`` page. Its only
hook for that answer is ``RequestHandler.handle_error``, and the class is chosen by
``web.Server.__call__``: so ``ApiRunner`` builds the server ``AppRunner`` would, with a
``RequestHandler`` subclass that answers JSON. Everything else (routing, middleware, limits
passed as ``handler_args`` or runner keyword arguments) is aiohttp's, unchanged.

Statuses: a header line too long or too many headers → ``431 headers_too_large``; any other
unparseable request → ``400 invalid_request`` (``field`` null); a handler that fails outside
the middleware → ``500 internal_error``. The body never echoes the request's bytes (they can
hold a token), and the connection is closed, as aiohttp does.
"""

from __future__ import annotations

from typing import Any

import structlog
from aiohttp import web
from aiohttp.http_exceptions import LineTooLong
from aiohttp.web_request import BaseRequest

from trigger_service.core.errors import ApiError, HeadersTooLarge, InvalidRequest

log = structlog.get_logger(__name__)


def server_error(status: int, exc: BaseException | None) -> ApiError:
    """The API error for what aiohttp's connection handler refused with ``status``."""
    if status == 400:
        if isinstance(exc, LineTooLong) or "too many headers" in str(exc).lower():
            return HeadersTooLarge("request headers: a line is longer than 8190 bytes, or "
                                   "there are more than 128 of them")
        name = type(exc).__name__ if exc is not None else "BadHttpMessage"
        return InvalidRequest(f"not a valid HTTP/1.1 request ({name})", field=None)
    error = ApiError("unexpected error; it has been logged")
    error.status = status
    return error


class _JsonErrorHandler(web.RequestHandler):
    def handle_error(self, request: BaseRequest, status: int = 500,
                     exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        if status >= 500:
            log.error("http_server_error", status=status, exc_info=exc)
        else:  # a client's garbage is not our error; its text may hold a token: not logged
            log.info("http_bad_request", status=status, error=type(exc).__name__)
        if request.writer.output_size > 0:
            raise ConnectionError("the response is under way; it cannot become an error")
        error = server_error(status, exc)
        response = web.json_response(error.to_json(), status=error.status)
        response.force_close()
        return response


class _JsonErrorServer(web.Server):
    def __call__(self) -> web.RequestHandler:
        return _JsonErrorHandler(self, loop=self._loop, **self._kwargs)


class ApiRunner(web.AppRunner):
    """``web.AppRunner`` whose connections answer unparseable requests as JSON."""

    async def _make_server(self) -> web.Server:
        server = await super()._make_server()
        kwargs: dict[str, Any] = server._kwargs
        return _JsonErrorServer(server.request_handler, request_factory=server.request_factory,
                                handler_cancellation=server.handler_cancellation,
                                loop=server._loop, **kwargs)
