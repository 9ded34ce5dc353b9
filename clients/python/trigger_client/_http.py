"""What both clients share: building an ``httpx`` request from a ``Call`` and reading its
answer (pure apart from the ``httpx`` objects)."""

from __future__ import annotations

import json
from typing import Any, TypeVar

import httpx

from trigger_client._calls import NO_BODY, Call
from trigger_client.errors import error_from_response

T = TypeVar("T")
USER_AGENT = "trigger-client/0.1.0"
DEFAULT_TIMEOUT_S = 30.0


def base_headers(token: str | None) -> dict[str, str]:
    headers = {"User-Agent": USER_AGENT, "Accept": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return headers


def build(http: httpx.Client | httpx.AsyncClient, call: Call[Any]) -> httpx.Request:
    """The request for ``call`` (the same bytes on every retry, so the Idempotency-Key
    always comes with the identical body)."""
    headers = dict(call.headers)
    content: bytes | None = None
    if call.body is not NO_BODY:
        content = json.dumps(call.body, separators=(",", ":"), ensure_ascii=False).encode()
        headers["Content-Type"] = call.content_type
    return http.build_request(call.method, call.path, params=call.params or None,
                              content=content, headers=headers)


def answer(call: Call[T], response: httpx.Response) -> T:
    """``call``'s result, or the ``ApiError`` of a non-2xx answer."""
    if response.status_code >= 300 and response.status_code not in call.ok_statuses:
        raise error_from_response(response)
    return call.parse(response)
