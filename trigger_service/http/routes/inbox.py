"""``/v1/inbox/{recipient}``: a caller's recipients' messages, read state, deletion, and a
live Server-Sent Events stream.

Every route is caller-scoped: the (caller, recipient) pair is the inbox, so another
caller's recipient of the same name is simply a different (usually empty) inbox.

The stream subscribes first (Redis pub/sub through ``InboxBus``), then replays from the
store what came after ``Last-Event-ID``, then goes live, skipping what the replay sent: a
message stored between the two is seen once, never lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import AsyncIterator

import structlog
from aiohttp import web
from aiohttp_sse import EventSourceResponse, sse_response

from trigger_service.core.errors import AdapterError, InvalidRequest, NotFound
from trigger_service.core.inbox import (
    DEFAULT_LIST_LIMIT,
    MAX_LIST_LIMIT,
    REPLAY_MAX,
    InboxMessage,
    decode_cursor,
    encode_cursor,
    is_message_id,
    is_recipient,
)
from trigger_service.http.auth import caller_of
from trigger_service.http.keys import RUNTIME_KEY

log = structlog.get_logger(__name__)

_LIST_PARAMS = frozenset({"unread", "limit", "cursor"})
_DIGITS = re.compile(r"[0-9]{1,6}")  # ASCII only: str.isdigit() takes "²", int() does not
# The open streams, ended when the API stops (aiohttp's on_shutdown runs before it waits for
# open requests, which a stream would otherwise hold for the whole shutdown timeout).
STREAMS_KEY: web.AppKey[set[EventSourceResponse]] = web.AppKey("inbox_streams")


def _recipient(request: web.Request) -> str:
    recipient = request.match_info["recipient"]
    if not is_recipient(recipient):
        raise InvalidRequest("recipient: 1 to 200 characters of letters, digits and _.:@+-")
    return recipient


def _compact(m: InboxMessage) -> str:
    return json.dumps(m.to_json(), separators=(",", ":"), ensure_ascii=False)


def _list_params(query: dict[str, str]) -> tuple[bool, int, str | None]:
    """(unread only, limit, before) from the query; ``InvalidRequest`` naming the field."""
    extra = sorted(set(query) - _LIST_PARAMS)
    if extra:
        raise InvalidRequest(f"{extra[0]}: unknown parameter")
    unread = query.get("unread", "false")
    if unread not in ("true", "false"):
        raise InvalidRequest("unread: true or false")
    raw_limit = query.get("limit", str(DEFAULT_LIST_LIMIT))
    if not _DIGITS.fullmatch(raw_limit) or not 1 <= int(raw_limit) <= MAX_LIST_LIMIT:
        raise InvalidRequest(f"limit: an integer from 1 to {MAX_LIST_LIMIT}")
    before = None
    if "cursor" in query:
        before = decode_cursor(query["cursor"])
        if before is None:
            raise InvalidRequest("cursor: not a cursor this API returned")
    return unread == "true", int(raw_limit), before


async def list_inbox(request: web.Request) -> web.Response:
    caller, recipient = caller_of(request).name, _recipient(request)
    unread, limit, before = _list_params(dict(request.query))
    page = await request.app[RUNTIME_KEY].store.list_inbox(
        caller, recipient, before=before, limit=limit, unread_only=unread)
    return web.json_response({
        "items": [m.to_json() for m in page.items],
        "nextCursor": encode_cursor(page.next_before) if page.next_before else None})


async def mark_read(request: web.Request) -> web.Response:
    caller, recipient = caller_of(request).name, _recipient(request)
    message_id = request.match_info["message_id"]
    runtime = request.app[RUNTIME_KEY]
    m = None
    if is_message_id(message_id):
        m = await runtime.store.mark_inbox_read(caller, recipient, message_id,
                                                runtime.clock.now_ms())
    if m is None:
        raise NotFound(f"no message {message_id} in this inbox")
    return web.Response(status=204)


async def delete_message(request: web.Request) -> web.Response:
    caller, recipient = caller_of(request).name, _recipient(request)
    message_id = request.match_info["message_id"]
    runtime = request.app[RUNTIME_KEY]
    if is_message_id(message_id):  # anything else is not there: deleting it is done
        await runtime.store.delete_inbox_message(caller, recipient, message_id,
                                                 runtime.clock.now_ms())
    return web.Response(status=204)


async def stream(request: web.Request) -> web.StreamResponse:
    caller, recipient = caller_of(request).name, _recipient(request)
    last_id = request.headers.get("Last-Event-ID")
    if last_id is not None and not is_message_id(last_id):
        raise InvalidRequest("Last-Event-ID: a messageId this stream sent")
    runtime = request.app[RUNTIME_KEY]
    # Subscribe, then read the backlog: anything stored meanwhile is in one or the other.
    async with runtime.inbox_bus.subscribe(caller, recipient) as live:
        backlog = [] if last_id is None else await runtime.store.inbox_after(
            caller, recipient, last_id, REPLAY_MAX)
        async with sse_response(request,
                                ping_interval=runtime.settings.inbox.heartbeat_s) as resp:
            for m in backlog:
                await resp.send(_compact(m), id=m.message_id)
            sent = {m.message_id for m in backlog}
            streams = request.app[STREAMS_KEY]
            streams.add(resp)
            try:
                await _live(resp, live, sent)
            finally:
                streams.discard(resp)
    return resp


async def _end_streams(app: web.Application) -> None:
    streams = app[STREAMS_KEY]
    for resp in list(streams):
        resp.stop_streaming()  # its handler returns; a client reconnects elsewhere


async def _live(resp: EventSourceResponse, live: AsyncIterator[str], sent: set[str]) -> None:
    """Forward live payloads until the client goes (the heartbeat's write fails) or the
    subscription breaks (the client reconnects with ``Last-Event-ID``)."""
    pump = asyncio.create_task(_forward(resp, live, sent))
    gone = asyncio.create_task(resp.wait())
    try:
        await asyncio.wait({pump, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (pump, gone):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    error = pump.exception() if pump.done() and not pump.cancelled() else None
    if isinstance(error, AdapterError):
        # The stream ends; the client's reconnect replays what it missed.
        log.warning("inbox_stream_broken", error=str(error))
    elif error is not None and not isinstance(error, ConnectionError | TimeoutError):
        raise error  # a bug: the middleware logs it (a client that left is no error)


async def _forward(resp: EventSourceResponse, live: AsyncIterator[str], sent: set[str]) -> None:
    async for payload in live:
        try:
            message_id = json.loads(payload)["messageId"]
        except (ValueError, KeyError, TypeError):
            continue  # not a message of ours
        if not isinstance(message_id, str) or message_id in sent:
            continue  # the replay sent it already
        await resp.send(payload, id=message_id)


def add_routes(app: web.Application) -> None:
    streams: set[EventSourceResponse] = set()
    app[STREAMS_KEY] = streams
    app.on_shutdown.append(_end_streams)
    app.router.add_get("/v1/inbox/{recipient}", list_inbox)
    app.router.add_get("/v1/inbox/{recipient}/stream", stream)
    app.router.add_post("/v1/inbox/{recipient}/{message_id}/read", mark_read)
    app.router.add_delete("/v1/inbox/{recipient}/{message_id}", delete_message)
