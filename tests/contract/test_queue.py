"""``Enqueuer`` and ``DeliveryQueue``: ``MemoryQueue`` (on the system clock) and ``SqsQueue``
on LocalStack against one contract. LocalStack's delays and visibility timeouts are whole
seconds and a message may show up to ~1 s late, so timings are bounded loosely."""

from __future__ import annotations

import asyncio

import pytest

from tests.contract.support import QueueUnderTest, receive_now, receive_within, unique
from trigger_service.core.errors import MessageNotInFlight, QueueError
from trigger_service.core.lanes import lane_of
from trigger_service.core.model import Priority
from trigger_service.core.ports.values import OutgoingMessage, VisibilityChange

FIRE_AT_MS = 1_924_992_000_000


def _message(delay_s: int = 0) -> OutgoingMessage:
    return OutgoingMessage(unique("trg_"), FIRE_AT_MS, delay_s)


async def test_send_then_receive_gets_trigger_fire_time_and_first_receive(
    queue: QueueUnderTest,
) -> None:
    q, m = queue.queue, _message()
    await q.send(m)
    got = await receive_within(q, 3)
    assert [(r.trigger_id, r.fire_at_ms, r.receive_count) for r in got] == [
        (m.trigger_id, FIRE_AT_MS, 1)]
    assert got[0].message_id and got[0].receipt_handle
    batch = [_message() for _ in range(13)]  # more than one SQS batch
    single = [_message() for _ in range(4)]  # concurrent sends share batches
    await q.send_many(batch)
    await asyncio.gather(*(q.send(m) for m in single))
    got = await receive_within(q, 5, want=len(batch) + len(single))
    assert sorted(r.trigger_id for r in got) == sorted(m.trigger_id for m in batch + single)
    assert {r.receive_count for r in got} == {1}


async def test_received_message_stays_hidden_for_visibility_then_returns(
    queue: QueueUnderTest,
) -> None:
    q, m = queue.queue, _message()
    await q.send(m)
    first = await receive_within(q, 3, visibility_s=1)
    assert [r.trigger_id for r in first] == [m.trigger_id]
    assert await receive_now(q) == []
    again = await receive_within(q, 1 + 2)
    assert [(r.trigger_id, r.receive_count) for r in again] == [(m.trigger_id, 2)]
    assert again[0].receipt_handle != first[0].receipt_handle


async def test_change_visibility_extends_the_hiding_and_zero_shows_it_again(
    queue: QueueUnderTest,
) -> None:
    q, m = queue.queue, _message()
    await q.send(m)
    first = await receive_within(q, 3, visibility_s=1)
    await q.change_visibility(first[0].receipt_handle, 30)
    await asyncio.sleep(2.5)  # the 1 s it was received with is long over
    assert await receive_now(q) == []
    await q.change_visibility(first[0].receipt_handle, 0)
    again = await receive_within(q, 2)
    assert [(r.trigger_id, r.fire_at_ms, r.receive_count) for r in again] == [
        (m.trigger_id, FIRE_AT_MS, 2)]


async def test_a_visibility_change_for_a_deleted_message_says_it_is_not_in_flight(
    queue: QueueUnderTest,
) -> None:
    """What ``Visibility.keep_hidden`` tells apart from an SQS failure: the receipt no
    longer hides anything (the message was deleted, or received again elsewhere), so there
    is nothing to extend and the delivery goes on under its claim."""
    q, m = queue.queue, _message()
    await q.send(m)
    [got] = await receive_within(q, 3, visibility_s=30)
    await q.delete(got.receipt_handle)
    with pytest.raises(MessageNotInFlight):
        await q.change_visibility(got.receipt_handle, 30)


