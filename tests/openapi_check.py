"""Every request and response an HTTP test makes, checked against ``trigger_service/openapi.yaml``
with openapi-core, so the contract and the code cannot drift apart.

``check_contract(app)`` puts a middleware outside all of the app's own (before the test server
starts), which sees each request as the app got it and each answer as it goes out:

- every answer must be one the document lists for that operation (status, content type,
  headers, body schema); an answer of the server itself outside any operation (an unknown
  route's 404, a wrong method's 405) must still be the document's ``Error``;
- a request the app accepted (2xx) must be one the document admits (parameters, body,
  security): the document may not be narrower than the API. Requests the app refused are
  not checked: the tests send them on purpose, and many refusals (an unknown id, a state
  conflict) cannot be told from the request alone.

``callback_violations`` checks a callback a test receiver got against ``webhooks.callback``.

Violations are collected, not raised inside the app (that would turn into a 500 and hide the
test's own assertion); ``assert_clean()`` fails the test with all of them at teardown.
"""

from __future__ import annotations

import functools
import json
import re
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler
from jsonschema import Draft202012Validator
from multidict import CIMultiDict
from openapi_core import Config, OpenAPI
from openapi_core.contrib.aiohttp import AIOHTTPOpenAPIWebRequest, AIOHTTPOpenAPIWebResponse
from openapi_core.datatypes import RequestParameters
from openapi_core.deserializing.media_types.util import plain_loads
from openapi_core.templating.paths.exceptions import OperationNotFound, PathNotFound
from openapi_core.templating.responses.exceptions import ResponseNotFound

from trigger_service.http.routes.docs import load_spec


@functools.cache
def spec() -> dict[str, Any]:
    return load_spec()


@functools.cache
def openapi() -> OpenAPI:
    # Types openapi-core does not know: text ones are read as text (its default for
    # text/plain), a JSON merge patch as JSON.
    known: dict[str, Callable[[bytes], Any]] = {
        **dict.fromkeys(("text/event-stream", "text/css", "text/javascript"), _text),
        "application/merge-patch+json": json.loads}
    return OpenAPI.from_dict(spec(), config=Config(extra_media_type_deserializers=known))


def _text(value: bytes) -> Any:
    return plain_loads(value)


@functools.cache
def error_validator() -> Draft202012Validator:
    """The document's ``Error`` schema, for answers outside any operation."""
    return Draft202012Validator({"$ref": "#/components/schemas/Error",
                                 "components": spec()["components"]})


class _StreamedResponse:
    """A response already streamed to the client (Server-Sent Events): its status and
    headers are checked; its body went out in pieces and is not kept."""

    def __init__(self, response: web.StreamResponse) -> None:
        self.status_code = response.status
        self.headers = response.headers
        self.content_type = response.content_type or ""
        self.data = b": streamed\n"  # the body is not kept; an SSE comment stands in


def _why(e: BaseException) -> str:
    """The error and the schema errors openapi-core keeps in its causes."""
    parts = [f"{type(e).__name__}: {str(e)[:300]}"]
    cause = e.__cause__ or e.__context__
    while cause is not None and len(parts) < 4:
        parts.append(f"{type(cause).__name__}: {str(cause)[:300]}")
        for sub in getattr(cause, "schema_errors", ()) or ():
            parts.append(f"  - {getattr(sub, 'message', sub)} at {list(sub.path)}")
        cause = cause.__cause__ or cause.__context__
    return "\n  ".join(parts)


# urllib, which openapi-core parses a request's URL with, splits ";params", "?query" and
# "#fragment" out of a path: in a decoded path these came percent-encoded from the client, so
# they are encoded again to keep one segment one segment (an ack token with a ";" in it).
_URL_DELIMITERS = re.compile(r"[%;?#]")


class _Request(AIOHTTPOpenAPIWebRequest):
    @property
    def path(self) -> str:
        return _URL_DELIMITERS.sub(lambda m: f"%{ord(m.group()):02X}", self.request.url.path)


@dataclass
class ContractCheck:
    violations: list[str] = field(default_factory=list)
    checked: int = 0

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        response = await handler(request)
        await self.check(request, response)
        return response

    async def check(self, request: web.Request, response: web.StreamResponse) -> None:
        self.checked += 1
        where = f"{request.method} {request.path_qs} -> {response.status}"
        accepted = 200 <= response.status < 300
        body = await request.read() if accepted else None
        req = _Request(request, body=body)
        resp: Any = (AIOHTTPOpenAPIWebResponse(response) if isinstance(response, web.Response)
                     else _StreamedResponse(response))
        api = openapi()
        try:
            api.validate_response(req, resp)
        except (PathNotFound, OperationNotFound):
            self._outside_operations(where, response)
            return
        except ResponseNotFound as e:
            self.violations.append(f"{where}: status not in the document ({e})")
        except Exception as e:  # every validation error is a finding
            self.violations.append(f"{where}: response\n  {_why(e)}")
        if accepted:
            try:
                with warnings.catch_warnings():
                    # The document says on purpose that an empty `since=` or `cursor=` is
                    # absent (allowEmptyValue: deprecated in OpenAPI, still what it means).
                    warnings.filterwarnings("ignore", "Use of allowEmptyValue",
                                            DeprecationWarning)
                    api.validate_request(req)
            except Exception as e:  # every validation error is a finding
                self.violations.append(f"{where}: request\n  {_why(e)}")

    def _outside_operations(self, where: str, response: web.StreamResponse) -> None:
        # The server's own refusals before any route is known: a token missing on an unknown
        # /v1 path (401), an unknown route (404), a wrong method (405), ...
        if not 400 <= response.status < 500 or not isinstance(response, web.Response):
            self.violations.append(f"{where}: no operation in the document")
            return
        try:
            body = json.loads(response.body if isinstance(response.body, bytes) else b"")
        except ValueError:
            body = None
        errors = [e.message for e in error_validator().iter_errors(body)]
        if errors:
            self.violations.append(f"{where}: not the document's Error: {errors}")

    def assert_clean(self) -> None:
        assert not self.violations, (
            f"{len(self.violations)} of {self.checked} exchanges break "
            "trigger_service/openapi.yaml:\n" + "\n".join(self.violations))


@dataclass
class _Callback:
    """A callback as a receiver got it, in openapi-core's webhook request shape."""

    parameters: RequestParameters
    body: bytes
    content_type: str
    name: str = "callback"
    method: str = "post"


def callback_violations(headers: Mapping[str, str], raw: bytes,
                        name: str = "callback") -> list[str]:
    """What is wrong with a callback (its headers and exact body) against the document's
    ``webhooks.callback`` (``name`` "event": an event to the caller, ``webhooks.event``);
    empty when it conforms."""
    request = _Callback(RequestParameters(header=CIMultiDict(headers)), raw,
                        headers.get("Content-Type", "").lower(), name)
    try:
        openapi().validate_request(request)
    except Exception as e:  # every validation error is a finding
        which = headers.get("X-Trigger-Occurrence-Id") or headers.get("webhook-id")
        return [f"{name} {which}:\n  {_why(e)}"]
    return []


def check_contract(app: web.Application) -> ContractCheck:
    """Check every exchange of ``app`` (not yet started) against the document."""
    # Built now (about a second, once per process), not inside the first request: that
    # would stall the event loop a test's dispatcher shares, and delay what it times.
    openapi()
    check = ContractCheck()
    app.middlewares.insert(0, check.middleware)
    return check
