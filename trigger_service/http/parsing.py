"""Request parsing: a raw body, header or query becomes a typed value, or an ``ApiError``
naming the field. Pure: no I/O, the current time is passed in."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from typing import Any

from trigger_service.app.registration import RegisterRequest, Retime
from trigger_service.config.callers import Caller
from trigger_service.core.deadlines import (
    DEADLINE_FIELDS,
    parse_expires_at,
    parse_max_lateness,
)
from trigger_service.core.debounce import KEY_MAX_LEN as DEBOUNCE_KEY_MAX_LEN
from trigger_service.core.debounce import MAX_WAIT_S, Debounce, DebounceMode
from trigger_service.core.errors import (
    CallbackNotAllowed,
    InvalidRequest,
    PayloadTooLarge,
)
from trigger_service.core.flow import parse_flow_control
from trigger_service.core.model import Priority, Status, is_trigger_id
from trigger_service.core.notify.plan import PLAN_FIELDS, parse_plan
from trigger_service.core.ports.values import ListCursor
from trigger_service.core.recent_attempts import AttemptKey
from trigger_service.core.recent_attempts import decode_cursor as decode_attempts_cursor
from trigger_service.core.recipient_profiles import RECIPIENT_ZONE, is_recipient_id
from trigger_service.core.tags import TriggerFilter, parse_filter, parse_labels, parse_tags
from trigger_service.core.urls import UrlError, normalise_callback_url
from trigger_service.http.json_body import NO_BODY, parse_json_body, parse_optional_json_body
from trigger_service.http.time_fields import TIME_FIELDS, Reparse, parse_time_fields

# Routes parse bodies through this module.
__all__ = ["NO_BODY", "parse_json_body", "parse_optional_json_body"]

ALLOWED_FIELDS = frozenset({"callbackUrl", "payload", "jitterSeconds", "recipient",
                            *TIME_FIELDS, *PLAN_FIELDS, "tags", "labels", *DEADLINE_FIELDS,
                            "flowControl", "priority"})
JITTER_MAX_S = 10**9  # the shape's bound; the setting (TRIGGER_API_MAX_JITTER_S) is checked later
FILTER_PARAMS = ("tag", "label", "recipient")  # a listing's filters besides status
_SHAPE_LOCALE = "en-US"  # any locale with a date order: only the shape is checked
MAX_IDEMPOTENCY_KEY_LEN = 255
MAX_LIST_LIMIT = 500
_PRIORITIES = {p.value: p for p in Priority}
_LIMIT_RE = re.compile(r"[0-9]{1,6}")  # ASCII digits only: int() would take " ١٢_3"
# A listing cursor's month (yyyymm) and instant: what the index's int and bigint columns hold.
_MONTHS = range(101, 999_913)
_MS = range(-(2**63), 2**63)


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=True)


def request_hash(body: Any) -> str:
    """Hash of the parsed body: key order and white space do not make a request different."""
    return hashlib.sha256(_compact(body).encode()).hexdigest()


def parse_register(
    body: Any, *, caller: Caller, now_ms: int, payload_max_bytes: int,
) -> RegisterRequest:
    """Check the shape of a ``POST /v1/triggers`` body (also a merged PATCH, a snooze):
    fields, callback prefix, payload size, the time fields as given. Planning them (the
    first fire time, the horizon) is the use case's (``TriggerService.accept``)."""
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
    recipient, floats, retime = parse_recipient(body, now_ms)
    # With a recipient the time is read again with its profile (``app.recipient_binding``):
    # here for its shape only, in UTC if it floats, a numeric date in either order.
    time = (parse_time_fields(body, now_ms) if retime is None
            else retime("UTC" if floats else None, _SHAPE_LOCALE))
    return RegisterRequest(url, payload_json, time, now_ms, delivery,
                           parse_jitter(body.get("jitterSeconds")),
                           parse_tags(body.get("tags")), parse_labels(body.get("labels")),
                           recipient, retime, floats, parse_expires_at(body.get("expiresAt")),
                           parse_max_lateness(body.get("maxLatenessSeconds")),
                           parse_flow_control(body.get("flowControl")),
                           parse_priority(body.get("priority")))


