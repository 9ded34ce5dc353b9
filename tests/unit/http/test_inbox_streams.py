"""The inbox stream's protections on the in-memory fakes: caps per caller (on this and the
other API processes) and per process (429 too_many_streams with Retry-After), the maximum
lifetime (a retry: hint, then a clean end), the bus as a hint only (a forged or foreign id
sends nothing), and a broken subscription ending the stream."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import replace

import pytest

from tests.unit.http.test_inbox_routes import BOX, Sse, put
from tests.unit.http.test_routes import AUTH, OTHER, Api, assert_error
from trigger_service.adapters.memory.inbox import MemoryInboxBus
from trigger_service.adapters.memory.limits import MemoryStreamSlots
from trigger_service.config.inbox import InboxSettings
from trigger_service.core.errors import CacheError
from trigger_service.core.time.clock import ManualClock
from trigger_service.http.routes.inbox import GATE_KEY

LIFETIME_S = 600


class BreakableInboxBus(MemoryInboxBus):
    """A bus whose subscriptions can be broken, as a lost Redis connection breaks them."""

    def break_subscriptions(self, error: CacheError) -> None:
        """Every open subscription raises ``error``."""
        self._fanout.fail_all(error)


@pytest.fixture
def bus(api: Api) -> MemoryInboxBus:
    api.runtime.settings = replace(api.runtime.settings, inbox=InboxSettings(
        heartbeat_s=60, max_streams=3, max_streams_per_caller=2,
        stream_max_lifetime_s=LIFETIME_S, stream_retry_ms=1500))
    assert isinstance(api.runtime.inbox_bus, MemoryInboxBus)
    return api.runtime.inbox_bus


@asynccontextmanager
async def stream(api: Api, headers: dict[str, str]) -> AsyncIterator[Sse]:
    resp = await api.client.get(f"{BOX}/stream", headers=headers)
    assert resp.status == 200 and resp.content_type == "text/event-stream"
    try:
        yield Sse(resp)
    finally:
        resp.close()


def gate_count(api: Api, caller: str | None = None) -> int:
    return api.client.app[GATE_KEY].open_streams(caller)


async def until(pred: Callable[[], bool], timeout_s: float = 5) -> None:
    """Poll ``pred`` (the handler's clean-up runs after the client has seen the end)."""
    for _ in range(int(timeout_s / 0.01)):
        if pred():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("not within the time")


async def test_a_caller_over_its_cap_gets_429_with_retry_after_others_still_stream(
        api: Api, bus: MemoryInboxBus) -> None:
    async with AsyncExitStack() as streams:
        for _ in range(2):
            await streams.enter_async_context(stream(api, AUTH))
        resp = await api.client.get(f"{BOX}/stream", headers=AUTH)
        await assert_error(resp, 429, "too_many_streams")
        # The oldest stream ends within its lifetime (its last tenth at random).
        assert LIFETIME_S * 0.9 - 1 <= int(resp.headers["Retry-After"]) <= LIFETIME_S
        assert bus.subscribers("orders", "ada") == 2  # the refused one never subscribed
        await streams.enter_async_context(stream(api, OTHER))  # another caller: fine
        # The process's cap (3) is reached now: the other caller is refused too.
        await assert_error(await api.client.get(f"{BOX}/stream", headers=OTHER), 429,
                           "too_many_streams")
        assert (await api.client.get(BOX, headers=AUTH)).status == 200  # not a stream: fine
    await until(lambda: gate_count(api) == 0)  # closed streams free their places
    async with stream(api, AUTH), stream(api, AUTH):
        assert gate_count(api, "orders") == 2


async def test_a_stream_ends_cleanly_at_its_lifetime_after_a_retry_hint(
        api: Api, bus: MemoryInboxBus) -> None:
    clock = api.env.clock
    assert isinstance(clock, ManualClock)
    async with stream(api, AUTH) as sse:
        m = await put(api, 0)
        await bus.publish("orders", "ada", m.message_id)
        assert (await sse.next()).id == m.message_id
        assert sse.retry_ms == 1500  # sent before anything else
        clock.advance_ms(LIFETIME_S * 900 - 1_000)  # not yet: the earliest end is at 90 %
        await asyncio.sleep(0.1)
        assert gate_count(api) == 1
        clock.advance_ms(LIFETIME_S * 100 + 1_000)
        rest = await asyncio.wait_for(sse.resp.content.read(), 5)
        assert rest == b": the stream's lifetime is over; reconnect\n\n"  # then the end
    await until(lambda: gate_count(api) == 0 and bus.subscribers("orders", "ada") == 0)


async def test_only_a_stored_message_of_this_inbox_is_sent_whatever_the_bus_says(
        api: Api, bus: MemoryInboxBus) -> None:
    theirs = await put(api, 0, caller="billing")  # another caller's recipient "ada"
    other_recipient = await put(api, 1, recipient="bob")
    deleted = await put(api, 2)
    await api.env.store.delete_inbox_message("orders", "ada", deleted.message_id, 0)
    async with stream(api, AUTH) as sse:
        for forged in ("msg_01KQ8Z5C6G7N2M3P4R5S6T7V8W",  # no such message
                       theirs.message_id, other_recipient.message_id, deleted.message_id,
                       '{"messageId":"' + theirs.message_id + '","title":"forged"}',
                       "not an id"):
            await bus.publish("orders", "ada", forged)
        real = await put(api, 3)
        await bus.publish("orders", "ada", real.message_id)
        event = await sse.next()
        assert event.id == real.message_id and '"title":"title 3"' in event.data
        await bus.publish("orders", "ada", real.message_id)  # a repeat is not sent twice
        with pytest.raises(TimeoutError):
            await sse.next(timeout_s=0.3)


async def test_a_message_published_as_json_by_an_earlier_dispatcher_is_read_from_the_store(
        api: Api, bus: MemoryInboxBus) -> None:
    async with stream(api, AUTH) as sse:
        m = await put(api, 0)
        await bus.publish("orders", "ada", '{"messageId":"' + m.message_id + '","title":"x"}')
        event = await sse.next()
        assert event.id == m.message_id and '"title":"title 0"' in event.data


async def test_a_broken_subscription_ends_the_stream_and_frees_its_place(
        api: Api, bus: MemoryInboxBus) -> None:
    api.runtime.inbox_bus = breakable = BreakableInboxBus()  # (bus: sets the stream settings)
    async with stream(api, AUTH) as sse:
        breakable.break_subscriptions(CacheError("redis connection lost"))
        assert await asyncio.wait_for(sse.resp.content.read(), 5) == b"retry: 1500\n\n"
    await until(lambda: gate_count(api) == 0)


async def test_the_callers_cap_counts_its_streams_on_every_api_process(
        api: Api, bus: MemoryInboxBus) -> None:
    slots = api.runtime.stream_slots
    assert isinstance(slots, MemoryStreamSlots)
    now_ms = api.env.clock.now_ms()
    # Another API process holds both of orders' slots; the earlier ends in 100 s.
    await slots.take("orders", "elsewhere-1", now_ms + 100_000, 2, now_ms)
    await slots.take("orders", "elsewhere-2", now_ms + 200_000, 2, now_ms)
    resp = await api.client.get(f"{BOX}/stream", headers=AUTH)
    await assert_error(resp, 429, "too_many_streams")
    assert resp.headers["Retry-After"] == "100"
    assert gate_count(api) == 0  # this process counted nothing for it
    await slots.give_back("orders", "elsewhere-1")
    async with stream(api, AUTH):
        assert len(slots.held["orders"]) == 2
    await until(lambda: len(slots.held["orders"]) == 1)  # given back as the stream ended


async def test_without_redis_the_shared_count_lets_streams_through_under_the_process_caps(
        api: Api, bus: MemoryInboxBus) -> None:
    slots = api.runtime.stream_slots
    assert isinstance(slots, MemoryStreamSlots)
    slots.fail = True
    async with stream(api, AUTH), stream(api, AUTH):
        await assert_error(await api.client.get(f"{BOX}/stream", headers=AUTH), 429,
                           "too_many_streams")  # this process's cap for the caller
