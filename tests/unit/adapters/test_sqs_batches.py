"""``SqsQueue`` on a fake SQS client and a ManualClock: concurrent calls share batch requests,
an entry SQS refuses fails only its own caller, and every request is counted by operation
with the messages it carried (``sqs_calls_total``, ``sqs_batch_messages``); and packs
(``adapters.sqs_packs``): sends of one delay travel together, a pack comes back as its
members, and what each member asks for reaches SQS once for the pack."""

from __future__ import annotations

import asyncio
import json
from contextlib import AsyncExitStack
from typing import Any

import pytest

from trigger_service.adapters.sqs import QueueUrls, SqsQueue
from trigger_service.adapters.sqs_wire import entry_errors
from trigger_service.config.sqs import SqsSettings
from trigger_service.core.errors import MessageNotInFlight, QueueError
from trigger_service.core.ports.values import OutgoingMessage, VisibilityChange
from trigger_service.core.time.clock import ManualClock
from trigger_service.platform.metrics import InMemoryMetrics

pytestmark = pytest.mark.timeout(10)

# One message per trigger: the batching alone (the packs' tests ask for packs).
SETTINGS = SqsSettings(pack_max=1)


class FakeSqs:
    """The client calls the adapter makes; ``refuse`` names the trigger ids (sends) or
    receipts (deletes, re-hides) whose entries SQS answers as failed, with their code."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, list[dict[str, Any]]]] = []
        self.refuse: dict[str, str] = {}
        self.inbox: list[dict[str, Any]] = []

    def _batch(self, op: str, entries: list[dict[str, Any]], key: str) -> dict[str, Any]:
        self.requests.append((op, entries))
        failed = [{"Id": e["Id"], "Code": self.refuse[e[key]], "SenderFault": True}
                  for e in entries if e[key] in self.refuse]
        return {"Failed": failed}

    async def send_message_batch(self, QueueUrl: str, Entries: list[dict[str, Any]]) -> Any:
        for e in Entries:
            body = json.loads(e["MessageBody"])
            e["trigger"] = body["pack"][0][0] if "pack" in body else body["triggerId"]
        return self._batch("send", Entries, "trigger")

    async def delete_message_batch(self, QueueUrl: str, Entries: list[dict[str, Any]]) -> Any:
        return self._batch("delete", Entries, "ReceiptHandle")

    async def change_message_visibility_batch(self, QueueUrl: str,
                                              Entries: list[dict[str, Any]]) -> Any:
        return self._batch("change_visibility", Entries, "ReceiptHandle")

    async def change_message_visibility(self, **kwargs: Any) -> Any:
        self.requests.append(("change_visibility_one", [kwargs]))
        return {}

    async def receive_message(self, **kwargs: Any) -> Any:
        got, self.inbox = self.inbox[:10], self.inbox[10:]
        return {"Messages": got}

    def sizes(self, op: str) -> list[int]:
        return [len(entries) for o, entries in self.requests if o == op]


def make(pack_max: int = 1) -> tuple[ManualClock, FakeSqs, InMemoryMetrics, SqsQueue]:
    clock, client, metrics = ManualClock(1_000), FakeSqs(), InMemoryMetrics()
    settings = SqsSettings(pack_max=pack_max)
    queue = SqsQueue(client, AsyncExitStack(), settings, 30, QueueUrls("main", "dlq", "re"),
                     metrics=metrics, clock=clock)
    return clock, client, metrics, queue


def message(i: int) -> OutgoingMessage:
    return OutgoingMessage(f"trg_{i}", 1_700_000_000_000, 0)


async def settle(rounds: int = 10) -> None:
    for _ in range(rounds):
        await asyncio.sleep(0)


def observed(metrics: InMemoryMetrics, operation: str) -> list[float]:
    return metrics.observations[f'sqs_batch_messages{{operation="{operation}"}}']


async def test_concurrent_sends_share_batches_and_each_request_is_counted() -> None:
    clock, client, metrics, q = make()
    burst = asyncio.gather(*(q.send(message(i)) for i in range(25)))
    await settle()
    clock.advance_ms(SETTINGS.send_linger_ms)  # the last four wait at most this long
    await burst
    assert client.sizes("send") == [1, 10, 10, 4]
    assert metrics.snapshot()['sqs_calls_total{operation="send"}'] == 4
    assert observed(metrics, "send") == [1, 10, 10, 4]
    page = metrics.exposition().decode()
    assert 'trigger_sqs_calls_total{operation="send"} 4.0' in page
    assert 'trigger_sqs_batch_messages_bucket{le="9.0",operation="send"} 2.0' in page
    assert 'trigger_sqs_batch_messages_sum{operation="send"} 25.0' in page
    assert 'trigger_sqs_batch_messages_count{operation="send"} 4.0' in page


async def test_an_entry_sqs_refuses_fails_only_its_own_sender() -> None:
    _clock, client, _metrics, q = make()
    client.refuse["trg_3"] = "InternalError"
    results = await asyncio.gather(*(q.send(message(i)) for i in range(11)),
                                   return_exceptions=True)
    assert client.sizes("send") == [1, 10]
    assert isinstance(results[3], QueueError) and "InternalError" in str(results[3])
    assert [r for i, r in enumerate(results) if i != 3] == [None] * 10


async def test_send_many_goes_in_requests_of_ten_and_names_what_failed() -> None:
    _clock, client, _metrics, q = make()
    await q.send_many([message(i) for i in range(25)])
    assert client.sizes("send") == [10, 10, 5]
    client.refuse["trg_12"] = "InternalError"
    with pytest.raises(QueueError, match="1 of 25 failed"):
        await q.send_many([message(i) for i in range(25)])


async def test_deletes_share_batches_and_a_receipt_already_gone_is_fine() -> None:
    clock, client, metrics, q = make()
    client.refuse = {"r2": "ReceiptHandleIsInvalid", "r5": "InternalError"}
    deletes = asyncio.gather(*(q.delete(f"r{i}") for i in range(12)), return_exceptions=True)
    await settle()
    # Not eager: nobody waits for a delete, so even the first waits for company; ten make
    # a batch at once, the rest go when the oldest has waited the linger.
    assert client.sizes("delete") == [10]
    clock.advance_ms(SETTINGS.delete_linger_ms - 1)
    await settle()
    assert client.sizes("delete") == [10]
    clock.advance_ms(1)
    results = await deletes
    assert client.sizes("delete") == [10, 2]
    assert isinstance(results[5], QueueError)
    assert [r for i, r in enumerate(results) if i != 5] == [None] * 11
    assert observed(metrics, "delete") == [10, 2]


async def test_a_lone_delete_goes_after_the_linger_and_close_sends_what_waits() -> None:
    clock, client, _metrics, q = make()
    one = asyncio.ensure_future(q.delete("r0"))
    await settle()
    assert client.sizes("delete") == []
    clock.advance_ms(SETTINGS.delete_linger_ms)
    await one
    assert client.sizes("delete") == [1]
    two = asyncio.ensure_future(q.delete("r1"))
    await settle()
    await q.close()  # what waits for company goes now
    await two
    assert client.sizes("delete") == [1, 1]


async def test_change_visibility_many_batches_and_names_a_receipt_no_longer_valid() -> None:
    _clock, client, metrics, q = make()
    changes = [VisibilityChange(f"r{i}", 60 if i else 99_999) for i in range(12)]
    await q.change_visibility_many(changes)  # idle: everything at once, no linger
    assert client.sizes("change_visibility") == [10, 2]
    first = client.requests[0][1][0]
    assert (first["ReceiptHandle"], first["VisibilityTimeout"]) == ("r0", 43_200)  # SQS's cap
    client.refuse["r7"] = "ReceiptHandleIsInvalid"
    with pytest.raises(QueueError, match="1 of 12 failed"):
        await q.change_visibility_many(changes)
    assert metrics.snapshot()['sqs_calls_total{operation="change_visibility"}'] == 4


async def test_single_calls_and_receives_are_counted_too() -> None:
    _clock, client, metrics, q = make()
    await q.change_visibility("r1", 5)
    client.inbox = [{"MessageId": f"m{i}", "ReceiptHandle": f"r{i}",
                     "Body": json.dumps({"triggerId": f"trg_{i}", "fireAtMs": 1})}
                    for i in range(3)]
    assert len(await q.receive(max_messages=10, wait_s=0, visibility_s=30)) == 3
    assert await q.receive(max_messages=10, wait_s=0, visibility_s=30) == []
    assert observed(metrics, "change_visibility") == [1]
    assert observed(metrics, "receive") == [3, 0]  # an empty poll is a request too
    assert metrics.snapshot()['sqs_calls_total{operation="receive"}'] == 2


def pack_of(message_id: str, receipt: str, ids: list[str]) -> dict[str, Any]:
    """A pack as SQS hands it out."""
    return {"MessageId": message_id, "ReceiptHandle": receipt,
            "Body": json.dumps({"pack": [[t, 1_700_000_000_000, None, None, None]
                                         for t in ids]}),
            "Attributes": {"ApproximateReceiveCount": "1"}}


async def test_sends_of_one_delay_go_as_packs_and_a_refused_pack_fails_its_members() -> None:
    _clock, client, metrics, q = make(pack_max=4)
    later = [OutgoingMessage(f"trg_l{i}", 1_700_000_000_000, 5) for i in range(3)]
    await q.send_many([message(i) for i in range(10)] + later)
    [entries] = [e for op, e in client.requests if op == "send"]
    bodies = [json.loads(e["MessageBody"]) for e in entries]
    assert [[m[0] for m in b["pack"]] for b in bodies] == [
        ["trg_0", "trg_1", "trg_2", "trg_3"], ["trg_4", "trg_5", "trg_6", "trg_7"],
        ["trg_8", "trg_9"], ["trg_l0", "trg_l1", "trg_l2"]]
    assert [e["DelaySeconds"] for e in entries] == [0, 0, 0, 5]
    assert metrics.snapshot()["sqs_triggers_sent_total"] == 13
    client.refuse["trg_4"] = "InternalError"
    with pytest.raises(QueueError, match="4 of 10 failed"):
        await q.send_many([message(i) for i in range(10)])
    assert metrics.snapshot()["sqs_triggers_sent_total"] == 13 + 6


async def test_a_pack_comes_back_as_its_members_and_goes_with_the_last() -> None:
    clock, client, _metrics, q = make(pack_max=4)
    client.inbox = [pack_of("m1", "h1", ["trg_a", "trg_b", "trg_c"])]
    got = await q.receive(max_messages=10, wait_s=0, visibility_s=30)
    assert [m.trigger_id for m in got] == ["trg_a", "trg_b", "trg_c"]
    assert len({m.message_id for m in got}) == len({m.receipt_handle for m in got}) == 3
    for m in got[:2]:
        await q.delete(m.receipt_handle)
    clock.advance_ms(SETTINGS.delete_linger_ms)
    await settle()
    assert client.sizes("delete") == []  # one member still in hand: the pack stays
    last = asyncio.ensure_future(q.delete(got[2].receipt_handle))
    await settle()
    clock.advance_ms(SETTINGS.delete_linger_ms)
    await last
    assert [e["ReceiptHandle"] for op, es in client.requests if op == "delete"
            for e in es] == ["h1"]


async def test_members_deferred_together_hide_the_pack_one_alone_is_sent_again() -> None:
    clock, client, _metrics, q = make(pack_max=4)
    client.inbox = [pack_of("m1", "h1", ["trg_a", "trg_b", "trg_c"])]
    got = await q.receive(max_messages=10, wait_s=0, visibility_s=30)
    await q.change_visibility_many([VisibilityChange(m.receipt_handle, 5 + i)
                                    for i, m in enumerate(got)])
    assert [(e["ReceiptHandle"], e["VisibilityTimeout"]) for op, es in client.requests
            if op == "change_visibility" for e in es] == [("h1", 7)]  # the longest asked
    # Received again: one member deferred alone goes as a fresh message with its delay.
    client.inbox = [pack_of("m1", "h2", ["trg_a", "trg_b", "trg_c"])]
    again = await q.receive(max_messages=10, wait_s=0, visibility_s=30)
    alone = asyncio.ensure_future(
        q.change_visibility_many([VisibilityChange(again[1].receipt_handle, 9)]))
    await settle()
    clock.advance_ms(1000)  # hidden 9 s: it waits the pack linger for company
    await alone
    sent = [e for op, es in client.requests if op == "send" for e in es]
    assert [(json.loads(e["MessageBody"])["triggerId"], e["DelaySeconds"]) for e in sent] == [
        ("trg_b", 9)]
    assert len(client.sizes("change_visibility")) == 1
    with pytest.raises(QueueError):  # it left the pack: its receipt is no longer valid
        await q.change_visibility_many([VisibilityChange(again[1].receipt_handle, 1)])


async def test_a_member_kept_hidden_extends_the_pack_only_when_it_must() -> None:
    _clock, client, _metrics, q = make(pack_max=4)
    client.inbox = [pack_of("m1", "h1", ["trg_a", "trg_b", "trg_c"])]
    a, b, c = await q.receive(max_messages=10, wait_s=0, visibility_s=30)
    await q.change_visibility(a.receipt_handle, 60)
    await q.change_visibility(b.receipt_handle, 50)  # hidden 60 s already: nothing to ask
    await q.change_visibility(c.receipt_handle, 20)  # never shorter while others are held
    assert [(e["ReceiptHandle"], e["VisibilityTimeout"]) for op, es in client.requests
            if op == "change_visibility" for e in es] == [("h1", 60)]
    for m in (a, b):
        await q.delete(m.receipt_handle)
    await q.change_visibility(c.receipt_handle, 0)  # alone in hand: shown again at once
    assert [e["VisibilityTimeout"] for op, es in client.requests
            if op == "change_visibility" for e in es] == [60, 0]


async def test_a_send_due_to_hide_a_while_waits_the_pack_linger_for_company() -> None:
    clock, client, _metrics, q = make(pack_max=4)
    now = asyncio.ensure_future(q.send(message(0)))  # shown at once: goes at once
    await settle()
    assert now.done() and client.sizes("send") == [1]
    later = [OutgoingMessage(f"trg_l{i}", 1_700_000_000_000, 3) for i in range(3)]
    waiting = asyncio.gather(*(q.send(m) for m in later))
    await settle()
    clock.advance_ms(999)
    await settle()
    assert client.sizes("send") == [1]  # hidden 3 s anyway: they wait up to 1 s
    clock.advance_ms(1)
    await waiting
    [_, pack] = [e for op, e in client.requests if op == "send"]
    assert [len(json.loads(e["MessageBody"])["pack"]) for e in pack] == [3]


@pytest.mark.parametrize(("code", "text", "not_in_flight"), [
    ("AWS.SimpleQueueService.MessageNotInflight", "", True),  # SQS, query protocol
    ("MessageNotInflight", "", True),
    ("ReceiptHandleIsInvalid", "", True),
    # LocalStack's answer for a message shown again
    ("InvalidParameterValue", "Value abc for parameter ReceiptHandle is invalid. Reason: "
     "Message does not exist or is not available for visibility timeout change.", True),
    ("InternalError", "try again", False),
])
def test_a_refused_visibility_change_says_whether_the_message_is_still_in_flight(
        code: str, text: str, not_in_flight: bool) -> None:
    resp = {"Failed": [{"Id": "1", "Code": code, "Message": text, "SenderFault": True}]}
    errors = entry_errors("change visibility", resp, 2)
    assert set(errors) == {1}
    assert isinstance(errors[1], QueueError)
    assert isinstance(errors[1], MessageNotInFlight) is not_in_flight
