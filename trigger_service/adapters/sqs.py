"""``Enqueuer`` and ``DeliveryQueue`` on Amazon SQS (LocalStack locally) through aioboto3.

Only the trigger id and its fire time travel in a message (``schema.MSG_*``); the row in
Cassandra is the truth. Every botocore error is translated here into ``QueueError``.

Packs live here too (``adapters.sqs_packs``): messages sent together with the same delay
travel as one SQS message of up to ``TRIGGER_SQS_PACK_MAX`` triggers, handed out on receipt
as one ``ReceivedMessage`` each; their deletes and visibility changes are kept apart here.

Batching lives here: concurrent ``send``/``delete``/``change_visibility(_many)`` calls share
``SendMessageBatch`` / ``DeleteMessageBatch`` / ``ChangeMessageVisibilityBatch`` requests
through a ``Batcher`` (a lone call goes at once; under load a call waits at most its linger,
``TRIGGER_SQS_*_LINGER_MS``, for a full batch of 10: a message in a batch of 10 costs SQS
about an eighth of a message sent alone). Every request is counted by operation
(``sqs_calls_total``) and the messages each carries observed (``sqs_batch_messages``).
Retries live here too, in one layer: botocore's standard mode.

The main queue is ``TRIGGER_SQS_LANES`` queues and ``TRIGGER_SQS_HIGH_LANES`` more
(``core.lanes``): a message goes to its caller's lane (a high-priority one to its caller's
high lane), ``receive`` reads the lane it is asked for, and a receipt handed out for lane
``i`` > 0 names its lane (``~i~`` before SQS's handle, which is base64 and has no ``~``), so
deletes and visibility changes go to the queue the message came from. Each lane has its own
batchers: a batch request names one queue.
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AsyncExitStack
from typing import Any, NamedTuple, TypeVar

import aioboto3
import structlog
from aiobotocore.config import AioConfig
from botocore.exceptions import BotoCoreError, ClientError

from trigger_service.adapters import schema
from trigger_service.adapters.batching import Batcher, ItemErrors
from trigger_service.adapters.sqs_events import SqsEventQueue
from trigger_service.adapters.sqs_packs import (
    PackBook,
    member_receipt,
    pack_body,
    pack_members,
    packs_of,
    split_member,
    sqs_delay,
)
from trigger_service.adapters.sqs_wire import (
    clamp_visibility,
    decode_message,
    encode_body,
    entry_errors,
    lane_receipt,
    parse_body,
    queue_missing,
    receive_count,
    split_receipt,
)
from trigger_service.config.sqs import SqsSettings
from trigger_service.core.errors import MessageNotInFlight, QueueError
from trigger_service.core.lanes import Lanes
from trigger_service.core.ports import Clock, Metrics
from trigger_service.core.ports.values import OutgoingMessage, ReceivedMessage, VisibilityChange
from trigger_service.core.time.timing import SQS_MAX_BATCH

# A batch entry whose receipt is no longer valid: that message is gone (or was received
# again): deleting it has nothing left to do.
_RECEIPT_GONE = frozenset({"ReceiptHandleIsInvalid"})

T = TypeVar("T")
log = structlog.get_logger(__name__)


class QueueUrls(NamedTuple):
    main: str  # lane 0
    dlq: str
    redrive: str
    lanes: tuple[str, ...] = ()  # every lane's queue, lane 0 first

    def lane(self, lane: int) -> str:
        return self.lanes[lane] if self.lanes else self.main


class SqsQueue:
    """Main queue, dead-letter queue and redrive queue (where SQS moves a poison message).
    Create with :meth:`connect`; close with :meth:`close`.

    A queue that disappears (LocalStack restarted, the queue deleted or purged away) is
    re-created on the first call that finds it missing, and that call is retried once: every
    process heals itself; what the lost queue held is re-sent by the sweepers' due-scan.
    """

    def __init__(self, client: Any, stack: AsyncExitStack, settings: SqsSettings,
                 visibility_timeout_s: int, urls: QueueUrls | None, *, metrics: Metrics,
                 clock: Clock) -> None:
        self._client = client
        self._stack = stack
        self._settings = settings
        # The callers' events: a queue of their own on this client (``adapters.sqs_events``).
        self.events = SqsEventQueue(client, settings.queue + schema.EVENTS_QUEUE_SUFFIX)
        self._visibility_timeout_s = visibility_timeout_s
        self._urls = urls
        self._metrics = metrics
        self._clock = clock
        self._pack_max = max(1, settings.pack_max)
        self._packs = PackBook()  # of the main queue's lanes
        self._redriven_packs = PackBook()
        # Messages sent to the main queue, and the triggers they carried (the mean pack:
        # ``visible_backlog`` counts triggers, SQS counts messages).
        self._messages_sent = 0
        self._triggers_sent = 0
        self._recreating = asyncio.Lock()
        self._generation = 0  # bumped by every re-creation, so concurrent callers do it once
        self.lane_plan = Lanes(settings.lanes, settings.high_lanes)
        lanes = range(self.lane_plan.total)
        self._senders: list[Batcher[OutgoingMessage]] = [Batcher(
            functools.partial(self._send_batch, lane), clock,
            max_batch=SQS_MAX_BATCH * self._pack_max,
            linger_ms=settings.send_linger_ms) for lane in lanes]
        # Sends that may wait for company (``send``): not eager, a longer linger.
        self._pack_linger_ms = min(settings.pack_linger_ms, settings.enqueue_lead_s * 1000)
        self._patient: list[Batcher[OutgoingMessage]] = [Batcher(
            functools.partial(self._send_batch, lane), clock,
            max_batch=SQS_MAX_BATCH * self._pack_max, linger_ms=self._pack_linger_ms,
            eager=False) for lane in lanes]
        # Not eager: nobody waits for a delete (the dispatcher lets it go in the background),
        # so a delete always waits for company, up to the linger: full batches at any rate.
        self._deleters: list[Batcher[str]] = [Batcher(
            functools.partial(self._delete_batch, lane), clock,
            max_batch=SQS_MAX_BATCH, linger_ms=settings.delete_linger_ms, eager=False)
            for lane in lanes]
        self._rehiders: list[Batcher[VisibilityChange]] = [Batcher(
            functools.partial(self._change_visibility_batch, lane), clock,
            max_batch=SQS_MAX_BATCH, linger_ms=settings.visibility_linger_ms)
            for lane in lanes]

    @property
    def lanes(self) -> int:
        return len(self._senders)

    @property
    def high_lanes(self) -> int:
        """The last this many of ``lanes`` are high-priority lanes (``core.lanes``)."""
        return self.lane_plan.high

    @property
    def urls(self) -> QueueUrls:
        if self._urls is None:
            raise QueueError("sqs queues not set up yet (SQS unreachable since start)")
        return self._urls

    @classmethod
    async def connect(
        cls, settings: SqsSettings, *, visibility_timeout_s: int, metrics: Metrics,
        clock: Clock, max_pool: int = 64,
    ) -> SqsQueue:
        """Open a client and make sure the queues exist (idempotent set-up). SQS being
        unreachable does not stop a process from starting: the queues are set up by the
        first call that reaches it (meanwhile calls raise ``QueueError``; the API's triggers
        are durable in Cassandra and the due-scan sends them). ``metrics`` gets the request
        counts; ``clock`` times the batches' lingers."""
        stack = AsyncExitStack()
        session = aioboto3.Session()
        try:
            client = await stack.enter_async_context(session.client(
                "sqs",
                endpoint_url=settings.endpoint_url,
                region_name=settings.region,
                aws_access_key_id=settings.access_key_id,
                aws_secret_access_key=settings.secret_access_key,
                config=AioConfig(
                    max_pool_connections=max_pool,
                    retries={"total_max_attempts": settings.max_attempts, "mode": "standard"},
                    connect_timeout=5,
                    read_timeout=30,
                ),
            ))
        except (BotoCoreError, ClientError, OSError) as e:
            await stack.aclose()
            raise QueueError(f"sqs client failed: {e}") from e
        urls: QueueUrls | None = None
        try:
            urls = await ensure_queues(client, settings, visibility_timeout_s=visibility_timeout_s)
        except (BotoCoreError, ClientError, OSError) as e:
            log.warning("sqs_unreachable_at_start", error=str(e))
        return cls(client, stack, settings, visibility_timeout_s, urls, metrics=metrics,
                   clock=clock)

    async def close(self) -> None:
        """Flush the sends, deletes and visibility changes still waiting for company, then
        disconnect."""
        for batchers in (self._senders, self._patient, self._deleters, self._rehiders):
            for batcher in batchers:
                await batcher.drain()
        await self._stack.aclose()

    async def _call(self, what: str, op: Callable[[], Awaitable[T]], *, operation: str,
                    messages: int | None = None) -> T:
        """Run ``op`` (which reads the queue URLs when called); translate botocore's errors.
        A missing queue is re-created and ``op`` retried once. Each request is counted under
        ``operation``, with the ``messages`` it carries (batch operations)."""
        generation = self._generation
        if self._urls is None:
            await self._recreate(generation, what)
            generation = self._generation
        try:
            return await self._counted(op, operation, messages)
        except ClientError as e:
            if not queue_missing(e):
                raise QueueError(f"sqs {what} failed: {e}") from e
        except (BotoCoreError, OSError) as e:
            raise QueueError(f"sqs {what} failed: {e}") from e
        await self._recreate(generation, what)
        try:
            return await self._counted(op, operation, messages)
        except (BotoCoreError, ClientError, OSError) as e:
            raise QueueError(f"sqs {what} failed after re-creating the queues: {e}") from e

    async def _counted(self, op: Callable[[], Awaitable[T]], operation: str,
                       messages: int | None) -> T:
        self._metrics.inc("sqs_calls_total", operation=operation)
        if messages is not None:
            self._metrics.observe("sqs_batch_messages", messages, operation=operation)
        return await op()

    async def _recreate(self, seen_generation: int, what: str) -> None:
        async with self._recreating:
            if self._generation != seen_generation:
                return  # another call re-created them meanwhile
            log.warning("sqs_queues_recreated", queue=self._settings.queue, failed_call=what)
            try:
                self._urls = await ensure_queues(
                    self._client, self._settings,
                    visibility_timeout_s=self._visibility_timeout_s)
            except (BotoCoreError, ClientError, OSError) as e:
                raise QueueError(f"sqs queues could not be re-created: {e}") from e
            self._generation += 1

    def _lane_of(self, message: OutgoingMessage) -> int:
        return self.lane_plan.of(message.caller, message.priority)

    async def send(self, message: OutgoingMessage) -> None:
        """A message SQS is to hide at least the pack linger (its trigger is due later than
        the enqueue lead and that) waits up to the linger for others of its delay, to share
        a pack: it shows that much later, inside the lead. Others go as soon as they can."""
        lane = self._lane_of(message)
        if self._pack_max > 1 and 0 < self._pack_linger_ms <= message.delay_s * 1000:
            await self._patient[lane].submit(message)
        else:
            await self._senders[lane].submit(message)

    async def send_many(self, messages: Sequence[OutgoingMessage]) -> None:
        by_lane: dict[int, list[OutgoingMessage]] = {}
        for m in messages:
            by_lane.setdefault(self._lane_of(m), []).append(m)
        results = await asyncio.gather(*(self._send_batch(lane, ms)
                                         for lane, ms in by_lane.items()))
        failed = [e for errors in results for e in errors.values()]
        if failed:
            raise QueueError(f"sqs send: {len(failed)} of {len(messages)} failed: {failed[0]}")

    async def _send_batch(self, lane: int, batch: Sequence[OutgoingMessage]) -> ItemErrors:
        """``batch`` to ``lane``, in packs (those of one delay together), the packs in
        SendMessageBatch requests of 10 side by side; the messages not sent, by position
        (a pack refused fails each of its members)."""
        packs = packs_of(batch, self._pack_max)
        requests = [packs[i:i + SQS_MAX_BATCH] for i in range(0, len(packs), SQS_MAX_BATCH)]
        answers = await asyncio.gather(*(self._send_packs(lane, batch, r) for r in requests),
                                       return_exceptions=True)
        errors: dict[int, Exception] = {}
        for request, answer in zip(requests, answers, strict=True):
            if isinstance(answer, BaseException):
                if not isinstance(answer, Exception):
                    raise answer
                errors.update(dict.fromkeys((i for p in request for i in p), answer))
                continue
            for position, error in answer.items():
                errors.update(dict.fromkeys(request[position], error))
        return errors

    async def _send_packs(self, lane: int, batch: Sequence[OutgoingMessage],
                          packs: list[list[int]]) -> ItemErrors:
        """One SendMessageBatch of ``packs`` (positions in ``batch``); the packs refused,
        by position in ``packs``."""
        entries = []
        for i, pack in enumerate(packs):
            first = batch[pack[0]]
            body = (encode_body(first.trigger_id, first.fire_at_ms, first.home_at_ms,
                                first.shard, first.caller, first.priority) if len(pack) == 1
                    else pack_body([batch[j] for j in pack]))
            entries.append({"Id": str(i), "MessageBody": body, "DelaySeconds": sqs_delay(first)})
        resp = await self._call("send", lambda: self._client.send_message_batch(
            QueueUrl=self.urls.lane(lane), Entries=entries), operation="send",
            messages=len(entries))
        errors = entry_errors("send", resp, len(entries))
        sent = [p for i, p in enumerate(packs) if i not in errors]
        triggers = sum(map(len, sent))
        self._metrics.inc("sqs_triggers_sent_total", triggers)
        self._messages_sent += len(sent)
        self._triggers_sent += triggers
        return errors

    async def receive(
        self, *, max_messages: int, wait_s: int, visibility_s: int, lane: int = 0
    ) -> list[ReceivedMessage]:
        if not 0 <= lane < self.lanes:
            raise QueueError(f"sqs receive: no lane {lane} (of {self.lanes})")
        return await self._receive("receive", lambda: self.urls.lane(lane), max_messages,
                                   wait_s, visibility_s, self._packs, lane)

    async def _receive(self, what: str, url: Callable[[], str], max_messages: int,
                       wait_s: int, visibility_s: int, packs: PackBook,
                       lane: int = 0) -> list[ReceivedMessage]:
        """One ReceiveMessage on the queue ``url()`` names (read per call: a re-created
        queue has a new URL); a pack comes back as its members (kept in ``packs``). The
        main queue's are observed by how many messages came."""
        operation = what.replace(" ", "_")
        resp = await self._call(what, lambda: self._client.receive_message(
            QueueUrl=url(),
            MaxNumberOfMessages=min(max_messages, SQS_MAX_BATCH),
            WaitTimeSeconds=wait_s,
            VisibilityTimeout=visibility_s,
            MessageSystemAttributeNames=[schema.SQS_ATTR_RECEIVE_COUNT],
        ), operation=operation)
        hidden_until_ms = self._clock.now_ms() + visibility_s * 1000
        got: list[ReceivedMessage] = []
        for m in resp.get("Messages") or []:
            body = parse_body(m)
            members = pack_members(body)
            if members is None:
                got.append(decode_message(m, lane, body))
                continue
            got += packs.received(m["MessageId"], lane_receipt(lane, m["ReceiptHandle"]),
                                  members, receive_count(m), hidden_until_ms)
        if operation == "receive":
            self._metrics.observe("sqs_batch_messages", len(got), operation=operation)
        return got

    async def delete(self, receipt_handle: str) -> None:
        """A pack's member leaves it; the pack is deleted with its last member."""
        if (member := split_member(receipt_handle)) is not None:
            pack = self._packs.let_go(member[1], member[0])
            if pack is None:
                return
            receipt_handle = pack
        lane, handle = self._unwrap(receipt_handle)
        await self._deleters[lane].submit(handle)

    def _unwrap(self, receipt_handle: str) -> tuple[int, str]:
        return split_receipt(receipt_handle, self.lanes)

    async def _delete_batch(self, lane: int, receipt_handles: Sequence[str]) -> ItemErrors:
        """One DeleteMessageBatch on ``lane`` (the batcher cuts at 10). A receipt already
        gone is fine."""
        entries = [{"Id": str(j), "ReceiptHandle": h} for j, h in enumerate(receipt_handles)]
        resp = await self._call("delete", lambda: self._client.delete_message_batch(
            QueueUrl=self.urls.lane(lane), Entries=entries), operation="delete",
            messages=len(entries))
        return entry_errors("delete", resp, len(entries), ignore=_RECEIPT_GONE)

    async def replace(self, receipt_handle: str, message: OutgoingMessage) -> None:
        # Send first: a crash in between leaves two copies (deduplicated by the claim LWT),
        # never none.
        await self.send(message)
        await self.delete(receipt_handle)

    async def change_visibility(self, receipt_handle: str, visibility_s: int) -> None:
        """A pack's member: alone in hand, it hides (or shows) the pack; with others in
        hand, it keeps the pack hidden at least that long, never shorter."""
        # Through the batcher like the others: the extensions of a backlog's late
        # deliveries (``Visibility.keep_hidden``) come many at a time.
        if (member := split_member(receipt_handle)) is not None:
            index, pack = member
            if self._packs.has_left(pack, index):
                raise MessageNotInFlight("sqs change visibility: that pack member was deleted")
            until_ms = self._clock.now_ms() + visibility_s * 1000
            if self._packs.in_hand(pack) - {index}:
                if not self._packs.extend(pack, until_ms):
                    return
            else:
                self._packs.hidden(pack, until_ms)
            receipt_handle = self._packs.latest(pack)
        await self._change_visibility_plain([VisibilityChange(receipt_handle, visibility_s)])

    async def change_visibility_many(self, changes: Sequence[VisibilityChange]) -> None:
        """Members of a pack: those that are every member still in hand hide (or show) the
        pack, for the longest asked; others are each sent again alone, with their delay
        (at most SQS's 15 minutes), and leave the pack. A member that left fails alone."""
        plain: list[VisibilityChange] = []
        by_pack: dict[str, list[tuple[int, int]]] = {}
        gone = 0
        for c in changes:
            if (member := split_member(c.receipt_handle)) is None:
                plain.append(c)
            elif self._packs.has_left(member[1], member[0]):
                gone += 1
            else:
                by_pack.setdefault(self._packs.latest(member[1]), []).append(
                    (member[0], c.visibility_s))
        alone: list[tuple[str, int, OutgoingMessage]] = []
        now_ms = self._clock.now_ms()
        for pack, asked in by_pack.items():
            in_hand = self._packs.in_hand(pack)
            if in_hand <= {i for i, _ in asked}:
                # The whole pack (or one no longer in hand here: it goes as it is).
                longest_s = max(s for _, s in asked)
                plain.append(VisibilityChange(pack, longest_s))
                self._packs.hidden(pack, now_ms + longest_s * 1000)
                continue
            for i, s in asked:
                if (m := self._packs.member(pack, i)) is not None:
                    alone.append((pack, i, OutgoingMessage(
                        m.trigger_id, m.fire_at_ms, s, m.home_at_ms, m.shard, m.caller)))
        results = await asyncio.gather(
            *([self._change_visibility_plain(plain)] if plain else []),
            *(self._send_alone(pack, i, m) for pack, i, m in alone), return_exceptions=True)
        failed = [r for r in results if isinstance(r, BaseException)]
        for r in failed:
            if not isinstance(r, Exception):
                raise r
        if failed or gone:
            first = failed[0] if failed else None
            raise QueueError(f"sqs change visibility: {len(failed)} requests failed, "
                             f"{gone} pack members deleted already: {first}") from first

    async def _send_alone(self, pack: str, index: int, message: OutgoingMessage) -> None:
        """Member ``index`` of ``pack`` sent again by itself (first: a crash in between
        leaves two copies, never none), then it leaves the pack."""
        await self.send(message)
        await self.delete(member_receipt(index, pack))

    async def _change_visibility_plain(self, changes: Sequence[VisibilityChange]) -> None:
        by_lane: dict[int, list[VisibilityChange]] = {}
        for c in changes:
            lane, handle = self._unwrap(c.receipt_handle)
            by_lane.setdefault(lane, []).append(VisibilityChange(handle, c.visibility_s))
        answers = await asyncio.gather(*(self._rehiders[lane].submit_many(cs)
                                         for lane, cs in by_lane.items()))
        failed = [e for errors in answers for e in errors if e is not None]
        if failed:
            # Not in flight, each of them: nothing to hide any more (``MessageNotInFlight``).
            kind = (MessageNotInFlight if all(isinstance(e, MessageNotInFlight) for e in failed)
                    else QueueError)
            raise kind(f"sqs change visibility: {len(failed)} of {len(changes)} "
                       f"failed: {failed[0]}") from failed[0]

    async def _change_visibility_batch(self, lane: int, changes: Sequence[VisibilityChange]
                                       ) -> ItemErrors:
        """One ChangeMessageVisibilityBatch on ``lane`` (the batcher cuts at 10)."""
        entries = [{"Id": str(j), "ReceiptHandle": c.receipt_handle,
                    "VisibilityTimeout": clamp_visibility(c.visibility_s)}
                   for j, c in enumerate(changes)]
        resp = await self._call(
            "change visibility", lambda: self._client.change_message_visibility_batch(
                QueueUrl=self.urls.lane(lane), Entries=entries),
            operation="change_visibility",
            messages=len(entries))
        return entry_errors("change visibility", resp, len(entries))

    async def send_dead_letter(self, trigger_id: str, fire_at_ms: int, reason: str) -> None:
        body = json.loads(encode_body(trigger_id, fire_at_ms))
        body[schema.MSG_REASON] = reason
        await self._call("dead-letter send", lambda: self._client.send_message(
            QueueUrl=self.urls.dlq, MessageBody=json.dumps(body)),
            operation="send_dead_letter")

    async def receive_redriven(self, *, max_messages: int, wait_s: int,
                               visibility_s: int) -> list[ReceivedMessage]:
        return await self._receive("redrive receive", lambda: self.urls.redrive, max_messages,
                                   wait_s, visibility_s, self._redriven_packs)

    async def delete_redriven(self, receipt_handle: str) -> None:
        if (member := split_member(receipt_handle)) is not None:
            pack = self._redriven_packs.let_go(member[1], member[0])
            if pack is None:
                return
            receipt_handle = pack
        try:
            await self._call("redrive delete", lambda: self._client.delete_message(
                QueueUrl=self.urls.redrive, ReceiptHandle=receipt_handle),
                operation="redrive_delete")
        except QueueError as e:
            if "ReceiptHandleIsInvalid" not in str(e):
                raise

    async def visible_backlog(self) -> int:
        """SQS counts messages: times the triggers a message sent by this process carried
        on average (1 before it sent any), about the triggers they hold."""
        messages = sum(await asyncio.gather(*(self._visible("backlog", self.urls.lane(lane))
                                              for lane in range(self.lanes))))
        if not self._messages_sent:
            return messages
        return messages * self._triggers_sent // self._messages_sent

    async def dead_letter_backlog(self) -> int:
        return await self._visible("dlq backlog", self.urls.dlq)

    async def _visible(self, what: str, url: str) -> int:
        resp = await self._call(what, lambda: self._client.get_queue_attributes(
            QueueUrl=url, AttributeNames=[schema.SQS_ATTR_VISIBLE]), operation="attributes")
        return int(resp.get("Attributes", {}).get(schema.SQS_ATTR_VISIBLE, 0))

    async def ping(self) -> None:
        await self._call("ping", lambda: self._client.get_queue_attributes(
            QueueUrl=self.urls.main, AttributeNames=["QueueArn"]), operation="attributes")


