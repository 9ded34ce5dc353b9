"""``EventQueue`` on SQS: the events queue (the main queue's name and
``schema.EVENTS_QUEUE_SUFFIX``), one message per event and subscription, JSON of
``schema.MSG_EVENT_FIELDS``; on the main queue's client, apart from its lanes, batchers and
redrive policy. An event's sends are the queue's receives, a failed send hides the message
until its next one (``retry_event``), and the sender gives up by itself: no redrive policy.
Created on first use if missing (like the main queue's). Every botocore error is translated
here into ``QueueError``."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import structlog
from botocore.exceptions import BotoCoreError, ClientError

from trigger_service.adapters import schema
from trigger_service.adapters.sqs_wire import clamp_visibility, queue_missing, receive_count
from trigger_service.core.caller_events import CallerEvent, EventDelivery, EventType
from trigger_service.core.errors import QueueError
from trigger_service.core.ports.caller_events import ReceivedEvent

T = TypeVar("T")
log = structlog.get_logger(__name__)


_CALLER, _SUBSCRIPTION, _TYPE, _SUBJECT, _AT_MS, _DATA = schema.MSG_EVENT_FIELDS


def encode_delivery(d: EventDelivery) -> str:
    e = d.event
    return json.dumps({_CALLER: e.caller, _SUBSCRIPTION: d.subscription, _TYPE: e.type.value,
                       _SUBJECT: e.subject, _AT_MS: e.at_ms, _DATA: json.loads(e.data_json)},
                      separators=(",", ":"), ensure_ascii=False)


def decode_delivery(body: str) -> EventDelivery | None:
    """The delivery a body holds (None: not one this release reads)."""
    try:
        raw = json.loads(body)
        event = CallerEvent.of(EventType(raw[_TYPE]), str(raw[_CALLER]), str(raw[_SUBJECT]),
                               int(raw[_AT_MS]), dict(raw[_DATA]))
        return EventDelivery(str(raw[_SUBSCRIPTION]), event)
    except (ValueError, KeyError, TypeError):
        return None


class SqsEventQueue:
    """On ``client``, the main queue's (``SqsQueue.events``): closed with it."""

    def __init__(self, client: Any, name: str) -> None:
        self._client = client
        self._name = name
        self._url: str | None = None

    async def ping(self) -> None:
        await self._call("ping", lambda url: self._client.get_queue_attributes(
            QueueUrl=url, AttributeNames=["QueueArn"]))

    async def _queue_url(self) -> str:
        if self._url is None:
            self._url = str((await self._client.create_queue(QueueName=self._name, Attributes={
                "MessageRetentionPeriod": str(schema.SQS_RETENTION_S)}))["QueueUrl"])
        return self._url

    async def _call(self, what: str, op: Callable[[str], Awaitable[T]]) -> T:
        """Run ``op`` on the queue's URL; a missing queue is made again and ``op`` retried
        once (LocalStack restarted); botocore's errors become ``QueueError``."""
        try:
            try:
                return await op(await self._queue_url())
            except ClientError as e:
                if not queue_missing(e):
                    raise
                self._url = None
                return await op(await self._queue_url())
        except (BotoCoreError, ClientError, OSError) as e:
            raise QueueError(f"sqs events {what} failed: {e}") from e

    async def send_event(self, delivery: EventDelivery) -> None:
        body = encode_delivery(delivery)
        await self._call("send", lambda url: self._client.send_message(
            QueueUrl=url, MessageBody=body))

    async def receive_events(self, *, max_messages: int, wait_s: int,
                             visibility_s: int) -> Sequence[ReceivedEvent]:
        resp = await self._call("receive", lambda url: self._client.receive_message(
            QueueUrl=url, MaxNumberOfMessages=max_messages, WaitTimeSeconds=wait_s,
            VisibilityTimeout=clamp_visibility(visibility_s),
            AttributeNames=[schema.SQS_ATTR_RECEIVE_COUNT]))
        out = []
        for m in resp.get("Messages") or []:
            delivery = decode_delivery(m.get("Body", ""))
            if delivery is None:
                # Nothing to send it with: kept, it would come back forever.
                log.error("event_message_unreadable", message_id=m.get("MessageId"))
                await self.delete_event(m["ReceiptHandle"])
                continue
            out.append(ReceivedEvent(m["ReceiptHandle"], delivery, receive_count(m)))
        return out

    async def delete_event(self, receipt_handle: str) -> None:
        await self._call("delete", lambda url: self._client.delete_message(
            QueueUrl=url, ReceiptHandle=receipt_handle))

    async def retry_event(self, receipt_handle: str, delay_s: int) -> None:
        await self._call("retry", lambda url: self._client.change_message_visibility(
            QueueUrl=url, ReceiptHandle=receipt_handle,
            VisibilityTimeout=clamp_visibility(delay_s)))
