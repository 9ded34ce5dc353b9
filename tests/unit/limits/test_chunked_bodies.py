"""A chunked body (no Content-Length to refuse up front) on the guarded server on a real local
socket: refused as soon as it passes its route's size, and never read at all on a path no
route takes or without a token. The client's body is a generator that stops when the
answer arrives, so how far it got is what the server took before answering."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest

from tests.unit.app.support import CALLBACK
from tests.unit.limits.test_server import guarded_port
from trigger_service.config.callers import CallerRegistry, hash_token
from trigger_service.config.limits import LimitSettings
from trigger_service.http.app import MAX_BODY_BYTES

# A body deadline far longer than reading 8 MiB takes: only the size may stop the reading.
LIMITS = LimitSettings(body_timeout_s=30)
CALLERS = CallerRegistry.from_mapping({"callers": {"c": {
    "token_sha256": hash_token("tok"), "callback_prefixes": ["http://127.0.0.1:9000/"]}}})
AUTH = {"Authorization": "Bearer tok", "Content-Type": "application/json"}
CHUNK = 64 * 1024
EIGHT_MIB = 8 * 1024 * 1024


@pytest.fixture
async def base_url() -> AsyncIterator[str]:
    async with guarded_port(LIMITS, CALLERS) as port:
        yield f"http://127.0.0.1:{port}"


@dataclass
class Sent:
    status: int
    body: Any
    sent: int  # bytes the generator had handed over when the answer arrived


async def send_chunked(method: str, url: str, headers: dict[str, str],
                       total: int = EIGHT_MIB, first: bytes = b"") -> Sent:
    """``first``, then spaces up to ``total`` bytes in 64 KiB chunks, a few ms apart (a
    server that reads it all takes a while), chunked; stops once the answer is in."""
    answered = asyncio.Event()
    sent = 0

    async def body() -> AsyncIterator[bytes]:
        nonlocal sent
        while sent < total and not answered.is_set():
            chunk = (first if sent == 0 and first else b" " * min(CHUNK, total - sent))
            sent += len(chunk)
            yield chunk
            await asyncio.sleep(0.005)

    async with aiohttp.ClientSession() as session, session.request(
            method, url, data=body(), headers=headers) as resp:
        answered.set()
        at_answer = sent
        payload = await resp.json()
        return Sent(resp.status, payload, at_answer)


@pytest.mark.parametrize(("method", "path", "headers", "status", "code"), [
    ("POST", "/v1/triggers", AUTH, 413, "payload_too_large"),
    ("POST", "/ack/some.link.token", {}, 413, "payload_too_large"),
    ("POST", "/nope", {}, 404, "not_found"),
    ("POST", "/v1/nope", AUTH, 404, "not_found"),
    ("PUT", "/v1/triggers", AUTH, 405, "method_not_allowed"),
    ("POST", "/v1/triggers", {"Authorization": "Bearer wrong"}, 401, "unauthorized"),
], ids=["over the route's size", "ack link", "unknown path", "unknown /v1 path",
        "wrong method", "no token"])
async def test_a_chunked_8_mib_body_is_refused_early(base_url: str, method: str, path: str,
                                                     headers: dict[str, str], status: int,
                                                     code: str) -> None:
    got = await send_chunked(method, base_url + path, headers)
    assert (got.status, got.body["error"]) == (status, code), got
    assert set(got.body) == {"error", "message"}
    # 64 KiB read at most, 128 KiB buffered: the answer comes long before 8 MiB were sent.
    assert got.sent <= 1024 * 1024, got.sent


async def test_a_chunked_body_within_its_size_is_read_whole(base_url: str) -> None:
    body = f'{{"callbackUrl": "{CALLBACK}", "delaySeconds": 60, "payload": "'.encode()
    raw = body + b"x" * 1000 + b'"}'
    got = await send_chunked("POST", base_url + "/v1/triggers", AUTH, len(raw), raw)
    assert got.status == 201, got
    # The batch create's size is its own (8 MiB): 1 MiB of a batch is read, then judged.
    got = await send_chunked("POST", base_url + "/v1/triggers/batch", AUTH, MAX_BODY_BYTES * 16,
                             b'{"items": [')
    assert (got.status, got.body["error"]) == (400, "invalid_request"), got
    assert got.sent == MAX_BODY_BYTES * 16
