"""Every error the SDK raises, as one tree::

    TriggerError
    ├── ApiError                      the API answered non-2xx (status, error, message, field)
    │   ├── InvalidRequest            400 invalid_request (and .candidates for `when`)
    │   │   └── FireAtOutOfRange      400 fire_at_out_of_range
    │   ├── Unauthorized              401
    │   ├── Forbidden                 403
    │   ├── NotFound                  404
    │   ├── MethodNotAllowed          405
    │   ├── RequestTimeout            408
    │   ├── Conflict                  409 (.trigger_status for not_cancellable / not_editable)
    │   ├── PayloadTooLarge           413
    │   ├── UnsupportedMediaType      415
    │   ├── Unprocessable             422 callback_not_allowed, idempotency_key_reused,
    │   │                                 nonexistent_local_time, recipient_not_allowed
    │   ├── RateLimited               429 rate_limited (.retry_after_s)
    │   │   └── QuotaExceeded         429 quota_exceeded (Retry-After only for a daily budget)
    │   ├── HeadersTooLarge           431
    │   └── ServerError               5xx (internal_error, dependency_unavailable, ...)
    │       └── OutcomeUnknown        503 outcome_unknown (.trigger_id: it may exist)
    ├── ConnectionFailed              no answer (connect, read, write errors, after retries)
    └── InvalidSignature              receiver.verify refused a callback

An answer that is not the API's JSON error (a proxy's HTML page) is still an ``ApiError`` of
the class its status maps to, with ``error`` ``"http_<status>"``.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

import httpx


class TriggerError(Exception):
    """The root of every error this package raises."""


class ConnectionFailed(TriggerError):
    """The API did not answer (after the retries a call is allowed)."""


class InvalidSignature(TriggerError):
    """A callback's signature, timestamp or headers did not verify; do not process it."""


class ApiError(TriggerError):
    """A non-2xx answer: ``status`` (HTTP), ``error`` (the API's code), ``message``,
    ``field`` (the request field it is about, or None), ``body`` (the JSON as received),
    ``request_id`` (``X-Request-Id``, what the server's log names)."""

    def __init__(self, status: int, error: str, message: str, *, field: str | None = None,
                 body: Any = None, request_id: str | None = None) -> None:
        super().__init__(f"{status} {error}: {message}")
        self.status = status
        self.error = error
        self.message = message
        self.field = field
        self.body = body
        self.request_id = request_id


class InvalidRequest(ApiError):
    """400: a field, parameter or header is wrong (``field`` names it). For an ambiguous
    ``when`` phrase, ``candidates`` holds the instants it could mean (aware UTC)."""

    @property
    def candidates(self) -> tuple[datetime, ...]:
        raw = self.body.get("candidates") if isinstance(self.body, dict) else None
        out: list[datetime] = []
        for c in raw if isinstance(raw, list) else ():
            text = c.get("fireAt") if isinstance(c, dict) else c
            if isinstance(text, str):
                out.append(parse_instant(text))
        return tuple(out)


class FireAtOutOfRange(InvalidRequest):
    """400: the fire time is further ahead than the service allows."""


class Unauthorized(ApiError):
    """401: a missing or unknown token."""


class Forbidden(ApiError):
    """403: the token's role may not do this."""


class NotFound(ApiError):
    """404: no such thing for this token (another caller's is the same as unknown)."""


class MethodNotAllowed(ApiError):
    """405."""


class RequestTimeout(ApiError):
    """408: the body did not arrive in time."""


class Conflict(ApiError):
    """409: the state does not allow it (not_cancellable, not_editable, not_runnable,
    already_replayed, not_replayable); ``trigger_status`` is the trigger's status when the
    API names it."""

    @property
    def trigger_status(self) -> str | None:
        value = self.body.get("status") if isinstance(self.body, dict) else None
        return value if isinstance(value, str) else None


class PayloadTooLarge(ApiError):
    """413."""


class UnsupportedMediaType(ApiError):
    """415."""


