"""``Enqueuer`` and ``DeliveryQueue`` on Amazon SQS (LocalStack locally) through aioboto3.

Only the trigger id and its fire time travel in a message (``schema.MSG_*``); the row in
Cassandra is the truth. Every botocore error is translated here into ``QueueError``.

Batching lives here: concurrent ``send``/``delete`` calls share ``SendMessageBatch`` /
``DeleteMessageBatch`` requests (a few ms of linger costs little latency and saves most of the
per-request cost). Retries live here too, in one layer: botocore's standard mode.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from contextlib import AsyncExitStack
from typing import Any

import aioboto3
from aiobotocore.config import AioConfig
from botocore.exceptions import BotoCoreError, ClientError

from trigger_service.adapters import schema
from trigger_service.adapters.batching import Batcher
from trigger_service.config.settings import SqsSettings
from trigger_service.core.errors import QueueError
from trigger_service.core.ports import OutgoingMessage, ReceivedMessage

_SEND_LINGER_S = 0.005
_DELETE_LINGER_S = 0.002


def encode_body(trigger_id: str, fire_at_ms: int) -> str:
    return json.dumps({schema.MSG_TRIGGER_ID: trigger_id, schema.MSG_FIRE_AT_MS: fire_at_ms})


class SqsQueue:
    """Main queue + dead-letter queue. Create with :meth:`connect`; close with :meth:`close`."""

    def __init__(self, client: Any, stack: AsyncExitStack, queue_url: str, dlq_url: str) -> None:
        self._client = client
        self._stack = stack
        self.queue_url = queue_url
        self.dlq_url = dlq_url
        self._sender: Batcher[OutgoingMessage] = Batcher(
            self.send_many, max_batch=schema.SQS_MAX_BATCH, linger_s=_SEND_LINGER_S)
        self._deleter: Batcher[str] = Batcher(
            self._delete_many, max_batch=schema.SQS_MAX_BATCH, linger_s=_DELETE_LINGER_S)

    @classmethod
    async def connect(
        cls, settings: SqsSettings, *, visibility_timeout_s: int, max_pool: int = 64
    ) -> SqsQueue:
        """Open a client and make sure both queues exist (idempotent set-up)."""
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
            queue_url, dlq_url = await ensure_queues(
                client, settings, visibility_timeout_s=visibility_timeout_s
            )
        except (BotoCoreError, ClientError, OSError) as e:
            await stack.aclose()
            raise QueueError(f"sqs connect failed: {e}") from e
        return cls(client, stack, queue_url, dlq_url)

    async def close(self) -> None:
        """Flush the sends and deletes still waiting for company, then disconnect."""
        await self._sender.drain()
        await self._deleter.drain()
        await self._stack.aclose()

    async def send(self, message: OutgoingMessage) -> None:
        await self._sender.submit(message)

    async def send_many(self, messages: Sequence[OutgoingMessage]) -> None:
        chunks = [messages[i:i + schema.SQS_MAX_BATCH]
                  for i in range(0, len(messages), schema.SQS_MAX_BATCH)]
        await asyncio.gather(*(self._send_batch(self.queue_url, c) for c in chunks))

    async def _send_batch(self, url: str, batch: Sequence[OutgoingMessage]) -> None:
        entries = [{
            "Id": str(i),
            "MessageBody": encode_body(m.trigger_id, m.fire_at_ms),
            "DelaySeconds": max(0, min(schema.SQS_MAX_DELAY_S, m.delay_s)),
        } for i, m in enumerate(batch)]
        try:
            resp = await self._client.send_message_batch(QueueUrl=url, Entries=entries)
        except (BotoCoreError, ClientError) as e:
            raise QueueError(f"sqs send failed: {e}") from e
        failed = resp.get("Failed") or []
        if failed:
            raise QueueError(f"sqs send: {len(failed)} of {len(entries)} failed: {failed[0]}")

    async def receive(
        self, *, max_messages: int, wait_s: int, visibility_s: int
    ) -> list[ReceivedMessage]:
        try:
            resp = await self._client.receive_message(
                QueueUrl=self.queue_url,
                MaxNumberOfMessages=min(max_messages, schema.SQS_MAX_BATCH),
                WaitTimeSeconds=wait_s,
                VisibilityTimeout=visibility_s,
                MessageSystemAttributeNames=[schema.SQS_ATTR_RECEIVE_COUNT],
            )
        except (BotoCoreError, ClientError) as e:
            raise QueueError(f"sqs receive failed: {e}") from e
        out: list[ReceivedMessage] = []
        for m in resp.get("Messages") or []:
            try:
                body = json.loads(m["Body"])
                trigger_id = str(body[schema.MSG_TRIGGER_ID])
                fire_at_ms = int(body[schema.MSG_FIRE_AT_MS])
            except (ValueError, KeyError, TypeError):
                trigger_id, fire_at_ms = "", 0  # the dispatcher dead-letters malformed bodies
            out.append(ReceivedMessage(
                message_id=m["MessageId"],
                receipt_handle=m["ReceiptHandle"],
                trigger_id=trigger_id,
                fire_at_ms=fire_at_ms,
                receive_count=int(m.get("Attributes", {}).get(schema.SQS_ATTR_RECEIVE_COUNT, 1)),
            ))
        return out

    async def delete(self, receipt_handle: str) -> None:
        await self._deleter.submit(receipt_handle)

    async def _delete_many(self, receipt_handles: Sequence[str]) -> None:
        """One DeleteMessageBatch (the batcher cuts at 10). A receipt already gone is fine."""
        entries = [{"Id": str(j), "ReceiptHandle": h} for j, h in enumerate(receipt_handles)]
        try:
            resp = await self._client.delete_message_batch(
                QueueUrl=self.queue_url, Entries=entries)
        except (BotoCoreError, ClientError) as e:
            raise QueueError(f"sqs delete failed: {e}") from e
        hard = [f for f in resp.get("Failed") or []
                if f.get("Code") not in ("ReceiptHandleIsInvalid",)]
        if hard:
            raise QueueError(f"sqs delete: {len(hard)} failed: {hard[0]}")

    async def replace(self, receipt_handle: str, message: OutgoingMessage) -> None:
        # Send first: a crash in between leaves two copies (deduplicated by the claim LWT),
        # never none.
        await self.send(message)
        await self.delete(receipt_handle)

    async def change_visibility(self, receipt_handle: str, visibility_s: int) -> None:
        try:
            await self._client.change_message_visibility(
                QueueUrl=self.queue_url, ReceiptHandle=receipt_handle,
                VisibilityTimeout=max(0, min(schema.SQS_MAX_VISIBILITY_S, visibility_s)),
            )
        except (BotoCoreError, ClientError) as e:
            raise QueueError(f"sqs change visibility failed: {e}") from e

    async def send_dead_letter(self, trigger_id: str, fire_at_ms: int, reason: str) -> None:
        body = json.loads(encode_body(trigger_id, fire_at_ms))
        body[schema.MSG_REASON] = reason
        try:
            await self._client.send_message(QueueUrl=self.dlq_url, MessageBody=json.dumps(body))
        except (BotoCoreError, ClientError) as e:
            raise QueueError(f"sqs dead-letter send failed: {e}") from e

    async def ping(self) -> None:
        try:
            await self._client.get_queue_attributes(
                QueueUrl=self.queue_url, AttributeNames=["QueueArn"])
        except (BotoCoreError, ClientError, OSError) as e:
            raise QueueError(f"sqs unreachable: {e}") from e


async def ensure_queues(
    client: Any, settings: SqsSettings, *, visibility_timeout_s: int
) -> tuple[str, str]:
    """Create the DLQ and the main queue (with its redrive policy) if missing; return URLs.

    CreateQueue is idempotent for identical attributes; the main queue's attributes are set
    again afterwards so a changed setting takes effect on an existing queue.
    """
    dlq_url = (await client.create_queue(
        QueueName=settings.dlq,
        Attributes={"MessageRetentionPeriod": str(schema.SQS_RETENTION_S)}))["QueueUrl"]
    dlq_arn = (await client.get_queue_attributes(
        QueueUrl=dlq_url, AttributeNames=["QueueArn"]))["Attributes"]["QueueArn"]
    attrs = {
        "VisibilityTimeout": str(visibility_timeout_s),
        "MessageRetentionPeriod": str(schema.SQS_RETENTION_S),
        "RedrivePolicy": json.dumps({
            "deadLetterTargetArn": dlq_arn, "maxReceiveCount": str(settings.max_receive_count),
        }),
    }
    try:
        queue_url = (await client.create_queue(
            QueueName=settings.queue, Attributes=attrs))["QueueUrl"]
    except ClientError as e:
        if "QueueAlreadyExists" not in str(e) and "QueueNameExists" not in str(e):
            raise
        queue_url = (await client.get_queue_url(QueueName=settings.queue))["QueueUrl"]
    await client.set_queue_attributes(QueueUrl=queue_url, Attributes=attrs)
    return queue_url, dlq_url
