"""Inbox streams on the real stack (Cassandra, Redis, the API on a real port): a caller at
its stream cap (counted on every API process) gets 429 while another caller's registrations
go on; a caller flooding the API process with stream requests (or kept-alive requests) and
holding every connection gets its refused ones closed and no more than its share of the
connections, while another caller's registrations are answered 201; a message forged on the
Redis bus is never delivered, a real one is; many streams share the API's one Redis
subscription, which comes back after Redis drops it."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass

import pytest

from dispatcher.channels.inbox import InboxNotifier
from tests.integration.conftest import Stack
from tests.unit.http.test_inbox_routes import Sse
from trigger_service.adapters import schema
from trigger_service.adapters.redis.client import open_client
from trigger_service.adapters.redis.inbox_bus import RedisInboxBus, open_listener
from trigger_service.adapters.redis.limits import RedisStreamSlots
from trigger_service.core.model import new_trigger_id
from trigger_service.core.notify.channels import InboxSpec, OccurrenceNotice
from trigger_service.core.time.clock import SystemClock
from trigger_service.platform.metrics import InMemoryMetrics

pytestmark = pytest.mark.integration

PER_CALLER = 5
MAX_CONNECTIONS = 60  # the API process's cap here; a caller's share: half of it
FLOOD = 200
SPEC = InboxSpec("ada", "Standup", "in 5 minutes", None)


@pytest.fixture
def extra_env() -> dict[str, str]:
    return {"TRIGGER_INBOX_HEARTBEAT_S": "0.5", "TRIGGER_INBOX_MAX_STREAMS": "20",
            "TRIGGER_INBOX_MAX_STREAMS_PER_CALLER": str(PER_CALLER),
            "TRIGGER_LIMITS_MAX_CONNECTIONS": str(MAX_CONNECTIONS),
            "TRIGGER_LIMITS_CALLER_CONNECTION_SHARE": "0.5"}


@pytest.fixture
async def hub(stack: Stack) -> AsyncIterator[tuple[RedisInboxBus, str]]:
    """The API's bus, its hub connection named uniquely (to find it in CLIENT LIST)."""
    name = "test-hub-" + uuid.uuid4().hex[:10]
    bus = RedisInboxBus(stack.redis, open_listener(stack.settings.redis.url, name))
    stack.runtime.inbox_bus = bus
    stack.runtime.stream_slots = RedisStreamSlots(stack.redis)  # as Runtime.open wires it
    try:
        yield bus, name
    finally:
        await bus.close()


@pytest.fixture
async def notifier(stack: Stack) -> AsyncIterator[InboxNotifier]:
    """What a dispatcher process runs: its own Redis client, publishing only."""
    client = open_client(stack.settings.redis.url)
    try:
        yield InboxNotifier(stack.runtime.store, RedisInboxBus(client), SystemClock(),
                            InMemoryMetrics(), 86_400)
    finally:
        await client.aclose()


def occurrence(caller: str) -> OccurrenceNotice:
    now_ms = SystemClock().now_ms()
    tid = new_trigger_id(now_ms)
    return OccurrenceNotice(tid, f"{tid}.0", caller, 0, now_ms)


@asynccontextmanager
async def stream(stack: Stack, recipient: str = "ada",
                 token: str | None = None) -> AsyncIterator[Sse]:
    resp = await stack.client.get(f"/v1/inbox/{recipient}/stream", headers=stack.auth(token))
    assert resp.status == 200, await resp.text()  # answered once the subscription is live
    try:
        yield Sse(resp)
    finally:
        resp.close()


async def hub_connections(stack: Stack, name: str) -> list[dict[str, object]]:
    return [c for c in await stack.redis.client_list() if c.get("name") == name]


