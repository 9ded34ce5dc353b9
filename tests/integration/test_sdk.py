"""The Python SDK (clients/python, ``trigger_client``) against the real stack: a real API on
a TestServer port over the real Cassandra, SQS and Redis, called through httpx as any user
would. The sync client runs in a worker thread (the API shares this test's event loop).
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime

import pytest
import redis

from dispatcher.channels.inbox import InboxNotifier
from tests.integration.conftest import SIGNING_SECRETS, Stack, api_url
from tests.integration.helpers import until
from trigger_client import (
    AsyncTriggerClient,
    Conflict,
    InboxMessage,
    InvalidRequest,
    NotFound,
    Status,
    TriggerClient,
)
from trigger_client.receiver import Deduplicator, verify
from trigger_service.adapters.redis.client import open_from_settings
from trigger_service.adapters.redis.inbox_bus import RedisInboxBus, open_listener
from trigger_service.core.model import new_trigger_id
from trigger_service.core.notify.channels import InboxSpec, OccurrenceNotice
from trigger_service.core.time.clock import SystemClock
from trigger_service.platform.metrics import InMemoryMetrics

pytestmark = pytest.mark.integration


base_url = api_url


async def test_create_sync_and_async_get_cancel_and_a_replayed_key(
        stack: Stack, sdk: AsyncTriggerClient, sync_sdk: TriggerClient) -> None:
    url = stack.receiver.base_url + "cb"
    a = await sdk.triggers.create(callback_url=url, payload={"k": "async"}, delay_s=3600)
    key = f"order-{uuid.uuid4()}"
    b = await asyncio.to_thread(sync_sdk.triggers.create, callback_url=url,
                                payload={"k": "sync"}, delay_s=3600, idempotency_key=key)
    again = await asyncio.to_thread(sync_sdk.triggers.create, callback_url=url,
                                    payload={"k": "sync"}, delay_s=3600, idempotency_key=key)
    assert again.trigger_id == b.trigger_id and again.replayed and not b.replayed
    got = await sdk.triggers.get(a.trigger_id)
    assert (got.status, got.payload, got.callback_url) == (Status.PENDING, {"k": "async"}, url)
    assert got.fire_at == a.fire_at and got.fire_at.tzinfo is UTC
    assert (await asyncio.to_thread(sync_sdk.triggers.get, b.trigger_id)).payload == {
        "k": "sync"}
    cancelled = await sdk.triggers.cancel(a.trigger_id)
    assert cancelled.status is Status.CANCELLED
    assert (await sdk.triggers.cancel(a.trigger_id)).status is Status.CANCELLED  # idempotent
    with pytest.raises(NotFound) as e:
        await sdk.triggers.get("trg_00000000000000000000000000")
    assert e.value.status == 404 and e.value.error == "not_found"
    with pytest.raises(InvalidRequest) as bad:
        await sdk.triggers.create(callback_url=url, delay_s=-1)
    assert bad.value.field == "delaySeconds" and bad.value.status == 400


async def test_list_iterates_over_several_pages(stack: Stack, sdk: AsyncTriggerClient,
                                                sync_sdk: TriggerClient) -> None:
    made = [(await sdk.triggers.create(callback_url=stack.receiver.base_url + "cb",
                                       delay_s=3600 + n, payload={"n": n})).trigger_id
            for n in range(7)]
    listed = [t.trigger_id async for t in sdk.triggers.list(Status.PENDING, page_size=3)]
    assert listed == made  # by fire time, across 3 pages
    synced = await asyncio.to_thread(lambda: [t.trigger_id for t in sync_sdk.triggers.list(
        "pending", page_size=2)])
    assert synced == made
    page = await sdk.triggers.list_page(limit=3)
    assert len(page.items) == 3 and page.next_cursor


async def test_patch_snooze_preview_ack_and_rotation(stack: Stack,
                                                     sdk: AsyncTriggerClient) -> None:
    created = await sdk.triggers.create(callback_url=stack.receiver.base_url + "cb",
                                        delay_s=3600, payload={"v": 1})
    patched = await sdk.triggers.patch(created.trigger_id, payload={"v": 2},
                                       fire_at=datetime(2027, 1, 5, 9, tzinfo=UTC))
    assert patched.payload == {"v": 2} and patched.fire_at == datetime(2027, 1, 5, 9,
                                                                       tzinfo=UTC)
    snoozed = await sdk.triggers.snooze(created.trigger_id, delay_s=600)
    assert snoozed.snoozed_from == created.trigger_id and snoozed.status is Status.PENDING
    assert (await sdk.triggers.get(snoozed.trigger_id)).payload == {"v": 2}
    preview = await sdk.triggers.preview(local_time="2027-03-13T02:30:00",
                                         time_zone="America/New_York", rrule="FREQ=DAILY",
                                         count=3)
    assert [f"{o:%m-%dT%H:%M}" for o in preview.occurrences] == [
        "03-13T07:30", "03-14T07:30", "03-15T06:30"]  # the gap shifted to 03:30 EDT
    with pytest.raises(Conflict) as e:  # no channels: nothing to acknowledge
        await sdk.triggers.ack(created.trigger_id)
    assert e.value.error == "not_editable"
    secret = await sdk.signing.rotate()
    assert secret.secret.startswith("whsec_") and secret.previous_valid_until > secret.created_at
    assert (await sdk.ops.readyz()).ok


async def test_a_verified_deduplicated_callback_and_a_dead_letter_replayed_via_the_sdk(
        stack: Stack, sdk: AsyncTriggerClient) -> None:
    await stack.start_dispatcher(max_attempts=2)
    rec = stack.receiver
    created = await sdk.triggers.create(callback_url=rec.base_url + "cb", delay_s=1,
                                        payload={"order": 7})
    tid = created.trigger_id
    rec.script[tid] = [500, 503]  # both attempts fail: dead-lettered (max_attempts)

    async def dead() -> bool:
        return [d.id async for d in sdk.dead_letters.list(reason="max_attempts")] == [
            f"{tid}.1"]
    assert await until(dead, 60)
    letter = await sdk.dead_letters.get(f"{tid}.1")
    assert [a.status_code for a in letter.attempts] == [500, 503] and letter.state == "open"
    replayed = await sdk.dead_letters.replay(letter.id)
    assert replayed.trigger_id == tid and replayed.status is Status.PENDING
    with pytest.raises(Conflict) as again:
        await sdk.dead_letters.replay(letter.id)
    assert again.value.error == "already_replayed"

    async def fired() -> bool:
        return (await sdk.triggers.get(tid)).status is Status.FIRED
    assert await until(fired, 30)
    arrivals = rec.for_trigger(tid)
    assert [a.attempt for a in arrivals] == [1, 2, 1]
    # Every arrival verifies with the caller's secrets; the Redis deduplicator (the real
    # Redis, shared by a receiver's processes) lets the occurrence through once.
    client = redis.Redis.from_url(stack.settings.redis.url)
    try:
        dedup = Deduplicator.redis(client, ttl_s=60, prefix=f"test-dedup-{stack.caller}:")
        callbacks = [verify(list(SIGNING_SECRETS), a.headers, a.raw.encode())
                     for a in arrivals]
        assert {c.occurrence_id for c in callbacks} == {f"{tid}.1"}
        assert [c.payload for c in callbacks] == [{"order": 7}] * 3
        assert [dedup.claim(c.occurrence_id) for c in callbacks] == [True, False, False]
    finally:
        client.close()
    assert (await sdk.dead_letters.get(letter.id)).state == "replayed"


async def test_the_inbox_stream_iterator_gets_a_message(stack: Stack,
                                                        sdk: AsyncTriggerClient) -> None:
    api_bus = RedisInboxBus(stack.redis, open_listener(stack.settings.redis.url))
    stack.runtime.inbox_bus = api_bus
    notifier_redis = open_from_settings(stack.settings.redis)
    notifier = InboxNotifier(stack.runtime.store, RedisInboxBus(notifier_redis), SystemClock(),
                             InMemoryMetrics(), 86_400)
    stream = sdk.inbox.stream("ada")

    async def next_message() -> InboxMessage:
        return await anext(stream)
    first = asyncio.create_task(next_message())

    async def subscribed() -> bool:
        return api_bus.local_subscribers() > 0
    try:
        assert await until(subscribed, 10)
        tid = new_trigger_id(SystemClock().now_ms())
        occ = OccurrenceNotice(tid, f"{tid}.1", stack.caller, 0, SystemClock().now_ms(),
                         ack_url="http://127.0.0.1:8080/ack/x")
        sent = await notifier.send(InboxSpec("ada", "Standup", "in 5 minutes", None), occ)
        message = await asyncio.wait_for(first, 10)
        assert (message.message_id, message.trigger_id, message.title) == (
            sent.provider_message_id, tid, "Standup")
        listed = [m.message_id async for m in sdk.inbox.list("ada")]
        assert listed == [message.message_id]
        await sdk.inbox.mark_read("ada", message.message_id)
        assert (await sdk.inbox.list_page("ada")).items[0].read_at is not None
        await sdk.inbox.delete("ada", message.message_id)
        assert [m async for m in sdk.inbox.list("ada")] == []
    finally:
        first.cancel()
        await stream.aclose()
        await notifier_redis.aclose()
        await api_bus.close()


async def test_when_through_the_sdk_resolves_and_an_ambiguous_phrase_lists_candidates(
        stack: Stack, sdk: AsyncTriggerClient) -> None:
    url = stack.receiver.base_url + "cb"
    created = await sdk.triggers.create(callback_url=url, when="in 2 hours")
    assert created.resolved is not None and created.resolved.when == "in 2 hours"
    assert created.resolved.fire_at == created.fire_at
    ahead_s = (created.fire_at - datetime.now(UTC)).total_seconds()
    assert 7_190 < ahead_s <= 7_200
    weekly = await sdk.triggers.preview(when="every weekday at 9am",
                                        time_zone="America/New_York", count=5)
    assert weekly.resolved is not None and weekly.resolved.rrule is not None
    assert "BYDAY=MO,TU,WE,TH,FR" in weekly.resolved.rrule
    assert all(o.weekday() < 5 for o in weekly.occurrences)
    with pytest.raises(InvalidRequest) as e:  # a date read either day- or month-first
        await sdk.triggers.preview(when="03/04 9am", time_zone="Europe/Berlin")
    assert e.value.field == "when" and len(e.value.candidates) == 2