async def ensure_queues(
    client: Any, settings: SqsSettings, *, visibility_timeout_s: int
) -> QueueUrls:
    """Create the dead-letter and redrive queues and the main queue's lanes (each with the
    redrive policy) if missing; return their URLs.

    CreateQueue is idempotent for identical attributes; the main queue's attributes are set
    again afterwards so a changed setting takes effect on an existing queue.
    """
    retention = {"MessageRetentionPeriod": str(schema.SQS_RETENTION_S)}
    dlq_url = (await client.create_queue(
        QueueName=settings.dlq, Attributes=retention))["QueueUrl"]
    redrive_url = (await client.create_queue(
        QueueName=settings.redrive_queue, Attributes=retention))["QueueUrl"]
    redrive_arn = (await client.get_queue_attributes(
        QueueUrl=redrive_url, AttributeNames=["QueueArn"]))["Attributes"]["QueueArn"]
    attrs = {
        "VisibilityTimeout": str(visibility_timeout_s),
        "MessageRetentionPeriod": str(schema.SQS_RETENTION_S),
        "RedrivePolicy": json.dumps({
            "deadLetterTargetArn": redrive_arn, "maxReceiveCount": str(settings.max_receive_count),
        }),
    }
    names = schema.sqs_main_queues(settings.queue, settings.lanes, settings.high_lanes)
    lanes = tuple([await _ensure_queue(client, name, attrs) for name in names])
    return QueueUrls(lanes[0], dlq_url, redrive_url, lanes)


async def _ensure_queue(client: Any, name: str, attrs: dict[str, str]) -> str:
    try:
        queue_url = str((await client.create_queue(QueueName=name, Attributes=attrs))["QueueUrl"])
    except ClientError as e:
        if "QueueAlreadyExists" not in str(e) and "QueueNameExists" not in str(e):
            raise
        queue_url = str((await client.get_queue_url(QueueName=name))["QueueUrl"])
    await client.set_queue_attributes(QueueUrl=queue_url, Attributes=attrs)
    return queue_url
