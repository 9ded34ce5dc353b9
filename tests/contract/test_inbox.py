"""``InboxStore`` (``MemoryStore``, ``CassandraStore``) and ``InboxBus`` (``MemoryInboxBus``,
``RedisInboxBus``) against one contract: idempotent stores that keep the first content and
read time, caller scoping, newest-first paging, the unread filter, deletion that a
redelivery cannot undo, the replay after an id, and live fan-out per (caller, recipient)."""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack
from dataclasses import replace

from tests.contract.support import Store, unique, utc_ms
from trigger_service.core.model import new_trigger_id
from trigger_service.core.notify.channels import InboxSpec, OccurrenceNotice
from trigger_service.core.notify.inbox import InboxMessage, message_for
from trigger_service.core.ports.inbox import InboxBus

T0 = utc_ms(2031, 3, 10, 12, 0, 0, 0)
TTL_S = 3_600


def msg(caller: str, recipient: str = "ada", *, k: int = 0, title: str = "Standup",
        data: str | None = '{"room":"4.1"}', now_ms: int = T0) -> InboxMessage:
    """The k-th occurrence's message (fire times a minute apart: ids sort by k)."""
    tid = new_trigger_id(T0)
    occ = OccurrenceNotice(tid, f"{tid}.{k}", caller, 0, T0 + k * 60_000)
    return message_for(InboxSpec(recipient, title, "in 5 minutes \u2713", data), occ, now_ms)


async def put_all(store: Store, messages: list[InboxMessage]) -> None:
    await asyncio.gather(*(store.put_inbox_message(m, TTL_S) for m in messages))


async def test_store_round_trip_and_a_repeat_keeps_the_first(store: Store) -> None:
    m = msg(unique("ib-"), data=None)
    assert await store.put_inbox_message(m, TTL_S) == m
    assert await store.get_inbox_message(m.caller, m.recipient, m.message_id) == m
    again = replace(m, title="changed", created_at_ms=T0 + 9_000)
    assert await store.put_inbox_message(again, TTL_S) == m
    assert await store.get_inbox_message(m.caller, m.recipient, m.message_id) == m


async def test_a_title_that_looks_sealed_reads_back_as_written(store: Store) -> None:
    # The caller's free text: the store must not take it for a sealed value.
    m = msg(unique("ib-"), title="enc1:k:not sealed", data='"enc1:neither"')
    await store.put_inbox_message(m, TTL_S)
    assert await store.get_inbox_message(m.caller, m.recipient, m.message_id) == m


async def test_recipients_are_scoped_by_caller(store: Store) -> None:
    m = msg(unique("ib-"))
    other = unique("ib-")
    await store.put_inbox_message(m, TTL_S)
    assert await store.get_inbox_message(other, m.recipient, m.message_id) is None
    page = await store.list_inbox(other, m.recipient, before=None, limit=10, unread_only=False)
    assert page.items == [] and page.next_before is None
    assert await store.inbox_after(other, m.recipient, "msg_0", 10) == []
    assert await store.mark_inbox_read(other, m.recipient, m.message_id, T0) is None
    await store.delete_inbox_message(other, m.recipient, m.message_id, T0)
    assert await store.get_inbox_message(m.caller, m.recipient, m.message_id) == m


async def test_listing_is_newest_first_with_exact_paging(store: Store) -> None:
    caller = unique("ib-")
    messages = [msg(caller, k=k) for k in range(5)]
    await put_all(store, messages)
    await store.put_inbox_message(msg(caller, "bob", k=9), TTL_S)  # another recipient
    seen: list[InboxMessage] = []
    before = None
    for expected_more in (True, True, False):
        page = await store.list_inbox(caller, "ada", before=before, limit=2, unread_only=False)
        seen += page.items
        before = page.next_before
        assert (before is not None) is expected_more
    assert seen == messages[::-1]


async def test_read_time_is_set_once_and_survives_a_redelivery(store: Store) -> None:
    m = msg(unique("ib-"))
    await store.put_inbox_message(m, TTL_S)
    read = await store.mark_inbox_read(m.caller, m.recipient, m.message_id, T0 + 1_000)
    assert read == replace(m, read_at_ms=T0 + 1_000)
    assert await store.mark_inbox_read(m.caller, m.recipient, m.message_id, T0 + 2_000) == read
    assert await store.put_inbox_message(m, TTL_S) == read
    assert await store.get_inbox_message(m.caller, m.recipient, m.message_id) == read
    assert await store.mark_inbox_read(m.caller, m.recipient, "msg_nope", T0) is None