def parse_debounce(value: object) -> Debounce:
    """``debounce``: ``{"key": 1 to 200 printable characters, "mode": "replace" | "keep",
    "maxWaitSeconds": a whole number of seconds >= 1, optional}``."""
    if not isinstance(value, dict):
        raise InvalidRequest('debounce: an object such as {"key": "digest", "mode": "replace"}',
                             field="debounce")
    extra = sorted(set(value) - {"key", "mode", "maxWaitSeconds"})
    if extra:
        raise InvalidRequest(f"debounce.{extra[0]}: unknown field", field="debounce")
    key = value.get("key")
    if not isinstance(key, str) or not 1 <= len(key) <= DEBOUNCE_KEY_MAX_LEN \
            or not key.isprintable():
        raise InvalidRequest(f"debounce.key: 1 to {DEBOUNCE_KEY_MAX_LEN} printable characters",
                             field="debounce")
    modes = {m.value: m for m in DebounceMode}
    mode = modes.get(value["mode"]) if isinstance(value.get("mode"), str) else None
    if mode is None:
        raise InvalidRequest('debounce.mode: "replace" or "keep"', field="debounce")
    wait = value.get("maxWaitSeconds")
    if wait is not None and (isinstance(wait, bool) or not isinstance(wait, int)
                             or not 1 <= wait <= MAX_WAIT_S):
        raise InvalidRequest(f"debounce.maxWaitSeconds: whole seconds, 1 to {MAX_WAIT_S}",
                             field="debounce")
    return Debounce(key, mode, wait)


def check_unplanned_fields(body: dict[str, Any], payload_max_bytes: int) -> None:
    """The shape of the create fields a preview computes nothing from (payload, tags,
    labels, recipient, deadlines, flow control, priority): what create would refuse in
    them, a preview refuses too (the same 400 or 413)."""
    _payload_json(body, payload_max_bytes)
    parse_tags(body.get("tags"))
    parse_labels(body.get("labels"))
    _recipient_id(body)
    parse_expires_at(body.get("expiresAt"))
    parse_max_lateness(body.get("maxLatenessSeconds"))
    parse_flow_control(body.get("flowControl"))
    parse_priority(body.get("priority"))


def parse_priority(value: object) -> Priority:
    """``priority``: absent or null is normal; else ``"high"``, ``"normal"`` or ``"low"``
    (the name, lower case: one value has one form, and the request hash sees that form)."""
    if value is None:
        return Priority.NORMAL
    if not isinstance(value, str) or value not in _PRIORITIES:
        raise InvalidRequest('priority: "high", "normal" or "low"', field="priority")
    return _PRIORITIES[value]


def parse_jitter(value: object) -> int:
    """``jitterSeconds``: absent or null is 0; else whole seconds, at least 0."""
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= JITTER_MAX_S:
        raise InvalidRequest("jitterSeconds: a whole number of seconds, at least 0",
                             field="jitterSeconds")
    return value


def parse_recipient(body: dict[str, Any], now_ms: int
                    ) -> tuple[str | None, bool, Retime | None]:
    """``recipient`` (a profile's id), whether the time floats with it (``"timeZone":
    "recipient"``), and then or with ``when`` the time fields read again with what the
    profile gives later (its zone, its locale: ``app.recipient_binding``)."""
    recipient = _recipient_id(body)
    floats = body.get("timeZone") == RECIPIENT_ZONE
    if floats and recipient is None:
        raise InvalidRequest('timeZone: "recipient" needs a recipient', field="timeZone")
    if recipient is None or not (floats or "when" in body):
        return recipient, False, None
    return recipient, floats, Reparse(body, now_ms)


def _recipient_id(body: dict[str, Any]) -> str | None:
    recipient = body.get("recipient")
    if recipient is not None and not is_recipient_id(recipient):
        raise InvalidRequest("recipient: a recipient id (1 to 200 characters of letters, "
                             "digits and _.:@+-)", field="recipient")
    return recipient


