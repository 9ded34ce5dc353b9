"""``/v1/inbox/{recipient}``: a caller's recipients' messages, read state, deletion, and a
live Server-Sent Events stream.

Every route is caller-scoped: the (caller, recipient) pair is the inbox, so another
caller's recipient of the same name is simply a different (usually empty) inbox.

The stream subscribes first (Redis pub/sub through ``InboxBus``), then replays from the
store what came after ``Last-Event-ID``, then goes live, skipping what the replay sent: a
message stored between the two is seen once, never lost. The bus carries message ids only;
each is read from the store within the stream's own (caller, recipient), so a forged or
foreign id sends nothing.

Streams are capped per caller and per API process (``core.notify.streams.StreamGate``), and per
caller across the processes (``StreamSlots``, Redis): one more is 429 ``too_many_streams``
with ``Retry-After``. Each ends after its maximum lifetime (one reaper task per process):
the first thing a stream sends is a ``retry:`` hint, its last (at the end of its lifetime) a
comment, and the client reconnects with ``Last-Event-ID``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import uuid
from collections.abc import AsyncIterator, Coroutine
from dataclasses import dataclass
from typing import Any

import structlog
from aiohttp import web
from aiohttp_sse import EventSourceResponse, sse_response

from trigger_service.core.errors import AdapterError, InvalidRequest, NotFound, TooManyStreams
from trigger_service.core.notify.inbox import (
    DEFAULT_LIST_LIMIT,
    MAX_LIST_LIMIT,
    REPLAY_MAX,
    InboxMessage,
    bus_message_id,
    decode_cursor,
    encode_cursor,
    is_message_id,
    is_recipient,
)
from trigger_service.core.notify.streams import StreamCaps, StreamGate, StreamTicket
from trigger_service.core.ports.inbox import InboxStore
from trigger_service.core.time.timing import seconds_until
from trigger_service.http.auth import caller_of
from trigger_service.http.keys import LONG_LIVED_KEY, RUNTIME_KEY
from trigger_service.platform.wiring import Runtime

log = structlog.get_logger(__name__)

_LIST_PARAMS = frozenset({"unread", "limit", "cursor"})
_DIGITS = re.compile(r"[0-9]{1,6}")  # ASCII only: str.isdigit() takes "²", int() does not
# How often the reaper looks for streams past their lifetime (one task per process, rather
# than a timer per stream); a stream so lives up to this much longer than its ticket says.
REAP_EVERY_MS = 1000
_SLOT_MARGIN_MS = 10_000


@dataclass(frozen=True)
class _Open:
    ticket: StreamTicket
    expired: asyncio.Event  # set by the reaper


# The open streams: ended when the API stops (aiohttp's on_shutdown runs before it waits for
# open requests, which a stream would otherwise hold for the whole shutdown timeout), or by
# the reaper at the end of their lifetime.
STREAMS_KEY: web.AppKey[dict[EventSourceResponse, _Open]] = web.AppKey("inbox_streams")
# The caps on open streams (per caller and per process) and each stream's end of life.
GATE_KEY: web.AppKey[StreamGate] = web.AppKey("inbox_stream_gate")


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
    request[LONG_LIVED_KEY] = True  # refused: the connection is closed (http.server)
    caller, recipient = caller_of(request).name, _recipient(request)
    last_id = request.headers.get("Last-Event-ID")
    if last_id is not None and not is_message_id(last_id):
        raise InvalidRequest("Last-Event-ID: a messageId this stream sent")
    runtime = request.app[RUNTIME_KEY]
    inbox = runtime.settings.inbox
    gate = request.app[GATE_KEY]
    ticket = gate.admit(caller, runtime.clock.now_ms(), StreamCaps(
        inbox.max_streams, inbox.max_streams_per_caller,
        int(inbox.stream_max_lifetime_s * 1000)))  # TooManyStreams: 429
    try:
        # Subscribe, then read the backlog: anything stored meanwhile is in one or the other.
        async with _shared_slot(runtime, ticket), \
                runtime.inbox_bus.subscribe(caller, recipient) as live:
            backlog = [] if last_id is None else await runtime.store.inbox_after(
                caller, recipient, last_id, REPLAY_MAX)
            async with sse_response(request, ping_interval=inbox.heartbeat_s) as resp:
                # Sent first, so it governs every way this stream may end.
                await resp.write(f"retry: {inbox.stream_retry_ms}\n\n".encode())
                for m in backlog:
                    await resp.send(_compact(m), id=m.message_id)
                feed = _Feed(runtime.store, caller, recipient, {m.message_id for m in backlog})
                streams = request.app[STREAMS_KEY]
                streams[resp] = entry = _Open(ticket, asyncio.Event())
                try:
                    await _live(resp, feed.forward(resp, live), entry.expired.wait())
                finally:
                    streams.pop(resp, None)
    finally:
        gate.release(ticket)
    return resp


@contextlib.asynccontextmanager
async def _shared_slot(runtime: Runtime, ticket: StreamTicket) -> AsyncIterator[None]:
    """Hold one of the caller's ``TRIGGER_INBOX_MAX_STREAMS_PER_CALLER`` slots across every
    API process while the stream is open; ``TooManyStreams`` when they are all held. When
    Redis fails it lets the stream through (logged): the process's own caps still hold."""
    slots, caller, now_ms = runtime.stream_slots, ticket.caller, runtime.clock.now_ms()
    slot: str | None = uuid.uuid4().hex
    first_end_ms = None
    try:
        # Counted a little past the stream's end of life: a dead process's slots free
        # themselves, a live one gives its slot back as the stream ends.
        first_end_ms = await slots.take(caller, str(slot), ticket.ends_at_ms + _SLOT_MARGIN_MS,
                                        runtime.settings.inbox.max_streams_per_caller, now_ms)
    except AdapterError as e:
        log.warning("inbox_stream_slots_unavailable", error=str(e))
        slot = None
    if first_end_ms is not None:
        raise TooManyStreams(
            "this caller has as many inbox streams open as it may (across the API "
            "processes); close one, or retry later", seconds_until(first_end_ms, now_ms))
    try:
        yield
    finally:
        if slot is not None:
            with contextlib.suppress(AdapterError):  # not given back: it frees itself in time
                await slots.give_back(caller, slot)