async def test_unread_filter_pages_past_many_read_messages(store: Store) -> None:
    caller = unique("ib-")
    messages = [msg(caller, k=k) for k in range(230)]
    await put_all(store, messages)
    unread = {0, 1, 2}  # the oldest: below every read one
    await asyncio.gather(*(store.mark_inbox_read(caller, "ada", m.message_id, T0)
                           for k, m in enumerate(messages) if k not in unread))
    seen: list[InboxMessage] = []
    before = None
    for _ in range(10):
        page = await store.list_inbox(caller, "ada", before=before, limit=2, unread_only=True)
        seen += page.items
        before = page.next_before
        if before is None:
            break
    assert seen == [messages[2], messages[1], messages[0]]
    everything = await store.list_inbox(caller, "ada", before=None, limit=200,
                                        unread_only=False)
    assert len(everything.items) == 200 and everything.next_before is not None


async def test_delete_hides_for_good_and_is_idempotent(store: Store) -> None:
    caller = unique("ib-")
    keep, gone = msg(caller, k=0), msg(caller, k=1)
    await put_all(store, [keep, gone])
    for _ in range(2):
        await store.delete_inbox_message(caller, "ada", gone.message_id, T0 + 5)
    await store.delete_inbox_message(caller, "ada", "msg_unknown", T0)
    assert await store.get_inbox_message(caller, "ada", gone.message_id) is None
    assert await store.mark_inbox_read(caller, "ada", gone.message_id, T0) is None
    assert await store.put_inbox_message(gone, TTL_S) is None  # a redelivery: still gone
    page = await store.list_inbox(caller, "ada", before=None, limit=10, unread_only=False)
    assert page.items == [keep]
    assert await store.inbox_after(caller, "ada", "msg_0", 10) == [keep]


async def test_after_an_id_oldest_first_up_to_the_limit(store: Store) -> None:
    caller = unique("ib-")
    messages = [msg(caller, k=k) for k in range(6)]
    await put_all(store, messages)
    assert await store.inbox_after(caller, "ada", messages[1].message_id, 3) == messages[2:5]
    assert await store.inbox_after(caller, "ada", messages[5].message_id, 3) == []


# --- the bus -----------------------------------------------------------------------------
async def next_payload(feed: object, timeout_s: float = 5) -> str:
    return await asyncio.wait_for(anext(feed), timeout_s)  # type: ignore[call-overload]


async def test_bus_delivers_to_the_subscribers_of_that_pair_only(inbox_bus: InboxBus) -> None:
    caller, other = unique("ib-"), unique("ib-")
    async with inbox_bus.subscribe(caller, "ada") as mine, \
            inbox_bus.subscribe(other, "ada") as theirs:
        await inbox_bus.publish(other, "ada", '{"n":0}')
        await inbox_bus.publish(caller, "bob", '{"n":1}')
        await inbox_bus.publish(caller, "ada", '{"n":2,"t":"\u2713"}')
        assert await next_payload(mine) == '{"n":2,"t":"\u2713"}'
        assert await next_payload(theirs) == '{"n":0}'
        await inbox_bus.publish(caller, "ada", '{"n":3}')
        assert await next_payload(mine) == '{"n":3}'
    await inbox_bus.publish(caller, "ada", '{"n":4}')  # nobody listens: dropped, no error


async def test_bus_fans_one_publish_out_to_every_subscriber_of_the_pair(
        inbox_bus: InboxBus) -> None:
    caller = unique("ib-")
    async with AsyncExitStack() as stack:
        feeds = [await stack.enter_async_context(inbox_bus.subscribe(caller, r))
                 for r in ("ada", "ada", "ada", "bob")]
        await inbox_bus.publish(caller, "ada", "msg_01KQ8Z5C6G7N2M3P4R5S6T7V8W")
        await inbox_bus.publish(caller, "bob", "msg_01KQ8Z5C6G7N2M3P4R5S6T7V8X")
        assert [await next_payload(f) for f in feeds] == [
            "msg_01KQ8Z5C6G7N2M3P4R5S6T7V8W"] * 3 + ["msg_01KQ8Z5C6G7N2M3P4R5S6T7V8X"]