async def test_change_visibility_many_applies_each_and_a_stale_receipt_fails_alone(
    queue: QueueUnderTest,
) -> None:
    q, ms = queue.queue, [_message() for _ in range(3)]
    await q.send_many(ms)
    got = await receive_within(q, 3, visibility_s=1, want=3)
    await q.change_visibility_many([VisibilityChange(r.receipt_handle, 30) for r in got])
    await asyncio.sleep(2.5)  # the 1 s they were received with is long over
    assert await receive_now(q) == []
    gone, *kept = got
    await q.delete(gone.receipt_handle)
    with pytest.raises(QueueError):
        await q.change_visibility_many([VisibilityChange(r.receipt_handle, 0) for r in got])
    again = await receive_within(q, 2, want=2)  # the two valid ones applied anyway
    assert sorted(r.trigger_id for r in again) == sorted(r.trigger_id for r in kept)


async def test_delete_removes_it_and_repeats_or_old_receipts_are_no_error(
    queue: QueueUnderTest,
) -> None:
    q, kept, gone = queue.queue, _message(), _message()
    await q.send_many([kept, gone])
    got = {r.trigger_id: r for r in await receive_within(q, 3, visibility_s=1, want=2)}
    await q.delete(got[gone.trigger_id].receipt_handle)
    await q.delete(got[gone.trigger_id].receipt_handle)
    old = got[kept.trigger_id].receipt_handle
    await q.change_visibility(old, 0)
    again = await receive_within(q, 2, visibility_s=1)
    assert [(r.trigger_id, r.receive_count) for r in again] == [(kept.trigger_id, 2)]
    await q.delete(old)  # stale: may or may not delete, but never raises
    await q.delete(again[0].receipt_handle)
    assert await receive_within(q, 1 + 2) == [], "both would be visible again by now"


async def test_send_with_delay_hides_it_until_the_delay_is_over(queue: QueueUnderTest) -> None:
    q, late, now = queue.queue, _message(delay_s=2), _message()
    await q.send_many([late, now])
    assert [r.trigger_id for r in await receive_within(q, 1)] == [now.trigger_id]
    got = await receive_within(q, 2 + 2)
    assert [(r.trigger_id, r.receive_count) for r in got] == [(late.trigger_id, 1)]


async def test_send_dead_letter_records_trigger_fire_time_and_reason(
    queue: QueueUnderTest,
) -> None:
    q = queue.queue
    await q.send_dead_letter("trg_dead", FIRE_AT_MS, "HTTP 500 after 6 attempts")
    await q.send_dead_letter("", 0, "malformed message body")
    assert sorted(await queue.dead_letters()) == [
        ("", 0, "malformed message body"), ("trg_dead", FIRE_AT_MS, "HTTP 500 after 6 attempts")]
    assert await receive_now(q) == [], "dead letters never reach the delivery queue"


async def test_replace_sends_a_fresh_copy_and_deletes_the_received_one(
    queue: QueueUnderTest,
) -> None:
    q, m = queue.queue, _message()
    await q.send(m)
    first = await receive_within(q, 3, visibility_s=1)
    await q.change_visibility(first[0].receipt_handle, 0)
    second = await receive_within(q, 2, visibility_s=30)
    assert [r.receive_count for r in second] == [2]
    await q.replace(second[0].receipt_handle, OutgoingMessage(m.trigger_id, FIRE_AT_MS, 0))
    fresh = await receive_within(q, 3)
    assert [(r.trigger_id, r.fire_at_ms, r.receive_count) for r in fresh] == [
        (m.trigger_id, FIRE_AT_MS, 1)]
    assert fresh[0].message_id != second[0].message_id
    await q.delete(fresh[0].receipt_handle)
    await asyncio.sleep(1.5)
    assert await receive_now(q) == []  # the old copy is gone too


async def test_a_messages_caller_comes_back_with_it_and_is_none_when_not_sent(
    queue: QueueUnderTest,
) -> None:
    q = queue.queue
    named = OutgoingMessage(unique("trg_"), FIRE_AT_MS, 0, caller="orders")
    await q.send_many([named, _message()])
    got = await receive_within(q, 5, want=2)
    callers = {r.trigger_id: r.caller for r in got}
    assert callers.pop(named.trigger_id) == "orders" and list(callers.values()) == [None]
    # A replacement (a refreshed copy) keeps it.
    [r] = [r for r in got if r.trigger_id == named.trigger_id]
    await q.replace(r.receipt_handle, named)
    again = await receive_within(q, 3)
    assert [(m.trigger_id, m.caller) for m in again] == [(named.trigger_id, "orders")]