async def test_a_caller_at_its_stream_cap_gets_429_while_another_caller_registers(
        stack: Stack, hub: tuple[RedisInboxBus, str]) -> None:
    other_token = stack.token + "-other"
    async with AsyncExitStack() as streams:
        for k in range(PER_CALLER):
            await streams.enter_async_context(stream(stack, f"r{k}"))
        resp = await stack.client.get("/v1/inbox/ada/stream", headers=stack.auth())
        body = await resp.json()
        assert resp.status == 429 and body["error"] == "too_many_streams", body
        assert int(resp.headers["Retry-After"]) >= 1
        for _ in range(10):  # another caller's registrations are unaffected
            resp = await stack.client.post("/v1/triggers", json=stack.body(delaySeconds=600),
                                           headers=stack.auth(other_token))
            assert resp.status == 201, await resp.text()
        async with stream(stack, token=other_token):  # and so are its streams
            pass
    # The API sees a client gone at its next heartbeat (0.5 s): then its place is free.
    for _ in range(50):
        resp = await stack.client.get("/v1/inbox/ada/stream", headers=stack.auth())
        resp.close()
        if resp.status == 200:
            break
        await asyncio.sleep(0.1)
    assert resp.status == 200


@dataclass
class Held:
    """One of the flood's connections, never closed by its client: its answer's status."""

    status: int
    reader: asyncio.StreamReader

    async def closed_by_server(self) -> bool:
        try:
            while await asyncio.wait_for(self.reader.read(65536), timeout=5.0):
                pass  # the rest of the answer
        except TimeoutError:
            return False
        except ConnectionError:
            return True
        return True


async def flood(stack: Stack, request_line: str, writers: list[asyncio.StreamWriter],
                ) -> list[Held]:
    """``FLOOD`` connections at once, each sending ``request_line`` as the test caller and
    reading its answer's head; the client closes none of them (``writers`` keeps them)."""
    head = (f"{request_line} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {stack.token}"
            "\r\n\r\n").encode()

    async def one() -> Held:
        reader, writer = await asyncio.open_connection(stack.client.host, stack.client.port)
        writers.append(writer)
        writer.write(head)
        answer = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=30)
        return Held(int(answer.split()[1]), reader)

    return await asyncio.gather(*(one() for _ in range(FLOOD)))


async def registrations_of_another_caller(stack: Stack) -> list[int]:
    statuses = []
    for _ in range(10):
        resp = await stack.client.post("/v1/triggers", json=stack.body(delaySeconds=600),
                                       headers=stack.auth(stack.token + "-other"))
        statuses.append(resp.status)
        await resp.read()
    return statuses


async def test_a_flood_of_held_stream_requests_leaves_another_callers_registrations_201(
        stack: Stack, hub: tuple[RedisInboxBus, str]) -> None:
    writers: list[asyncio.StreamWriter] = []
    try:
        held = await flood(stack, "GET /v1/inbox/ada/stream", writers)
        statuses = Counter(h.status for h in held)
        assert statuses[200] == PER_CALLER and set(statuses) <= {200, 429, 503}, statuses
        assert await registrations_of_another_caller(stack) == [201] * 10
        refused = [h for h in held if h.status != 200]
        # Every refusal, 429 (streams, the caller's share) or 503 (the process's cap), is
        # closed by the server, whatever its client does.
        closed = await asyncio.gather(*(h.closed_by_server() for h in refused))
        assert all(closed), f"{closed.count(False)} of {len(refused)} refused left open"
    finally:
        for w in writers:
            w.close()


async def test_a_flood_of_held_kept_alive_requests_leaves_another_callers_registrations_201(
        stack: Stack) -> None:
    writers: list[asyncio.StreamWriter] = []
    try:
        held = await flood(stack, "GET /v1/triggers?limit=1", writers)
        statuses = Counter(h.status for h in held)
        assert statuses[200] > 0 and set(statuses) <= {200, 429, 503}, statuses
        # Of those answered and kept alive, at most its share is still open: the server
        # closed the rest (a newer connection took the slot of the one idle the longest).
        closed = await asyncio.gather(*(h.closed_by_server() for h in held if h.status == 200))
        assert 0 < closed.count(False) <= MAX_CONNECTIONS // 2, Counter(closed)
        assert await registrations_of_another_caller(stack) == [201] * 10
    finally:
        for w in writers:
            w.close()


