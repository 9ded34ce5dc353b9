"""The SSRF guard end to end on the real stack: API → Cassandra → SQS →
dispatcher → receiver.

The test caller gets, besides its receiver's explicit ``http://127.0.0.1:<port>/`` prefix,
a broad ``http://`` (any public host), an explicit ``http://named.test/`` and the big-body
receiver's explicit prefix. DNS rebinding is simulated honestly: ``rebind.test`` (a reserved
name, RFC 2606) does not resolve when the API checks it, so it is accepted; the dispatcher's
webhook channel is given a lookup in which it, and ``named.test``, resolve to the
receiver (127.0.0.1 and the receiver's port). The same lookup serves both; only the prefix
that names ``named.test`` makes the difference between delivered and refused.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
from aiohttp import web

from dispatcher.channels.guard import Answer, Lookup
from tests.integration.conftest import Receiver, Stack, serving
from trigger_service.core.dead_letters import EXCERPT_MAX_BYTES

pytestmark = pytest.mark.integration

BIG_BODY_BYTES = 10 * 1024 * 1024


class BigReceiver:
    """Answers every callback with a 200 and a 10 MB body (sent until the client hangs up)."""

    def __init__(self) -> None:
        self.port = 0
        self.calls = 0

    async def handle(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        self.calls += 1
        resp = web.StreamResponse()
        resp.content_length = BIG_BODY_BYTES
        await resp.prepare(request)
        chunk = b"z" * 65536
        try:
            for _ in range(BIG_BODY_BYTES // len(chunk)):
                await resp.write(chunk)
        except (ConnectionError, RuntimeError):
            pass  # the dispatcher read its 64 KiB and closed: expected
        return resp


@pytest.fixture
async def big() -> AsyncIterator[BigReceiver]:
    async with serving(BigReceiver()) as rec:
        yield rec


@pytest.fixture
def extra_prefixes(big: BigReceiver) -> tuple[str, ...]:
    return ("http://", "http://named.test/", f"http://127.0.0.1:{big.port}/")


def to_receiver(receiver: Receiver) -> Lookup:
    """rebind.test and named.test → the receiver; anything else does not resolve."""
    async def lookup(host: str, port: int, family: socket.AddressFamily) -> Sequence[Answer]:
        if host in ("rebind.test", "named.test"):
            return [(socket.AF_INET, "127.0.0.1", receiver.port)]
        raise socket.gaierror(socket.EAI_NONAME, f"{host}: no such name")
    return lookup


async def post(stack: Stack, url: str) -> tuple[int, Any]:
    status, body, _ = await stack.post({"callbackUrl": url, "delaySeconds": 1})
    return status, body


async def test_a_broad_caller_cannot_register_loopback(stack: Stack) -> None:
    port = stack.receiver.port
    for url, why in [(f"http://localhost:{port}/cb", "not under any callback prefix"),
                     ("http://localhost/cb", "localhost"),
                     ("http://sub.localhost/cb", "localhost"),
                     ("http://2130706433/cb", "loopback"),
                     ("http://127.1/cb", "loopback"),
                     ("http://[::ffff:127.0.0.1]/cb", "IPv4-mapped"),
                     ("http://169.254.169.254/latest/meta-data/", "link-local"),
                     ("http://100.64.0.1/", "CGNAT"),
                     ("http://10.0.0.1/", "private")]:
        status, body = await post(stack, url)
        assert (status, body["error"]) == (422, "callback_not_allowed"), (url, body)
        assert why in body["message"], (url, body)
    for url in ("http://xn--a.com/", f"http://127.0.0.1:{port}/cb/..%2Fadmin"):
        status, body = await post(stack, url)
        assert (status, body["error"]) == (400, "invalid_request"), (url, body)
    # The explicit prefix still works, in any spelling of its address, stored normalised.
    status, body = await post(stack, f"http://2130706433:{port}/cb/./x")
    assert status == 201, body
    resp = await stack.client.get(f"/v1/triggers/{body['triggerId']}", headers=stack.auth())
    assert (await resp.json())["callbackUrl"] == f"http://127.0.0.1:{port}/cb/x"


async def test_a_name_rebound_to_loopback_is_refused_at_delivery(stack: Stack) -> None:
    status, rebound = await post(stack, "http://rebind.test/cb")
    assert status == 201, rebound  # it did not resolve when registered
    status, named = await post(stack, "http://named.test/cb")
    assert status == 201, named
    await stack.start_dispatcher(lookup=to_receiver(stack.receiver), max_attempts=5)
    view = await stack.wait_status(rebound["triggerId"], "FAILED", 30)
    assert view["status"] == "FAILED"
    assert (await stack.wait_status(named["triggerId"], "FIRED", 30))["status"] == "FIRED"
    rec = stack.receiver
    assert [a.trigger_id for a in rec.arrivals] == [named["triggerId"]]
    resp = await stack.client.get("/v1/dead-letters", headers=stack.auth())
    items = (await resp.json())["items"]
    [letter] = [i for i in items if i["triggerId"] == rebound["triggerId"]]
    assert (letter["reason"], letter["attemptCount"]) == ("callback_not_allowed", 1)
    # Refused without saying where the name points (the log has it): no DNS oracle.
    assert "not allowed" in letter["lastError"]
    assert "127.0.0.1" not in letter["lastError"] and "loopback" not in letter["lastError"]


async def test_a_10_mb_answer_is_delivered_and_only_its_start_kept(stack: Stack,
                                                                   big: BigReceiver) -> None:
    await stack.start_dispatcher()
    status, body = await post(stack, f"http://127.0.0.1:{big.port}/hook")
    assert status == 201, body
    tid = body["triggerId"]
    started = time.monotonic()
    assert (await stack.wait_status(tid, "FIRED", 30))["status"] == "FIRED"
    assert big.calls == 1 and time.monotonic() - started < 20
    attempts: list[Any] = []
    for _ in range(50):  # the history is written beside the outcome
        attempts = await stack.runtime.store.attempts(tid, f"{tid}.1")
        if attempts:
            break
        await asyncio.sleep(0.1)
    [a] = attempts
    assert a.status_code == 200 and a.response_excerpt is not None
    assert len(a.response_excerpt.encode()) <= EXCERPT_MAX_BYTES
    assert set(a.response_excerpt) == {"z"}