class Unprocessable(ApiError):
    """422: callback_not_allowed, idempotency_key_reused, nonexistent_local_time,
    recipient_not_allowed or not_backfillable."""


class RateLimited(ApiError):
    """429 rate_limited: ``retry_after_s`` from ``Retry-After`` (None when absent)."""

    def __init__(self, *args: Any, retry_after_s: float | None = None, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.retry_after_s = retry_after_s


class QuotaExceeded(RateLimited):
    """429 quota_exceeded: too many pending triggers; waiting alone does not help."""


class HeadersTooLarge(ApiError):
    """431."""


class ServerError(ApiError):
    """5xx: internal_error (a bug), dependency_unavailable (retry), too_many_connections."""


class OutcomeUnknown(ServerError):
    """503 outcome_unknown: the server could not tell whether the trigger was registered
    (its write timed out, and its retries). It may exist and fire: ``trigger_id`` is its id
    if so. Retry with the same ``idempotency_key`` (``create`` retried with its own key
    already), or ``get(trigger_id)`` to see; a retry with another key may make a second."""

    @property
    def trigger_id(self) -> str | None:
        tid = self.body.get("triggerId") if isinstance(self.body, dict) else None
        return tid if isinstance(tid, str) else None


_BY_CODE: dict[str, type[ApiError]] = {
    "invalid_request": InvalidRequest, "fire_at_out_of_range": FireAtOutOfRange,
    "unauthorized": Unauthorized, "forbidden": Forbidden, "not_found": NotFound,
    "method_not_allowed": MethodNotAllowed, "request_timeout": RequestTimeout,
    "not_cancellable": Conflict, "not_editable": Conflict, "not_runnable": Conflict,
    "already_replayed": Conflict,
    "not_replayable": Conflict, "too_many_subscriptions": Conflict,
    "payload_too_large": PayloadTooLarge,
    "unsupported_media_type": UnsupportedMediaType, "callback_not_allowed": Unprocessable,
    "idempotency_key_reused": Unprocessable, "nonexistent_local_time": Unprocessable,
    "recipient_not_allowed": Unprocessable, "not_backfillable": Unprocessable,
    "rate_limited": RateLimited, "quota_exceeded": QuotaExceeded,
    "headers_too_large": HeadersTooLarge, "outcome_unknown": OutcomeUnknown,
}
_BY_STATUS: dict[int, type[ApiError]] = {
    400: InvalidRequest, 401: Unauthorized, 403: Forbidden, 404: NotFound,
    405: MethodNotAllowed, 408: RequestTimeout, 409: Conflict, 413: PayloadTooLarge,
    415: UnsupportedMediaType, 422: Unprocessable, 429: RateLimited, 431: HeadersTooLarge,
}


def parse_instant(text: str) -> datetime:
    """An RFC 3339 instant (``Z`` or an offset) as an aware UTC datetime."""
    value = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    if value.tzinfo is None:
        raise ValueError(f"instant without an offset: {text!r}")
    return value.astimezone(UTC)


def retry_after_s(response: httpx.Response, now: datetime | None = None) -> float | None:
    """``Retry-After`` in seconds (delta seconds or an HTTP date), None when absent or
    unreadable."""
    value = response.headers.get("Retry-After")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


def error_from_response(response: httpx.Response) -> ApiError:
    """The exception for a non-2xx ``response`` (its body already read)."""
    status = response.status_code
    try:
        body: Any = json.loads(response.content)
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("error"), str):
        code: str = body["error"]
        message = str(body.get("message") or code)
        field = body.get("field") if isinstance(body.get("field"), str) else None
    else:
        code, message, field = f"http_{status}", response.text[:200] or f"HTTP {status}", None
    cls = _BY_CODE.get(code) or _BY_STATUS.get(status) or (
        ServerError if status >= 500 else ApiError)
    kw: dict[str, Any] = {"field": field, "body": body,
                          "request_id": response.headers.get("X-Request-Id")}
    if issubclass(cls, RateLimited):
        kw["retry_after_s"] = retry_after_s(response)
    return cls(status, code, message, **kw)
