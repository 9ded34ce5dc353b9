"""Test-only access to the real dependencies (what operators would do by hand), kept out of
the production adapters."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import aioboto3
import aiohttp
import redis.asyncio as aioredis

from trigger_service.adapters import schema
from trigger_service.config.sqs import SqsSettings


class SqsAdmin:
    """A plain SQS client for reading the DLQ and deleting a test's queues."""

    def __init__(self, settings: SqsSettings) -> None:
        self._settings = settings
        self._stack = AsyncExitStack()
        self._client: Any = None

    async def open(self) -> SqsAdmin:
        s = self._settings
        self._client = await self._stack.enter_async_context(aioboto3.Session().client(
            "sqs", endpoint_url=s.endpoint_url, region_name=s.region,
            aws_access_key_id=s.access_key_id, aws_secret_access_key=s.secret_access_key))
        return self

    async def close(self) -> None:
        await self._stack.aclose()

    async def url(self, name: str) -> str:
        return str((await self._client.get_queue_url(QueueName=name))["QueueUrl"])

    async def dlq_bodies(self, max_messages: int = 10) -> list[dict[str, Any]]:
        """Read (and leave) up to ``max_messages`` dead-letter bodies."""
        resp = await self._client.receive_message(
            QueueUrl=await self.url(self._settings.dlq), MaxNumberOfMessages=max_messages,
            WaitTimeSeconds=1, VisibilityTimeout=0)
        return [json.loads(m["Body"]) for m in resp.get("Messages") or []]

    def lane_queues(self) -> list[str]:
        """The main queue's lanes (``core.lanes``), lane 0 first, the high lanes last."""
        return schema.sqs_main_queues(self._settings.queue, self._settings.lanes,
                                      self._settings.high_lanes)

    async def receive_main(self, visibility_s: int) -> list[dict[str, Any]]:
        """Receive from the main queue (each lane, up to 10 from each) as a dispatcher that
        crashes would: nothing deleted."""
        bodies: list[dict[str, Any]] = []
        for name in self.lane_queues():
            resp = await self._client.receive_message(
                QueueUrl=await self.url(name), MaxNumberOfMessages=10,
                WaitTimeSeconds=0 if bodies else 1, VisibilityTimeout=visibility_s)
            bodies += [json.loads(m["Body"]) for m in resp.get("Messages") or []]
        return bodies

    async def delete_queues(self) -> None:
        """Delete the test's queues; one already gone is fine (a process re-creating the
        queues may race with a test deleting them)."""
        for name in (*self.lane_queues(), self._settings.dlq, self._settings.redrive_queue,
                     self._settings.queue + schema.EVENTS_QUEUE_SUFFIX):
            try:
                await self._client.delete_queue(QueueUrl=await self.url(name))
            except self._client.exceptions.QueueDoesNotExist:
                continue


async def lease_owners(client: aioredis.Redis, group: str,
                       shards: Sequence[int]) -> dict[int, str | None]:
    """Who holds each shard's lease right now (``{owner}:{fence}``), read straight from Redis."""
    values = await client.mget([schema.lease_key(group, s) for s in shards])
    return dict(zip(shards, values, strict=True))


async def until(pred: Callable[[], Awaitable[bool]], timeout_s: float = 20,
                interval_s: float = 0.1) -> bool:
    """Whether ``pred()`` came true within ``timeout_s`` (asked every ``interval_s``, and once
    more when the time is up)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if await pred():
            return True
        await asyncio.sleep(interval_s)
    return bool(await pred())


@asynccontextmanager
async def dispatcher_process(env: Mapping[str, str]
                             ) -> AsyncIterator[asyncio.subprocess.Process]:
    """``python -m dispatcher`` with ``env``, its output discarded; killed on the way out if
    it still runs (a test kills it itself with ``sigkill``)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "dispatcher", env=dict(env),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
    try:
        yield proc
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def sigkill(proc: asyncio.subprocess.Process) -> None:
    """SIGKILL ``proc`` and wait (10 s at most) until it is gone."""
    proc.send_signal(signal.SIGKILL)
    await asyncio.wait_for(proc.wait(), 10)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def wait_ready(url: str, proc: asyncio.subprocess.Process, timeout_s: float = 30) -> None:
    """Until ``url``/readyz answers 200; raises (with the process's output, if it exited and
    its stdout is a pipe) if it does not within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    async with aiohttp.ClientSession() as http:
        while time.monotonic() < deadline and proc.returncode is None:
            try:
                async with http.get(url + "/readyz") as resp:
                    if resp.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.2)
    out = (await proc.stdout.read()).decode() if proc.returncode is not None and proc.stdout \
        else ""
    raise AssertionError(f"API on {url} not ready (exit {proc.returncode}):\n{out[-3000:]}")
