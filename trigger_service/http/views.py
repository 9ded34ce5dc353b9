"""Response shapes: how the API shows domain values as JSON."""

from __future__ import annotations

import json
from typing import Any

from trigger_service.app.idempotency import Registered
from trigger_service.core.model import Status, Trigger
from trigger_service.core.ports import ListPage
from trigger_service.core.timing import format_rfc3339_ms
from trigger_service.http.parsing import encode_cursor


def trigger_view(t: Trigger) -> dict[str, Any]:
    """The public JSON shape of a trigger."""
    return {
        "triggerId": t.trigger_id,
        "status": t.status.value,
        "fireAt": format_rfc3339_ms(t.fire_at_ms),
        "createdAt": format_rfc3339_ms(t.created_at_ms),
        "attempts": t.attempts,
        "lastError": t.last_error,
        "firedAt": format_rfc3339_ms(t.fired_at_ms) if t.fired_at_ms is not None else None,
        "callbackUrl": t.callback_url,
        "payload": json.loads(t.payload_json),
    }


def created_view(r: Registered) -> dict[str, Any]:
    """The 201 body of a registration (a replay shows the first request's trigger)."""
    return {"triggerId": r.trigger_id, "fireAt": format_rfc3339_ms(r.fire_at_ms),
            "status": Status.PENDING.value}


def cancelled_view(t: Trigger) -> dict[str, Any]:
    return {"triggerId": t.trigger_id, "status": t.status.value}


def page_view(page: ListPage) -> dict[str, Any]:
    return {
        "items": [trigger_view(t) for t in page.triggers],
        "nextCursor": encode_cursor(page.next_cursor) if page.next_cursor else None,
    }
