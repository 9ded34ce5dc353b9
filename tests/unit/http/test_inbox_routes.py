"""``/v1/inbox`` on the in-memory fakes: shapes, errors, caller scope, idempotent read and
delete, and the Server-Sent Events stream (live, heartbeats, Last-Event-ID replay)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace

import pytest
from aiohttp import ClientResponse

from tests.unit.http.test_routes import AUTH, MS_Z, OPERATOR, OTHER, Api, assert_error
from trigger_service.adapters.memory.inbox import MemoryInboxBus
from trigger_service.config.inbox import InboxSettings
from trigger_service.core.errors import CacheError
from trigger_service.core.notify.channels import InboxSpec, OccurrenceNotice
from trigger_service.core.notify.inbox import InboxMessage, message_for

BOX = "/v1/inbox/ada"


@pytest.fixture
def bus(api: Api) -> MemoryInboxBus:
    api.runtime.settings = replace(api.runtime.settings, inbox=InboxSettings(heartbeat_s=0.05))
    assert isinstance(api.runtime.inbox_bus, MemoryInboxBus)
    return api.runtime.inbox_bus


async def put(api: Api, k: int, *, caller: str = "orders", recipient: str = "ada",
              data: str | None = '{"a":[1]}') -> InboxMessage:
    now = api.env.clock.now_ms()
    occ = OccurrenceNotice("trg_x", f"trg_x.{k}", caller, 0, now + k * 1000)
    m = message_for(InboxSpec(recipient, f"title {k}", "body", data), occ, now)
    stored = await api.env.store.put_inbox_message(m, 3600)
    assert stored is not None
    return stored


async def ids(resp: ClientResponse) -> list[str]:
    body = await resp.json()
    assert resp.status == 200, body
    return [i["messageId"] for i in body["items"]]


async def test_list_shape_newest_first_paging_and_unread(api: Api) -> None:
    a, b, c = [await put(api, k) for k in range(3)]
    resp = await api.client.get(BOX, headers=AUTH, params={"limit": "2"})
    body = await resp.json()
    assert resp.status == 200 and [i["messageId"] for i in body["items"]] == [c.message_id,
                                                                              b.message_id]
    item = body["items"][0]
    assert item == {"messageId": c.message_id, "triggerId": "trg_x", "occurrenceId": "trg_x.2",
                    "title": "title 2", "body": "body", "data": {"a": [1]},
                    "createdAt": item["createdAt"], "readAt": None}
    assert MS_Z.match(item["createdAt"])
    rest = await api.client.get(BOX, headers=AUTH, params={"limit": "2",
                                                           "cursor": body["nextCursor"]})
    assert (await rest.json())["nextCursor"] is None
    assert await ids(rest) == [a.message_id]
    assert (await api.client.post(f"{BOX}/{c.message_id}/read", headers=AUTH)).status == 204
    unread = await api.client.get(BOX, headers=AUTH, params={"unread": "true"})
    assert await ids(unread) == [b.message_id, a.message_id]


@pytest.mark.parametrize(("params", "field"), [
    ({"limit": "0"}, "limit"), ({"limit": "201"}, "limit"), ({"limit": "x"}, "limit"),
    ({"limit": "\u00b2"}, "limit"),
    ({"unread": "yes"}, "unread"), ({"cursor": "garbage!"}, "cursor"),
    ({"cursor": "bXNnXzE"}, "cursor"), ({"color": "red"}, "color")])
async def test_bad_parameters_name_the_field(api: Api, params: dict[str, str],
                                             field: str) -> None:
    resp = await api.client.get(BOX, headers=AUTH, params=params)
    assert (await assert_error(resp, 400, "invalid_request"))["field"] == field


async def test_bad_recipient_and_tokens(api: Api) -> None:
    resp = await api.client.get("/v1/inbox/a%20b", headers=AUTH)
    assert (await assert_error(resp, 400, "invalid_request"))["field"] == "recipient"
    await assert_error(await api.client.get(BOX), 401, "unauthorized")
    await assert_error(await api.client.get(BOX, headers=OPERATOR), 403, "forbidden")


async def test_read_keeps_the_first_time_and_unknown_is_404(api: Api) -> None:
    m = await put(api, 0)
    for _ in range(2):
        assert (await api.client.post(f"{BOX}/{m.message_id}/read", headers=AUTH)).status == 204
        api.env.clock.advance_ms(5_000)
    [item] = (await (await api.client.get(BOX, headers=AUTH)).json())["items"]
    assert item["readAt"] == "2023-11-14T22:13:20.000Z"
    for url in (f"{BOX}/msg_01HZZZZZZZZZZZZZZZZZZZZZZZ/read", f"{BOX}/nope/read",
                f"/v1/inbox/bob/{m.message_id}/read"):
        await assert_error(await api.client.post(url, headers=AUTH), 404, "not_found")


async def test_delete_is_idempotent(api: Api) -> None:
    keep, gone = await put(api, 0), await put(api, 1)
    for _ in range(2):
        assert (await api.client.delete(f"{BOX}/{gone.message_id}", headers=AUTH)).status == 204
    assert (await api.client.delete(f"{BOX}/nope", headers=AUTH)).status == 204
    assert await ids(await api.client.get(BOX, headers=AUTH)) == [keep.message_id]
    await assert_error(await api.client.post(f"{BOX}/{gone.message_id}/read", headers=AUTH),
                       404, "not_found")


async def test_another_callers_recipient_is_a_different_inbox(api: Api) -> None:
    mine = await put(api, 0)
    theirs = await put(api, 1, caller="billing")
    assert await ids(await api.client.get(BOX, headers=AUTH)) == [mine.message_id]
    assert await ids(await api.client.get(BOX, headers=OTHER)) == [theirs.message_id]
    await assert_error(await api.client.post(f"{BOX}/{mine.message_id}/read", headers=OTHER),
                       404, "not_found")
    assert (await api.client.delete(f"{BOX}/{mine.message_id}", headers=OTHER)).status == 204
    assert await ids(await api.client.get(BOX, headers=AUTH)) == [mine.message_id]


# --- the stream --------------------------------------------------------------------------
@dataclass
class Event:
    id: str | None
    data: str


@dataclass
class Sse:
    resp: ClientResponse
    comments: int = 0
    retry_ms: int | None = None  # the last retry: hint

    async def next(self, timeout_s: float = 5) -> Event:
        """The next event (comments, the heartbeats, are counted and skipped)."""
        return await asyncio.wait_for(self._next(), timeout_s)

    async def _next(self) -> Event:
        fields: dict[str, str] = {}
        while True:
            line = (await self.resp.content.readline()).decode().rstrip("\r\n")
            if line.startswith(":"):
                self.comments += 1
            elif line:
                name, _, value = line.partition(": ")
                fields[name] = value
            elif "data" in fields:
                return Event(fields.get("id"), fields["data"])
            elif "retry" in fields:  # a block without data is no event (the SSE spec)
                self.retry_ms = int(fields.pop("retry"))
            elif line == "" and self.resp.content.at_eof():
                raise EOFError("the stream ended")


async def open_stream(api: Api, bus: MemoryInboxBus, headers: dict[str, str],
                      caller: str = "orders") -> AsyncIterator[Sse]:
    resp = await api.client.get(f"{BOX}/stream", headers=headers)
    assert resp.status == 200 and resp.content_type == "text/event-stream"
    for _ in range(100):  # subscribed before anything is published
        if bus.subscribers(caller, "ada"):
            break
        await asyncio.sleep(0.01)
    try:
        yield Sse(resp)
    finally:
        resp.close()


def payload(m: InboxMessage) -> str:
    return json.dumps(m.to_json(), separators=(",", ":"))


async def test_stream_sends_each_new_message_with_its_id_and_heartbeats(
        api: Api, bus: MemoryInboxBus) -> None:
    async for sse in open_stream(api, bus, AUTH):
        m = await put(api, 0)
        await bus.publish("orders", "ada", payload(m))
        await bus.publish("orders", "bob", payload(await put(api, 1, recipient="bob")))
        event = await sse.next()
        assert event.id == m.message_id and json.loads(event.data) == m.to_json()
        await asyncio.sleep(0.2)
        m2 = await put(api, 2)
        await bus.publish("orders", "ada", payload(m2))
        assert (await sse.next()).id == m2.message_id
        assert sse.comments >= 2


async def test_another_caller_streams_nothing_of_ours(api: Api, bus: MemoryInboxBus) -> None:
    async for sse in open_stream(api, bus, OTHER, caller="billing"):
        await bus.publish("orders", "ada", payload(await put(api, 0)))
        theirs = await put(api, 1, caller="billing")
        await bus.publish("billing", "ada", payload(theirs))
        assert (await sse.next()).id == theirs.message_id


async def test_last_event_id_replays_what_was_missed_then_goes_live_without_repeats(
        api: Api, bus: MemoryInboxBus) -> None:
    a, b, c = [await put(api, k) for k in range(3)]
    d = await put(api, 3)
    real_after = api.env.store.inbox_after

    async def after_while_d_is_published(*args: object, **kw: object) -> list[InboxMessage]:
        await bus.publish("orders", "ada", payload(d))  # stored and published mid-replay
        return await real_after(*args, **kw)  # type: ignore[arg-type]

    api.env.store.inbox_after = after_while_d_is_published  # type: ignore[method-assign]
    async for sse in open_stream(api, bus, AUTH | {"Last-Event-ID": a.message_id}):
        assert [(await sse.next()).id for _ in range(3)] == [b.message_id, c.message_id,
                                                             d.message_id]
        e = await put(api, 4)
        await bus.publish("orders", "ada", payload(e))
        assert (await sse.next()).id == e.message_id  # d was not sent twice


async def test_stream_errors(api: Api, bus: MemoryInboxBus) -> None:
    resp = await api.client.get(f"{BOX}/stream", headers=AUTH | {"Last-Event-ID": "x\u00e9"})
    assert (await assert_error(resp, 400, "invalid_request"))["field"] == "Last-Event-ID"
    bus.failure = CacheError("redis down")
    await assert_error(await api.client.get(f"{BOX}/stream", headers=AUTH), 503,
                       "dependency_unavailable")
    await assert_error(await api.client.get(f"{BOX}/stream", headers=OPERATOR), 403,
                       "forbidden")


async def test_stopping_the_api_ends_open_streams(api: Api, bus: MemoryInboxBus) -> None:
    api.runtime.settings = replace(api.runtime.settings, inbox=InboxSettings(heartbeat_s=60))
    async for sse in open_stream(api, bus, AUTH):
        await asyncio.wait_for(api.client.app.shutdown(), 5)  # on_shutdown: streams end
        # Nothing but the retry: hint it opened with, then the end.
        assert await asyncio.wait_for(sse.resp.content.read(), 5) == b"retry: 3000\n\n"
        assert bus.subscribers("orders", "ada") == 0
