"""The guarded server on a real local socket (no other service needed): the request-head
deadline, the body deadline, the connection cap, and aiohttp's own errors as JSON."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any

import pytest
from aiohttp import web

from tests.fake_runtime import fake_runtime
from tests.unit.app.support import make_env
from trigger_service.adapters.memory.store import MemoryLease
from trigger_service.config.callers import CallerRegistry, hash_token
from trigger_service.config.limits import LimitSettings
from trigger_service.http.app import build_app
from trigger_service.http.server import GuardedAppRunner

LIMITS = LimitSettings(header_timeout_s=0.3, body_timeout_s=0.3, keepalive_timeout_s=5,
                       max_connections=4, max_field_bytes=1000, max_headers=20)
CALLERS = CallerRegistry.from_mapping({"callers": {"c": {
    "token_sha256": hash_token("tok"), "callback_prefixes": ["http://127.0.0.1:9000/"]}}})


@asynccontextmanager
async def guarded_port(limits: LimitSettings, callers: CallerRegistry) -> AsyncIterator[int]:
    """The API on the fakes behind its own guarded runner (``limits``), on a free local
    port: the port."""
    env = make_env()
    settings = replace(env.settings, limits=limits)
    runtime = fake_runtime(settings, callers, env.store, env.queue, env.cache,
                           MemoryLease(env.clock, 10_000), env.clock, env.metrics)
    runner = GuardedAppRunner(build_app(runtime, env.service), limits, env.metrics,
                              access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield int(runner.addresses[0][1])
    finally:
        await runner.cleanup()


@pytest.fixture
async def port() -> AsyncIterator[int]:
    async with guarded_port(LIMITS, CALLERS) as bound:
        yield bound


async def exchange(port: int, data: bytes, *, pause_s: float = 0.0,
                   ) -> tuple[int, dict[str, str], Any]:
    """Send ``data`` (then wait ``pause_s``), read the whole answer until the server closes."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        await asyncio.sleep(pause_s)
        raw = await asyncio.wait_for(reader.read(), timeout=5)
    finally:
        writer.close()
    return parse(raw)


def parse(raw: bytes) -> tuple[int, dict[str, str], Any]:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), {k.lower(): v for k, v in headers.items()}, json.loads(body)


async def test_a_connection_that_stalls_in_its_head_gets_408_and_is_closed(port: int) -> None:
    status, headers, body = await exchange(port, b"GET /healthz HT")
    assert status == 408 and body["error"] == "request_timeout"
    assert set(body) == {"error", "message"} and headers["connection"] == "close"
    assert len(headers["x-request-id"]) == 16


async def test_a_slow_body_gets_408_and_is_closed(port: int) -> None:
    head = (b"POST /v1/triggers HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok\r\n"
            b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"a\":")
    status, headers, body = await exchange(port, head)
    assert status == 408 and body == {
        "error": "request_timeout", "message": "the request body did not arrive within 0.3 s"}
    assert "x-request-id" in headers


async def test_a_kept_alive_connection_outlives_the_head_deadline(port: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for _ in range(2):
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            line = await asyncio.wait_for(reader.readline(), timeout=5)
            assert line.startswith(b"HTTP/1.1 200")
            await asyncio.wait_for(reader.readuntil(b'{"status": "ok"}'), timeout=5)
            await asyncio.sleep(0.5)  # longer than the head deadline
    finally:
        writer.close()


@pytest.mark.parametrize("header", [b"X-Big: " + b"a" * 2000, b"X-" + b"b" * 9000 + b": 1"])
async def test_oversized_headers_are_431_json(port: int, header: bytes) -> None:
    status, headers, body = await exchange(
        port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + header + b"\r\n\r\n")
    assert status == 431 and body["error"] == "headers_too_large"
    assert set(body) == {"error", "message"} and "x-request-id" in headers


async def test_too_many_headers_or_garbage_are_400_json(port: int) -> None:
    many = b"".join(b"X-%d: 1\r\n" % i for i in range(30))
    status, _, body = await exchange(port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + many
                                     + b"\r\n")
    assert status == 400 and body["error"] == "invalid_request"
    status, _, body = await exchange(port, b"\x16\x03\x01 not http\r\n\r\n")
    assert status == 400 and body == {"error": "invalid_request",
                                      "message": "malformed HTTP request"}


async def test_connections_over_the_cap_are_refused_503_at_once(port: int) -> None:
    held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(LIMITS.max_connections)]
    try:
        await asyncio.sleep(0.05)
        status, _, body = await exchange(port, b"")
        assert status == 503 and body["error"] == "too_many_connections"
    finally:
        for _, writer in held:
            writer.close()
    await asyncio.sleep(0.1)
    status, _, body = await exchange(port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n"
                                           b"Connection: close\r\n\r\n")
    assert status == 200 and body == {"status": "ok"}