def parse_callback(body: dict[str, Any], caller: Caller) -> str:
    return parse_caller_url(body, "callbackUrl", caller)


def parse_caller_url(body: dict[str, Any], name: str, caller: Caller) -> str:
    """``body[name]``, a URL the caller may be sent to (a callback, an event subscription's):
    normalised and under one of its callback prefixes. Raises ``InvalidRequest``,
    ``CallbackNotAllowed``."""
    if name not in body:
        raise InvalidRequest(f"{name}: required")
    raw_url = body[name]
    if not isinstance(raw_url, str):
        raise InvalidRequest(f"{name}: must be a string")
    try:
        url = normalise_callback_url(raw_url)
    except UrlError as e:
        raise InvalidRequest(f"{name}: {e}") from e
    refusal = caller.callback_refusal(url)
    if refusal is not None:
        raise CallbackNotAllowed(f"{name}: {refusal}")
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
    extra = sorted(set(query) - {"status", "limit", "cursor", *FILTER_PARAMS})
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


def parse_list_filter(query: dict[str, str]) -> TriggerFilter | None:
    """``?tag=``, ``?label=key:value``, ``?recipient=`` of a listing (None: none given;
    ``parse_list_query`` has checked the rest)."""
    if not any(p in query for p in FILTER_PARAMS):
        return None
    return parse_filter({p: query[p] for p in FILTER_PARAMS if p in query})


def parse_limit(query: dict[str, str], default: int = 50) -> int:
    """A list's ``limit`` query parameter: 1 to ``MAX_LIST_LIMIT``."""
    if "limit" not in query:
        return default
    if not _LIMIT_RE.fullmatch(query["limit"]):
        raise InvalidRequest("limit: must be an integer")
    limit = int(query["limit"])
    if not 1 <= limit <= MAX_LIST_LIMIT:
        raise InvalidRequest(f"limit: 1 to {MAX_LIST_LIMIT}")
    return limit


def parse_attempts_query(query: dict[str, str]) -> tuple[int | None, AttemptKey | None]:
    """``?limit=&cursor=`` of a trigger's attempts: the limit as given (None: left out; its
    range is the setting's, ``app.attempts``) and the cursor a page of them returned.
    Raises ``InvalidRequest`` naming the parameter."""
    extra = sorted(set(query) - {"limit", "cursor"})
    if extra:
        raise InvalidRequest(f"{extra[0]}: unknown query parameter")
    limit = None
    if "limit" in query:
        if not _LIMIT_RE.fullmatch(query["limit"]):
            raise InvalidRequest("limit: must be an integer")
        limit = int(query["limit"])
    cursor = None
    if query.get("cursor"):
        try:
            cursor = decode_attempts_cursor(query["cursor"])
        except ValueError as e:
            raise InvalidRequest("cursor: not a cursor this API returned") from e
    return limit, cursor


def encode_cursor(cursor: ListCursor) -> str:
    return base64.urlsafe_b64encode(json.dumps(list(cursor)).encode()).decode().rstrip("=")


def decode_cursor(text: str) -> ListCursor:
    """What ``encode_cursor`` made, or ``InvalidRequest`` naming ``cursor``: each part is
    checked against what the store's columns hold, so a forged one never reaches the driver
    (which would fail it as a false ``503``)."""
    try:
        if len(text) > 200:
            raise ValueError("too long")
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        month, after_ms, after_id = json.loads(raw)
        # month 0: the newest-first order's cursor (``core.ports.values.ListCursor``).
        if not (type(month) is int and (month == 0 or (month in _MONTHS
                                                       and 1 <= month % 100 <= 12))
                and type(after_ms) is int and after_ms in _MS
                and isinstance(after_id, str) and (after_id == "" or is_trigger_id(after_id))):
            raise ValueError("bad cursor fields")
        return month, after_ms, after_id
    except (binascii.Error, ValueError, TypeError) as e:
        raise InvalidRequest("cursor: not a cursor this API returned") from e