async def test_each_callers_messages_are_received_from_its_lane_only(
    queue: QueueUnderTest,
) -> None:
    """Lanes (``core.lanes``): a caller's messages go to its lane, one without a caller to
    lane 0, and a receive of one lane gets nothing of another's."""
    q = queue.queue
    assert q.lanes == 4 and q.high_lanes == 1  # three callers' lanes, then one high lane
    callers = ["dev", "chaos", "bench-b", None]  # lanes 0, 1, 2 and 0
    assert [lane_of(c, 3) for c in callers] == [0, 1, 2, 0]
    sent = {OutgoingMessage(unique("trg_"), FIRE_AT_MS, 0, caller=c).trigger_id: c
            for c in callers}
    await q.send_many([OutgoingMessage(t, FIRE_AT_MS, 0, caller=c) for t, c in sent.items()])
    by_lane: dict[int, set[str]] = {0: set(), 1: set(), 2: set()}
    for _ in range(30):
        for lane in range(3):
            got = await q.receive(max_messages=10, wait_s=0, visibility_s=30, lane=lane)
            by_lane[lane] |= {m.trigger_id for m in got}
        if sum(map(len, by_lane.values())) >= len(sent):
            break
        await asyncio.sleep(0.1)
    assert by_lane == {lane: {t for t, c in sent.items() if lane_of(c, 3) == lane}
                       for lane in range(3)}
    with pytest.raises(QueueError):
        await q.receive(max_messages=10, wait_s=0, visibility_s=30, lane=4)


@pytest.mark.parametrize("pack", [False, True])
async def test_a_high_message_is_received_from_the_high_lane_with_its_priority(
    queue: QueueUnderTest, pack: bool,
) -> None:
    """Priority (``core.lanes``): a high message goes to the high lane (3 here), and is
    received with its priority, alone or in a pack; low and normal ones stay in their
    caller's lane and keep theirs."""
    q = queue.queue
    sent = [OutgoingMessage(unique("trg_"), FIRE_AT_MS, 0, caller="chaos", priority=p)
            for p in (Priority.HIGH, Priority.HIGH, Priority.LOW, Priority.NORMAL)]
    if pack:
        await q.send_many(sent)
    else:
        for m in sent:
            await q.send(m)
    got: dict[int, dict[str, Priority]] = {1: {}, 3: {}}
    for _ in range(30):
        for lane in got:
            for r in await q.receive(max_messages=10, wait_s=0, visibility_s=30, lane=lane):
                got[lane][r.trigger_id] = r.priority
        if sum(map(len, got.values())) >= len(sent):
            break
        await asyncio.sleep(0.1)
    assert got == {3: {m.trigger_id: Priority.HIGH for m in sent[:2]},
                   1: {sent[2].trigger_id: Priority.LOW, sent[3].trigger_id: Priority.NORMAL}}


