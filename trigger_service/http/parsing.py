"""Request parsing: a raw body, header or query becomes a typed value, or an ``ApiError``
naming the field. Pure: no I/O, the current time is passed in."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from typing import Any

from trigger_service.app.schedules import plan
from trigger_service.app.triggers import NewTrigger
from trigger_service.config.callers import Caller
from trigger_service.core.errors import (
    CallbackNotAllowed,
    InvalidRequest,
    PayloadTooLarge,
)
from trigger_service.core.model import Status
from trigger_service.core.notify_plan import PLAN_FIELDS, parse_plan
from trigger_service.core.ports import ListCursor
from trigger_service.core.urls import UrlError, normalise_callback_url
from trigger_service.http.time_fields import TIME_FIELDS, parse_time_fields

ALLOWED_FIELDS = frozenset({"callbackUrl", "payload", *TIME_FIELDS, *PLAN_FIELDS})
MAX_IDEMPOTENCY_KEY_LEN = 255
MAX_LIST_LIMIT = 500


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def parse_json_body(raw: bytes) -> Any:
    try:
        return json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError) as e:
        raise InvalidRequest(f"body: malformed JSON ({e})") from e


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=True)


def request_hash(body: Any) -> str:
    """Hash of the parsed body: key order and white space do not make a request different."""
    return hashlib.sha256(_compact(body).encode()).hexdigest()


def parse_register(
    body: Any,
    *,
    caller: Caller,
    now_ms: int,
    payload_max_bytes: int,
    max_fire_ahead_days: int,
    min_recurrence_interval_s: int = 60,
) -> NewTrigger:
    """Validate a ``POST /v1/triggers`` body. A one-time fire time in the past becomes
    ``now_ms``; a recurring rule starts at its first occurrence from now on."""
    if not isinstance(body, dict):
        raise InvalidRequest("body: must be a JSON object")
    extra = sorted(set(body) - ALLOWED_FIELDS)
    if extra:
        raise InvalidRequest(f"{extra[0]}: unknown field", field=extra[0])
    url = parse_callback(body, caller) if body.get("callbackUrl") is not None else ""
    delivery = parse_plan(body)
    if not url and delivery is None:
        raise InvalidRequest("callbackUrl: required (or channels, or both)")
    payload_json = _payload_json(body, payload_max_bytes)
    planned = plan(parse_time_fields(body, now_ms), now_ms=now_ms,
                   horizon_days=max_fire_ahead_days, min_interval_s=min_recurrence_interval_s)
    return NewTrigger(url, payload_json, planned.fire_at_ms, now_ms, planned.schedule,
                      planned.occurrence, delivery)


def parse_callback(body: dict[str, Any], caller: Caller) -> str:
    if "callbackUrl" not in body:
        raise InvalidRequest("callbackUrl: required")
    raw_url = body["callbackUrl"]
    if not isinstance(raw_url, str):
        raise InvalidRequest("callbackUrl: must be a string")
    try:
        url = normalise_callback_url(raw_url)
    except UrlError as e:
        raise InvalidRequest(f"callbackUrl: {e}") from e
    refusal = caller.callback_refusal(url)
    if refusal is not None:
        raise CallbackNotAllowed(f"callbackUrl: {refusal}")
    return url.text  # the normalised form: what was checked is what is stored and sent


def _payload_json(body: dict[str, Any], payload_max_bytes: int) -> str:
    payload_json = json.dumps(body.get("payload"), separators=(",", ":"), ensure_ascii=False)
    size = len(payload_json.encode("utf-8"))
    if size > payload_max_bytes:
        raise PayloadTooLarge(
            f"payload: {size} bytes serialized, at most {payload_max_bytes} allowed")
    return payload_json


def parse_idempotency_key(value: str | None) -> str | None:
    if value is None:
        return None
    if not value or len(value) > MAX_IDEMPOTENCY_KEY_LEN:
        raise InvalidRequest(f"Idempotency-Key: 1 to {MAX_IDEMPOTENCY_KEY_LEN} characters")
    if not value.isprintable() or not value.isascii():
        raise InvalidRequest("Idempotency-Key: printable ASCII only")
    return value


def parse_list_query(
    query: dict[str, str], default_limit: int = 50
) -> tuple[Status | None, int, ListCursor | None]:
    extra = sorted(set(query) - {"status", "limit", "cursor"})
    if extra:
        raise InvalidRequest(f"{extra[0]}: unknown query parameter")
    status = None
    if "status" in query:
        try:
            status = Status(query["status"].upper())
        except ValueError as e:
            raise InvalidRequest(
                f"status: one of {', '.join(s.value for s in Status)}") from e
    cursor = decode_cursor(query["cursor"]) if query.get("cursor") else None
    return status, parse_limit(query, default_limit), cursor


def parse_limit(query: dict[str, str], default: int = 50) -> int:
    """A list's ``limit`` query parameter: 1 to ``MAX_LIST_LIMIT``."""
    if "limit" not in query:
        return default
    try:
        limit = int(query["limit"])
    except ValueError as e:
        raise InvalidRequest("limit: must be an integer") from e
    if not 1 <= limit <= MAX_LIST_LIMIT:
        raise InvalidRequest(f"limit: 1 to {MAX_LIST_LIMIT}")
    return limit


def encode_cursor(cursor: ListCursor) -> str:
    return base64.urlsafe_b64encode(json.dumps(list(cursor)).encode()).decode().rstrip("=")


def decode_cursor(text: str) -> ListCursor:
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        month, after_ms, after_id = json.loads(raw)
        if not (isinstance(month, int) and isinstance(after_ms, int)
                and isinstance(after_id, str)):
            raise ValueError("bad cursor fields")
        return month, after_ms, after_id
    except (binascii.Error, ValueError, TypeError) as e:
        raise InvalidRequest("cursor: not a cursor this API returned") from e