async def test_the_callers_streams_on_another_api_process_count_against_its_cap(
        stack: Stack, hub: tuple[RedisInboxBus, str]) -> None:
    client = open_client(stack.settings.redis.url)
    elsewhere = RedisStreamSlots(client)  # another API process's view of the same counts
    now_ms = SystemClock().now_ms()
    try:
        for k in range(PER_CALLER - 1):
            assert await elsewhere.take(stack.caller, f"other-{k}", now_ms + 60_000,
                                        PER_CALLER, now_ms) is None
        async with stream(stack):  # the last place
            resp = await stack.client.get("/v1/inbox/ada/stream", headers=stack.auth())
            assert resp.status == 429 and (await resp.json())["error"] == "too_many_streams"
            assert 1 <= int(resp.headers["Retry-After"]) <= 60
            await elsewhere.give_back(stack.caller, "other-0")
            async with stream(stack):  # the place given back
                pass
    finally:
        await client.aclose()


async def test_a_forged_bus_message_is_not_delivered_a_real_one_is(
        stack: Stack, hub: tuple[RedisInboxBus, str], notifier: InboxNotifier) -> None:
    other = stack.caller + "_other"
    theirs = await notifier.send(SPEC, occurrence(other))  # another caller's "ada"
    assert theirs.ok and theirs.provider_message_id
    channel = schema.inbox_channel(stack.caller, "ada")
    async with stream(stack) as sse:
        for forged in ("msg_01KQ8Z5C6G7N2M3P4R5S6T7V8W", theirs.provider_message_id,
                       '{"messageId":"msg_01KQ8Z5C6G7N2M3P4R5S6T7V8W","title":"Pay now"}',
                       "data: injected"):
            await stack.redis.publish(channel, forged)
        real = await notifier.send(SPEC, occurrence(stack.caller))
        event = await sse.next()
        assert event.id == real.provider_message_id and '"title":"Standup"' in event.data
        with pytest.raises(TimeoutError):  # and nothing else came (heartbeats only)
            await sse.next(timeout_s=1.0)


async def test_many_streams_share_one_redis_subscription_which_comes_back_after_a_drop(
        stack: Stack, hub: tuple[RedisInboxBus, str], notifier: InboxNotifier) -> None:
    bus, name = hub
    other_token = stack.token + "-other"
    async with AsyncExitStack() as streams:
        mine = [await streams.enter_async_context(stream(stack)) for _ in range(PER_CALLER)]
        for k in range(PER_CALLER):  # another caller's, on other recipients
            await streams.enter_async_context(stream(stack, f"r{k}", other_token))
        assert bus.local_subscribers() == 2 * PER_CALLER
        [conn] = await hub_connections(stack, name)  # ten streams, one connection
        assert (conn["psub"], conn["sub"]) == ("1", "0")
        sent = await notifier.send(SPEC, occurrence(stack.caller))
        assert [(await sse.next()).id for sse in mine] == [sent.provider_message_id] * PER_CALLER
        await stack.redis.client_kill_filter(_id=str(conn["id"]))  # Redis drops the hub
        for sse in mine:  # each stream ends; its client reconnects
            with pytest.raises(EOFError):
                await sse.next()
    async with stream(stack) as sse:  # a new stream brings the hub back
        [again] = await hub_connections(stack, name)
        assert again["id"] != conn["id"]
        sent = await notifier.send(SPEC, occurrence(stack.caller))
        assert (await sse.next()).id == sent.provider_message_id


async def test_the_command_pool_never_opens_more_connections_than_its_bound(
        stack: Stack) -> None:
    name = "test-pool-" + uuid.uuid4().hex[:10]
    client = open_client(stack.settings.redis.url, max_connections=2, client_name=name)
    key = "test-pool-empty-" + uuid.uuid4().hex
    try:
        # Six commands that each hold a connection for 0.2 s: two run, the others wait.
        async def wait_on_empty_list() -> object:
            return await client.blpop([key], timeout=0.2)  # type: ignore[misc]

        waits = [asyncio.create_task(wait_on_empty_list()) for _ in range(6)]
        await asyncio.sleep(0.1)
        during = await hub_connections(stack, name)
        assert await asyncio.gather(*waits) == [None] * 6  # each got a connection in turn
        assert len(during) == 2 and len(await hub_connections(stack, name)) == 2
    finally:
        await client.aclose()
