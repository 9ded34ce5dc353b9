"""``/v1/audit`` (a caller's own entries) and ``/v1/ops/audit`` (every entry, operators and
viewers), newest first, a page at a time with an opaque cursor."""

from __future__ import annotations

import base64
import binascii
import json
import re
from typing import Any

from aiohttp import web

from trigger_service.app.audit import AuditTrail
from trigger_service.core.audit import AuditAction, AuditCursor, AuditEntry, AuditPage
from trigger_service.core.errors import InvalidRequest
from trigger_service.core.time.timing import format_rfc3339_ms, parse_rfc3339_ms
from trigger_service.http.auth import caller_of, require_ops
from trigger_service.http.parsing import parse_limit

AUDIT_KEY = web.AppKey("audit", AuditTrail)
_AFTER_EVERY_ID = "\U0010ffff"
_ENTRY_ID_RE = re.compile(r"[0-9A-Za-z_.:-]{1,64}")  # a request id (http.guards)
_ACTOR_MAX = 200


def entry_view(e: AuditEntry) -> dict[str, Any]:
    return {"at": format_rfc3339_ms(e.at_ms), "actor": e.actor, "action": e.action.value,
            "target": e.target, "requestId": e.request_id, "outcome": e.outcome}


def encode_cursor(cursor: AuditCursor) -> str:
    return base64.urlsafe_b64encode(json.dumps(list(cursor)).encode()).decode().rstrip("=")


def decode_cursor(text: str) -> AuditCursor:
    """What ``encode_cursor`` made, or ``InvalidRequest`` naming ``cursor`` (checked before
    it reaches the store)."""
    try:
        if len(text) > 200:
            raise ValueError("too long")
        at_ms, entry_id = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
        if not (type(at_ms) is int and isinstance(entry_id, str) and 0 <= at_ms < 2**62
                and (entry_id == _AFTER_EVERY_ID or _ENTRY_ID_RE.fullmatch(entry_id))):
            raise ValueError("bad cursor fields")
        return at_ms, entry_id
    except (binascii.Error, ValueError, TypeError, UnicodeDecodeError) as e:
        raise InvalidRequest("cursor: not a cursor this API returned") from e


async def _page(request: web.Request, caller: str | None, allowed: set[str]) -> web.Response:
    query = dict(request.query)
    extra = sorted(set(query) - allowed)
    if extra:
        raise InvalidRequest(f"{extra[0]}: unknown query parameter")
    since_ms = None
    if query.get("since"):
        try:
            since_ms = parse_rfc3339_ms(query["since"])
        except (ValueError, OverflowError) as e:
            raise InvalidRequest("since: an RFC 3339 time with an offset, e.g. "
                                 "2026-11-23T10:00:00Z") from e
    action = None
    if query.get("action"):
        try:
            action = AuditAction(query["action"])
        except ValueError as e:
            raise InvalidRequest("action: one of "
                                 + ", ".join(a.value for a in AuditAction)) from e
    actor = query.get("actor") or None
    if actor is not None and len(actor) > _ACTOR_MAX:
        raise InvalidRequest(f"actor: at most {_ACTOR_MAX} characters")
    limit = parse_limit(query)
    cursor = decode_cursor(query["cursor"]) if query.get("cursor") else None
    trail = request.app[AUDIT_KEY]
    page: AuditPage = await trail.list(
        trail.query(caller=caller, since_ms=since_ms, action=action, actor=actor), cursor, limit)
    return web.json_response({
        "items": [entry_view(e) for e in page.items],
        "nextCursor": encode_cursor(page.next_cursor) if page.next_cursor else None})


async def list_mine(request: web.Request) -> web.Response:
    return await _page(request, caller_of(request).name, {"since", "action", "cursor", "limit"})


async def list_all(request: web.Request) -> web.Response:
    require_ops(request)
    return await _page(request, None, {"since", "action", "actor", "cursor", "limit"})


def add_routes(app: web.Application) -> None:
    app.router.add_get("/v1/audit", list_mine)
    app.router.add_get("/v1/ops/audit", list_all)