async def _end_streams(app: web.Application) -> None:
    streams = app[STREAMS_KEY]
    for resp in list(streams):
        resp.stop_streaming()  # its handler returns; a client reconnects elsewhere


async def _reaper(app: web.Application) -> AsyncIterator[None]:
    """While the app runs: every ``REAP_EVERY_MS``, end the streams past their lifetime."""
    clock = app[RUNTIME_KEY].clock

    async def reap() -> None:
        while True:
            await clock.sleep_ms(REAP_EVERY_MS)
            now_ms = clock.now_ms()
            for entry in app[STREAMS_KEY].values():
                if entry.ticket.ends_at_ms <= now_ms:
                    entry.expired.set()

    task = asyncio.create_task(reap())
    yield
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def _live(resp: EventSourceResponse, pump_work: Coroutine[Any, Any, None],
                lifetime: Coroutine[Any, Any, Any]) -> None:
    """Forward live messages until the client goes (the heartbeat's write fails), the
    subscription breaks, or the stream's lifetime is over; in each case the client
    reconnects with ``Last-Event-ID``."""
    pump = asyncio.create_task(pump_work)
    gone = asyncio.create_task(resp.wait())
    expiry = asyncio.create_task(lifetime)
    try:
        await asyncio.wait({pump, gone, expiry}, return_when=asyncio.FIRST_COMPLETED)
        expired = expiry.done() and not gone.done()  # (cancelling below makes all done)
    finally:
        for task in (pump, gone, expiry):
            task.cancel()
        # Each outcome is looked at below (awaiting a failed task would raise it here).
        await asyncio.gather(pump, gone, expiry, return_exceptions=True)
    error = pump.exception() if not pump.cancelled() else None
    if isinstance(error, AdapterError):
        # The stream ends; the client's reconnect replays what it missed.
        log.warning("inbox_stream_broken", error=str(error))
    elif error is not None and not isinstance(error, ConnectionError | TimeoutError):
        raise error  # a bug: the middleware logs it (a client that left is no error)
    elif expired:
        with contextlib.suppress(ConnectionError, RuntimeError):  # the client left meanwhile
            await resp.write(b": the stream's lifetime is over; reconnect\n\n")


@dataclass
class _Feed:
    """What one stream sends live: the messages the bus names that its store holds in this
    (caller, recipient), each once (``sent`` starts with the replay's)."""

    store: InboxStore
    caller: str
    recipient: str
    sent: set[str]

    async def forward(self, resp: EventSourceResponse, live: AsyncIterator[str]) -> None:
        async for payload in live:
            message_id = bus_message_id(payload)
            if message_id is None or message_id in self.sent:
                continue  # not a message id, or the replay sent it already
            m = await self.store.get_inbox_message(self.caller, self.recipient, message_id)
            if m is None or (m.caller, m.recipient) != (self.caller, self.recipient):
                # Forged, another inbox's, or deleted since: the bus is no authority.
                log.info("inbox_stream_skipped", message_id=message_id)
                continue
            self.sent.add(message_id)
            await resp.send(_compact(m), id=message_id)


def add_routes(app: web.Application) -> None:
    app[STREAMS_KEY] = {}
    app[GATE_KEY] = StreamGate()
    app.on_shutdown.append(_end_streams)
    app.cleanup_ctx.append(_reaper)
    app.router.add_get("/v1/inbox/{recipient}", list_inbox)
    app.router.add_get("/v1/inbox/{recipient}/stream", stream)
    app.router.add_post("/v1/inbox/{recipient}/{message_id}/read", mark_read)
    app.router.add_delete("/v1/inbox/{recipient}/{message_id}", delete_message)
