"""The inbox on the real stack: the notifier (what the dispatcher calls) stores in Cassandra
and publishes through Redis; an SSE client connected through the real API (a real port)
receives it; Last-Event-ID replays what a disconnected client missed; mark-read; another
caller sees nothing; a redelivered occurrence neither duplicates nor loses its read time."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from dispatcher.channels.inbox import InboxNotifier
from tests.integration.conftest import Stack
from tests.unit.http.test_inbox_routes import Sse
from trigger_service.adapters import schema
from trigger_service.adapters.cassandra.store import CassandraStore
from trigger_service.adapters.redis.client import open_from_settings
from trigger_service.adapters.redis.inbox_bus import RedisInboxBus, open_listener
from trigger_service.core.model import new_trigger_id
from trigger_service.core.notify.channels import InboxSpec, OccurrenceNotice
from trigger_service.core.time.clock import SystemClock
from trigger_service.platform.metrics import InMemoryMetrics

pytestmark = pytest.mark.integration


@pytest.fixture
def extra_env() -> dict[str, str]:
    return {"TRIGGER_INBOX_HEARTBEAT_S": "0.5"}


@pytest.fixture
async def inbox(stack: Stack) -> AsyncIterator[InboxNotifier]:
    """The API streams from the real Redis; the notifier has its own client (the
    dispatcher's process)."""
    api_bus = RedisInboxBus(stack.redis, open_listener(stack.settings.redis.url))
    stack.runtime.inbox_bus = api_bus
    client = open_from_settings(stack.settings.redis)
    try:
        yield InboxNotifier(stack.runtime.store, RedisInboxBus(client), SystemClock(),
                            InMemoryMetrics(), stack.settings.inbox.retention_days * 86_400)
    finally:
        await client.aclose()
        await api_bus.close()


def occurrence(stack: Stack, k: int = 0) -> OccurrenceNotice:
    now_ms = SystemClock().now_ms()
    tid = new_trigger_id(now_ms)
    return OccurrenceNotice(tid, f"{tid}.{k}", stack.caller, 0, now_ms,
                      ack_url=f"http://127.0.0.1:8080/v1/ack/{tid}")


SPEC = InboxSpec("ada", "Standup", "in 5 minutes", '{"room":"4.1"}')


@asynccontextmanager
async def stream(stack: Stack, caller: str, token: str | None = None,
                 last_id: str | None = None) -> AsyncIterator[Sse]:
    headers = stack.auth(token) | ({"Last-Event-ID": last_id} if last_id else {})
    resp = await stack.client.get("/v1/inbox/ada/stream", headers=headers)
    # The API answers once its subscription is live: from now on nothing is missed.
    assert resp.status == 200 and resp.content_type == "text/event-stream"
    try:
        yield Sse(resp)
    finally:
        resp.close()


async def test_a_stored_message_reaches_the_stream_quickly(
        stack: Stack, inbox: InboxNotifier) -> None:
    async with stream(stack, stack.caller) as sse:
        occ = occurrence(stack)
        t0 = time.perf_counter()
        out = await inbox.send(SPEC, occ)
        event = await sse.next()
        latency_ms = (time.perf_counter() - t0) * 1000
        print(f"\ninbox send → SSE event: {latency_ms:.1f} ms (store + publish + stream)")
    assert out.ok and event.id == out.provider_message_id
    body = json.loads(event.data)
    assert body["triggerId"] == occ.trigger_id and body["occurrenceId"] == occ.occurrence_id
    assert body["data"] == {"room": "4.1", "ackUrl": occ.ack_url} and body["readAt"] is None
    listed = await (await stack.client.get("/v1/inbox/ada", headers=stack.auth())).json()
    assert listed["items"] == [body]


async def test_reconnect_with_last_event_id_gets_what_was_missed(
        stack: Stack, inbox: InboxNotifier) -> None:
    async with stream(stack, stack.caller) as sse:
        first = (await inbox.send(SPEC, occurrence(stack))).provider_message_id
        assert (await sse.next()).id == first
    missed = []
    for k in (1, 2):
        await asyncio.sleep(0.002)  # later fire times: later ids
        missed.append((await inbox.send(SPEC, occurrence(stack, k))).provider_message_id)
    async with stream(stack, stack.caller, last_id=first) as sse:
        assert [(await sse.next()).id for _ in missed] == missed
        live = (await inbox.send(SPEC, occurrence(stack, 3))).provider_message_id
        event = await sse.next()
        assert event.id == live
        with pytest.raises(TimeoutError):  # nothing more, but heartbeats (every 0.5 s)
            await sse.next(timeout_s=1.2)
        assert sse.comments >= 2


async def test_mark_read_and_a_redelivery_keeps_one_message_and_its_read_time(
        stack: Stack, inbox: InboxNotifier) -> None:
    occ = occurrence(stack)
    mid = (await inbox.send(SPEC, occ)).provider_message_id
    resp = await stack.client.post(f"/v1/inbox/ada/{mid}/read", headers=stack.auth())
    assert resp.status == 204
    [item] = (await (await stack.client.get("/v1/inbox/ada", headers=stack.auth())).json())[
        "items"]
    assert item["readAt"] is not None
    await asyncio.sleep(0.01)
    assert (await inbox.send(SPEC, occ)).provider_message_id == mid  # at least once
    assert (await stack.client.post(f"/v1/inbox/ada/{mid}/read",
                                    headers=stack.auth())).status == 204
    after = (await (await stack.client.get("/v1/inbox/ada", headers=stack.auth())).json())
    assert after["items"] == [item]
    unread = await stack.client.get("/v1/inbox/ada", headers=stack.auth(),
                                    params={"unread": "true"})
    assert (await unread.json())["items"] == []
    assert (await stack.client.delete(f"/v1/inbox/ada/{mid}", headers=stack.auth())).status \
        == 204
    assert (await inbox.send(SPEC, occ)).ok  # delivered again after the delete: stays gone
    gone = await (await stack.client.get("/v1/inbox/ada", headers=stack.auth())).json()
    assert gone == {"items": [], "nextCursor": None}


async def test_every_cell_expires_with_the_retention(
        stack: Stack, inbox: InboxNotifier, store: CassandraStore) -> None:
    mid = (await inbox.send(SPEC, occurrence(stack))).provider_message_id
    assert (await stack.client.post(f"/v1/inbox/ada/{mid}/read",
                                    headers=stack.auth())).status == 204
    [row] = await store.statements.run("inbox_get", [stack.caller, "ada", mid])
    retention_s = stack.settings.inbox.retention_days * 86_400
    assert retention_s - 60 < row[schema.COL_TTL] <= retention_s
    ttl = await asyncio.to_thread(store._session.execute, (
        f"SELECT TTL({schema.COL_READ_AT_MS}) AS t FROM "
        f"{stack.settings.cassandra.keyspace}.{schema.TABLE_INBOX} WHERE "
        f"{schema.COL_CALLER} = %s AND {schema.COL_RECIPIENT} = %s AND "
        f"{schema.COL_MESSAGE_ID} = %s"), (stack.caller, "ada", mid))
    assert retention_s - 60 < ttl.one()["t"] <= retention_s  # read_at goes with the rest


async def test_another_caller_sees_nothing(stack: Stack, inbox: InboxNotifier) -> None:
    other_token, other = stack.token + "-other", stack.caller + "_other"
    async with stream(stack, other, other_token) as theirs, \
            stream(stack, stack.caller) as mine:
        mid = (await inbox.send(SPEC, occurrence(stack))).provider_message_id
        assert (await mine.next()).id == mid
        with pytest.raises(TimeoutError):
            await theirs.next(timeout_s=0.5)
    listed = await stack.client.get("/v1/inbox/ada", headers=stack.auth(other_token))
    assert (await listed.json())["items"] == []
    resp = await stack.client.post(f"/v1/inbox/ada/{mid}/read", headers=stack.auth(other_token))
    assert resp.status == 404
