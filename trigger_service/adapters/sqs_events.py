"""``EventQueue`` on SQS: the events queue (``schema.events_queue``), one message per event
and subscription. Its own client and queue, apart from the main queue's lanes, batchers and
redrive policy: an event's sends are the queue's receives, a failed send hides the message
until its next one (``retry_event``), and the sender gives up by itself, so there is no
redrive policy. Created on first use if missing (like the main queue's). Every botocore
error is translated here into ``QueueError``."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AsyncExitStack
from typing import Any, TypeVar

import aioboto3
import structlog
from aiobotocore.config import AioConfig
from botocore.exceptions import BotoCoreError, ClientError

from trigger_service.adapters import schema
from trigger_service.adapters.sqs_wire import clamp_visibility, queue_missing, receive_count
from trigger_service.config.sqs import SqsSettings
from trigger_service.core.caller_events import CallerEvent, EventDelivery, EventType
from trigger_service.core.errors import QueueError
from trigger_service.core.ports.caller_events import ReceivedEvent

T = TypeVar("T")
log = structlog.get_logger(__name__)


def encode_delivery(d: EventDelivery) -> str:
    e = d.event
    return json.dumps({schema.MSG_EV_CALLER: e.caller, schema.MSG_EV_SUBSCRIPTION: d.subscription,
                       schema.MSG_EV_TYPE: e.type.value, schema.MSG_EV_SUBJECT: e.subject,
                       schema.MSG_EV_AT_MS: e.at_ms, schema.MSG_EV_DATA: json.loads(e.data_json)},
                      separators=(",", ":"), ensure_ascii=False)


def decode_delivery(body: str) -> EventDelivery | None:
    """The delivery a body holds (None: not one this release reads)."""
    try:
        raw = json.loads(body)
        event = CallerEvent.of(EventType(raw[schema.MSG_EV_TYPE]), str(raw[schema.MSG_EV_CALLER]),
                               str(raw[schema.MSG_EV_SUBJECT]), int(raw[schema.MSG_EV_AT_MS]),
                               dict(raw[schema.MSG_EV_DATA]))
        return EventDelivery(str(raw[schema.MSG_EV_SUBSCRIPTION]), event)
    except (ValueError, KeyError, TypeError):
        return None


class SqsEventQueue:
    """Create with :meth:`connect`; close with :meth:`close`."""

    def __init__(self, client: Any, stack: AsyncExitStack, name: str) -> None:
        self._client = client
        self._stack = stack
        self._name = name
        self._url: str | None = None

    @classmethod
    async def connect(cls, settings: SqsSettings) -> SqsEventQueue:
        """Open a client (the queue is made on first use). Raises ``QueueError``."""
        stack = AsyncExitStack()
        try:
            client = await stack.enter_async_context(aioboto3.Session().client(
                "sqs", endpoint_url=settings.endpoint_url, region_name=settings.region,
                aws_access_key_id=settings.access_key_id,
                aws_secret_access_key=settings.secret_access_key,
                config=AioConfig(max_pool_connections=16, connect_timeout=5, read_timeout=30,
                                 retries={"total_max_attempts": settings.max_attempts,
                                          "mode": "standard"})))
        except (BotoCoreError, ClientError, OSError) as e:
            await stack.aclose()
            raise QueueError(f"sqs client failed: {e}") from e
        return cls(client, stack, schema.events_queue(settings.queue))

    async def close(self) -> None:
        await self._stack.aclose()

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
