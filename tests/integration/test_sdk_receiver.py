"""clients/python/examples/receiver_aiohttp.py as a real callback target: the dispatcher's
signed callback is verified and processed once; the same signed request again is a
duplicate (the Redis deduplicator on the real Redis); a forged or old signed request is
refused."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import socket
import sys
import time
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType

import aiohttp
import pytest
from aiohttp import web
from standardwebhooks.webhooks import Webhook

from tests.integration.conftest import SIGNING_SECRETS, Stack
from trigger_client import AsyncTriggerClient, Status
from trigger_client.receiver import AsyncDeduplicator

pytestmark = pytest.mark.integration

EXAMPLE = Path(__file__).resolve().parents[2] / "clients/python/examples/receiver_aiohttp.py"


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("receiver_aiohttp", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


PORT = free_port()


@pytest.fixture
def extra_prefixes() -> tuple[str, ...]:
    return (f"http://127.0.0.1:{PORT}/",)


@pytest.fixture
async def example(stack: Stack) -> AsyncIterator[str]:
    dedup = AsyncDeduplicator.redis(stack.redis, ttl_s=60,
                                    prefix=f"test-example-{uuid.uuid4().hex}:")
    runner = web.AppRunner(load_example().make_app(list(SIGNING_SECRETS), dedup))
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", PORT).start()
    try:
        yield f"http://127.0.0.1:{PORT}/hook"
    finally:
        await runner.cleanup()


def signed(body: str, occurrence_id: str, at_s: float, secret: str) -> dict[str, str]:
    stamp = datetime.fromtimestamp(int(at_s), UTC)
    return {"webhook-id": occurrence_id, "webhook-timestamp": str(int(at_s)),
            "webhook-signature": Webhook(secret).sign(occurrence_id, stamp, body),
            "Content-Type": "application/json"}


async def test_the_example_receiver_verifies_and_deduplicates(
        stack: Stack, example: str, capsys: pytest.CaptureFixture[str]) -> None:
    await stack.start_dispatcher()
    async with AsyncTriggerClient(str(stack.client.make_url("")), stack.token) as sdk:
        created = await sdk.triggers.create(callback_url=example, delay_s=0.5,
                                            payload={"tour": 1})
        for _ in range(200):
            if (await sdk.triggers.get(created.trigger_id)).status is Status.FIRED:
                break
            await asyncio.sleep(0.1)
        assert (await sdk.triggers.get(created.trigger_id)).status is Status.FIRED
    occ = f"{created.trigger_id}.1"
    body = json.dumps({"triggerId": created.trigger_id, "occurrenceId": occ,
                       "payload": {"tour": 1}, "fireAt": "2026-12-01T14:00:00.000Z",
                       "scheduledAt": "2026-12-01T14:00:00.000Z"})
    async with aiohttp.ClientSession() as http:
        # the same occurrence delivered again (a retry after a lost answer): a duplicate
        again = await http.post(example, data=body,
                                headers=signed(body, occ, time.time(), SIGNING_SECRETS[1]))
        forged = await http.post(example, data=body,
                                 headers=signed(body, occ, time.time(), "whsec_" + "A" * 44))
        old = await http.post(example, data=body, headers=signed(
            body, f"{occ}x", time.time() - 600, SIGNING_SECRETS[0]))
    assert (again.status, forged.status, old.status) == (200, 401, 401)
    lines = capsys.readouterr().out.splitlines()
    assert [x for x in lines if x.startswith(occ)] == [
        f"{occ} attempt=1 payload={{'tour': 1}}", f"{occ} duplicate (attempt 1): skipped"]
