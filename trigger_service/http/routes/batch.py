"""``POST /v1/triggers/batch``: up to ``MAX_ITEMS`` registrations in one request, each
answered on its own (``app.batch``).

The request is answered ``200`` once it was read: a body too large is ``413``, one that is
not ``{"items": [...]}`` with 1 to ``MAX_ITEMS`` items ``400``. Each item is a
``POST /v1/triggers`` body (parsed by the same ``parsing.parse_register``) plus its own
optional ``idempotencyKey`` (the ``Idempotency-Key`` header's rules; the key and its trigger
are the same as with the header). Items are answered in order::

    {"index": 0, "status": 201, "triggerId": "trg_...", "fireAt": "..."}
    {"index": 1, "status": 200, "triggerId": "trg_...", "fireAt": "...", "replayed": true}
    {"index": 2, "status": 400, "error": "invalid_request", "message": "...", "field": "..."}

The caller's rate counts items, and is charged before any item is parsed (parsing an item,
its ``when`` or its RRULE, is the work the rate bounds): the request's token pays for the
first item, each further one takes a token (``guards.take_items``), valid or not. Those the
bucket cannot pay for are ``429 rate_limited`` with ``retryAfter`` (seconds) and are never
parsed, the first ones in index order passing.
"""

from __future__ import annotations

import asyncio
import math
from typing import Any

from aiohttp import web

from trigger_service.app.batch import MAX_ITEMS, BatchEntry, BatchOutcome, BatchRegistration
from trigger_service.app.cpu_shares import costly
from trigger_service.config.callers import Caller
from trigger_service.core.errors import ApiError, InvalidRequest, QuotaExceeded, RateLimited
from trigger_service.http import parsing, views
from trigger_service.http.auth import caller_of
from trigger_service.http.guards import request_id_of, take_items
from trigger_service.http.keys import RUNTIME_KEY, SERVICE_KEY

BATCH_PATH = "/v1/triggers/batch"
# A thousand items of a few hundred bytes to a few KiB each (TRIGGER_API_PAYLOAD_MAX_BYTES).
BATCH_MAX_BODY_BYTES = 8 * 1024 * 1024
ITEM_KEY_FIELD = "idempotencyKey"


# The longest a batch's parsing holds the event loop before other requests get a turn.
YIELD_EVERY_MS = 5


def parse_items(body: Any) -> list[Any]:
    """The ``items`` of a batch body; ``InvalidRequest`` for anything else."""
    if not isinstance(body, dict):
        raise InvalidRequest("body: must be a JSON object")
    extra = sorted(set(body) - {"items"})
    if extra:
        raise InvalidRequest(f"{extra[0]}: unknown field", field=extra[0])
    items = body.get("items")
    if not isinstance(items, list):
        raise InvalidRequest("items: required, an array of create bodies")
    if not 1 <= len(items) <= MAX_ITEMS:
        raise InvalidRequest(f"items: 1 to {MAX_ITEMS} items, not {len(items)}")
    return items


def parse_item(index: int, item: Any, *, caller: Caller, now_ms: int,
               payload_max_bytes: int) -> BatchEntry:
    """One item: its key, then the rest as a ``POST /v1/triggers`` body. Raises what
    ``parse_register`` raises, or ``InvalidRequest`` for the key."""
    if not isinstance(item, dict):
        raise InvalidRequest("body: each item must be a JSON object")
    body = dict(item)
    raw_key = body.pop(ITEM_KEY_FIELD, None)
    if raw_key is not None and not isinstance(raw_key, str):
        raise InvalidRequest(f"{ITEM_KEY_FIELD}: must be a string")
    try:
        key = parsing.parse_idempotency_key(raw_key)
    except InvalidRequest as e:
        raise InvalidRequest(e.message.replace("Idempotency-Key", ITEM_KEY_FIELD)) from e
    req = parsing.parse_register(body, caller=caller, now_ms=now_ms,
                                 payload_max_bytes=payload_max_bytes)
    return BatchEntry(index, req, key, parsing.request_hash(body))


async def register_batch(request: web.Request) -> web.Response:
    runtime = request.app[RUNTIME_KEY]
    caller = caller_of(request)
    items = parse_items(parsing.parse_json_body(await request.read()))
    granted = 1 + await take_items(runtime.limiter, runtime.metrics, caller, len(items) - 1)
    over = _over_rate(caller, len(items) - granted)
    answers = {index: error_item(index, over) for index in range(granted, len(items))}
    now_ms = runtime.clock.now_ms()
    entries: list[BatchEntry] = []
    held_since_ms = runtime.clock.monotonic_ms()
    for index, item in enumerate(items[:granted]):
        try:
            # A costly caller's items one at a time, in another process (app/cpu_shares.py).
            entries.append(await costly(
                parse_item, index, item, caller=caller, now_ms=now_ms,
                payload_max_bytes=runtime.settings.api.payload_max_bytes))
        except ApiError as e:
            answers[index] = error_item(index, e)
        # Other requests run between items: the items are bounded one by one, a batch's
        # thousand are not, and the loop is every caller's (a pass per item would cost a
        # cheap batch a thousand passes).
        if runtime.clock.monotonic_ms() - held_since_ms >= YIELD_EVERY_MS:
            await asyncio.sleep(0)
            held_since_ms = runtime.clock.monotonic_ms()
    outcomes = await BatchRegistration(request.app[SERVICE_KEY]).register_all(
        caller, entries, request_id_of(request))
    for outcome in outcomes:
        answers[outcome.index] = outcome_item(outcome, items[outcome.index])
    runtime.metrics.inc("batch_items_total", len(items))
    return web.json_response({"items": [answers[i] for i in range(len(items))]})


def _over_rate(caller: Caller, excess: int) -> RateLimited:
    rate = caller.rate_per_s or 1.0
    return RateLimited(f"more than {rate:g} items per second (burst {caller.burst}); this "
                       "item was not registered", max(1, math.ceil(excess / rate)))


def outcome_item(outcome: BatchOutcome, item: dict[str, Any]) -> dict[str, Any]:
    if outcome.error is not None or outcome.registered is None:
        assert outcome.error is not None
        return error_item(outcome.index, outcome.error)
    result = outcome.registered
    answer: dict[str, Any] = {"index": outcome.index, "status": 200 if result.replayed else 201,
                              **views.created_fields(result)}
    if result.replayed:
        answer["replayed"] = True
    if "when" in item:  # parse_register accepted it
        schedule = outcome.new.schedule if outcome.new is not None else None
        answer["resolved"] = views.resolved_view(item, result.fire_at_ms, schedule)
    return answer


def error_item(index: int, e: ApiError) -> dict[str, Any]:
    """One item's refusal: the error body of the single endpoint, with its index and status
    (and ``retryAfter`` in seconds where the single endpoint sends ``Retry-After``)."""
    answer: dict[str, Any] = {"index": index, "status": e.status, **e.to_json()}
    retry_after_s = getattr(e, "retry_after_s", None)
    if isinstance(e, RateLimited | QuotaExceeded) and retry_after_s is not None:
        answer["retryAfter"] = retry_after_s
    return answer


def add_routes(app: web.Application) -> None:
    app.router.add_post(BATCH_PATH, register_batch)