async def test_receipts_of_every_lane_hide_show_and_delete_their_own_message(
    queue: QueueUnderTest,
) -> None:
    """A receipt names its lane: a visibility change (one at a time, or many of several
    lanes in one call) and a delete reach the queue the message came from."""
    q = queue.queue
    messages = [OutgoingMessage(unique("trg_"), FIRE_AT_MS, 0, caller=c)
                for c in ("dev", "chaos", "bench-b")]
    await q.send_many(messages)
    got = await receive_within(q, 5, want=3, visibility_s=1)
    assert len(got) == 3
    await q.change_visibility_many([VisibilityChange(r.receipt_handle, 30) for r in got])
    await asyncio.sleep(2.5)  # past the 1 s they were received with
    assert await receive_now(q) == []
    first = got[0]
    await q.change_visibility(first.receipt_handle, 0)
    [again] = await receive_within(q, 3, visibility_s=1)
    assert again.trigger_id == first.trigger_id
    await q.change_visibility_many([VisibilityChange(r.receipt_handle, 0) for r in got[1:]])
    rest = await receive_within(q, 3, want=2, visibility_s=1)
    assert sorted(r.trigger_id for r in rest) == sorted(r.trigger_id for r in got[1:])
    for r in [again, *rest]:
        await q.delete(r.receipt_handle)
    await asyncio.sleep(2.5)  # past the 1 s they were received with: deleted, not hidden
    assert await receive_now(q) == []


async def test_many_sent_together_come_back_each_until_each_is_deleted(
    queue: QueueUnderTest,
) -> None:
    """Messages sent with one delay may travel as one SQS message (``adapters.sqs_packs``):
    each still comes back alone, and each is gone when it is deleted, whatever the others
    do."""
    q, ms = queue.queue, [_message() for _ in range(25)]
    await q.send_many(ms)
    got = await receive_within(q, 5, visibility_s=1, want=len(ms))
    assert sorted(r.trigger_id for r in got) == sorted(m.trigger_id for m in ms)
    assert len({r.message_id for r in got}) == len({r.receipt_handle for r in got}) == len(ms)
    deleted, kept = got[:20], got[20:]
    for r in deleted:
        await q.delete(r.receipt_handle)
    again = await receive_within(q, 1 + 3, visibility_s=1, want=len(kept))
    assert sorted((r.trigger_id, r.receive_count) for r in again) == sorted(
        (r.trigger_id, 2) for r in kept)
    for r in again:
        await q.delete(r.receipt_handle)
    assert await receive_within(q, 1 + 2) == [], "all would be visible again by now"


async def test_one_of_many_deferred_comes_back_alone_at_its_time(
    queue: QueueUnderTest,
) -> None:
    q, ms = queue.queue, [_message() for _ in range(5)]
    await q.send_many(ms)
    got = await receive_within(q, 5, visibility_s=30, want=len(ms))
    deferred, *rest = got
    await q.change_visibility_many([VisibilityChange(deferred.receipt_handle, 2)])
    assert await receive_now(q) == []
    back = await receive_within(q, 2 + 2, visibility_s=30)
    assert [r.trigger_id for r in back] == [deferred.trigger_id]
    for r in [*back, *rest]:
        await q.delete(r.receipt_handle)
    with pytest.raises(QueueError):  # it left: its first receipt is no longer valid
        await q.change_visibility_many([VisibilityChange(rest[0].receipt_handle, 0)])


async def test_all_deferred_together_come_back_together(queue: QueueUnderTest) -> None:
    q, ms = queue.queue, [_message() for _ in range(5)]
    await q.send_many(ms)
    got = await receive_within(q, 5, visibility_s=30, want=len(ms))
    await q.change_visibility_many([VisibilityChange(r.receipt_handle, 2) for r in got])
    assert await receive_now(q) == []
    back = await receive_within(q, 2 + 3, visibility_s=30, want=len(ms))
    assert sorted((r.trigger_id, r.receive_count) for r in back) == sorted(
        (m.trigger_id, 2) for m in ms)


async def test_the_visible_backlog_counts_triggers_not_messages(queue: QueueUnderTest) -> None:
    """What the due-scan compares with the rows it would read (``sweeper.heal``): a queue
    that packs many triggers in a message still says about how many triggers wait."""
    q = queue.queue
    before = await q.visible_backlog()
    await q.send_many([_message() for _ in range(20)])
    deadline = asyncio.get_running_loop().time() + 5
    while await q.visible_backlog() < before + 20:
        assert asyncio.get_running_loop().time() < deadline, await q.visible_backlog()
        await asyncio.sleep(0.2)
    assert await q.visible_backlog() == before + 20
