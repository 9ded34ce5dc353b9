"""Dead-letter query parsing and response shapes for ``/v1/dead-letters``."""

from __future__ import annotations

import base64
import binascii
import json
import re
from typing import Any

from trigger_service.core.dead_letters import (
    Attempt,
    DeadLetter,
    DeadLetterCursor,
    DeadLetterFilters,
    DeadLetterReason,
    ReplayJob,
)
from trigger_service.core.errors import InvalidRequest
from trigger_service.core.model import Trigger
from trigger_service.core.time.timing import format_rfc3339_ms, parse_rfc3339_ms
from trigger_service.http.parsing import parse_limit

FILTERS = ("reason", "since", "until", "callbackPrefix", "caller")
_MAX_PREFIX = 2048
# What a listing cursor's id may be: a dead letter's (<trigger id>.<n>) or the store's
# "after every id" (anything else, a lone surrogate say, must never reach the driver).
_LETTER_ID_RE = re.compile(r"trg_[0-9A-HJKMNP-TV-Z]{26}\.[0-9]{1,9}")
_AFTER_EVERY_ID = "\U0010ffff"


def _instant(value: str, name: str) -> int:
    try:
        return parse_rfc3339_ms(value)
    except (ValueError, OverflowError) as e:
        raise InvalidRequest(f"{name}: an RFC 3339 time with an offset, e.g. "
                             "2026-11-23T10:00:00Z") from e


def parse_filters(raw: dict[str, Any], *, scope: str | None) -> DeadLetterFilters:
    """The filters of a listing or a bulk replay, as asked (an empty one is left out; the
    use case fills in ``since`` and ``until`` and checks one against the other).
    ``scope``: the caller's own name (a caller cannot name another), or None for ops users
    (who may name one with ``caller``)."""
    for name in FILTERS:
        if name in raw and not isinstance(raw[name], str):
            raise InvalidRequest(f"{name}: a string")
    reason = None
    if raw.get("reason"):
        try:
            reason = DeadLetterReason(raw["reason"])
        except ValueError as e:
            raise InvalidRequest("reason: one of "
                                 + ", ".join(r.value for r in DeadLetterReason)) from e
    until_ms = _instant(raw["until"], "until") if raw.get("until") else None
    since_ms = _instant(raw["since"], "since") if raw.get("since") else None
    prefix = raw.get("callbackPrefix") or None
    if prefix is not None and len(prefix) > _MAX_PREFIX:
        raise InvalidRequest(f"callbackPrefix: at most {_MAX_PREFIX} characters")
    caller = raw.get("caller") or None
    if caller is not None and scope is not None and caller != scope:
        raise InvalidRequest("caller: only operators and viewers may name a caller")
    return DeadLetterFilters(scope or caller, since_ms, until_ms, reason, prefix)


def parse_list_query(query: dict[str, str], *, scope: str | None,
                     ) -> tuple[DeadLetterFilters, DeadLetterCursor | None, int]:
    extra = sorted(set(query) - {*FILTERS, "limit", "cursor"})
    if extra:
        raise InvalidRequest(f"{extra[0]}: unknown query parameter")
    limit = parse_limit(query)
    cursor = decode_cursor(query["cursor"]) if query.get("cursor") else None
    return parse_filters(query, scope=scope), cursor, limit


def encode_cursor(cursor: DeadLetterCursor) -> str:
    return base64.urlsafe_b64encode(json.dumps(list(cursor)).encode()).decode().rstrip("=")


def decode_cursor(text: str) -> DeadLetterCursor:
    """What ``encode_cursor`` made, or ``InvalidRequest`` naming ``cursor``: bounded before
    it is parsed, and each part checked, so a forged one never reaches the driver."""
    try:
        if len(text) > 200:  # a real one is about 100 characters
            raise ValueError("too long")
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        day, before_ms, before_id = json.loads(raw)
        if not (type(day) is int and type(before_ms) is int and isinstance(before_id, str)
                and 0 <= day < 10**6 and 0 <= before_ms < 2**63
                and (before_id == _AFTER_EVERY_ID or _LETTER_ID_RE.fullmatch(before_id))):
            raise ValueError("bad cursor fields")
        return day, before_ms, before_id
    except (binascii.Error, ValueError, TypeError, UnicodeDecodeError) as e:
        raise InvalidRequest("cursor: not a cursor this API returned") from e


def letter_view(d: DeadLetter) -> dict[str, Any]:
    return {
        "id": d.id, "triggerId": d.trigger_id, "occurrenceId": d.id, "caller": d.caller,
        "reason": d.reason.value, "lastError": d.last_error, "attemptCount": d.attempt_count,
        "deadAt": format_rfc3339_ms(d.dead_at_ms), "fireAt": format_rfc3339_ms(d.fire_at_ms),
        "callbackUrl": d.callback_url,
    }


def attempt_view(a: Attempt) -> dict[str, Any]:
    return {"attempt": a.attempt, "at": format_rfc3339_ms(a.started_at_ms),
            "durationMs": a.duration_ms, "statusCode": a.status_code, "error": a.error,
            "responseExcerpt": a.response_excerpt, "dispatcher": a.dispatcher}


def detail_view(d: DeadLetter, t: Trigger | None, attempts: list[Attempt]) -> dict[str, Any]:
    return {
        **letter_view(d), "state": d.state.value,
        "resolvedAt": format_rfc3339_ms(d.resolved_at_ms) if d.resolved_at_ms else None,
        "triggerStatus": t.status.value if t else None,
        "payload": json.loads(t.payload_json) if t else None,
        "triggerTags": list(t.tags) if t else None,
        "triggerLabels": dict(t.labels) if t else None,
        "attempts": [attempt_view(a) for a in attempts],
    }


def job_view(job: ReplayJob) -> dict[str, Any]:
    q = job.query
    return {
        "jobId": job.job_id, "status": job.status.value, "total": job.total,
        "done": job.done, "failed": job.failed,
        "createdAt": format_rfc3339_ms(job.created_at_ms),
        "filters": {"reason": q.reason.value if q.reason else None,
                    "since": format_rfc3339_ms(q.since_ms),
                    "until": format_rfc3339_ms(q.until_ms),
                    "callbackPrefix": q.callback_prefix, "caller": q.caller},
    }
