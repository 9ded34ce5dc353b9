"""One caller cannot stall another, on the real stack: while caller B sends the costliest
``when`` phrases, RRULEs that never match and impossible crons (single, previewed, patched
and 1,000 to a batch, Idempotency-Keys replayed), caller A's registrations are answered 201,
and every one of B's requests is answered with a clear 4xx (a preview of a rule that never
matches: no occurrences) — never a 5xx, never a stall.

The API runs in this process, on this event loop: a request that held the loop for seconds
(as such strings did, up to minutes each) would hold A's requests, which then time out. The
latencies are printed, not asserted (``make bench`` measures them: docs/benchmarks.md)."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
import pytest

from tests.hostile_inputs import IMPOSSIBLE_CRONS, NEVER_RRULES, WORST_WHENS
from tests.integration.conftest import Stack

pytestmark = pytest.mark.integration

# The answer a user waits for at most: far above a healthy answer (milliseconds), far below
# what one stalled loop made A wait (30 s and more).
ANSWER_TIMEOUT_S = 10


def hostile_bodies(stack: Stack) -> list[dict[str, Any]]:
    two_days_back = (datetime.now(UTC) - timedelta(days=2)).replace(tzinfo=None)
    out = [stack.body(when=w) for w in WORST_WHENS]
    out += [stack.body(rrule=r, localTime=two_days_back.isoformat(timespec="seconds"),
                       timeZone="UTC") for r in NEVER_RRULES]
    out += [stack.body(cron=c, localTime=two_days_back.isoformat(timespec="seconds"),
                       timeZone="UTC") for c in IMPOSSIBLE_CRONS]
    return out


async def attack(stack: Stack, token: str) -> list[tuple[str, int, Any]]:
    """B's requests, all at once; each answer as (what, status, body)."""
    client, auth = stack.client, stack.auth(token)

    async def send(what: str, method: str, path: str, body: Any,
                   **headers: str) -> tuple[str, int, Any]:
        async with client.request(method, path, json=body, headers={**auth, **headers},
                                  timeout=aiohttp.ClientTimeout(total=60)) as resp:
            return what, resp.status, await resp.json()

    bodies = hostile_bodies(stack)
    sends = [send(f"create {b}", "POST", "/v1/triggers", b) for b in bodies]
    sends += [send(f"preview {b}", "POST", "/v1/triggers/preview", {**b, "count": 3})
              for b in bodies]
    sends += [send(f"replayed key {i}", "POST", "/v1/triggers", b, **{"Idempotency-Key": "k1"})
              for i, b in enumerate(bodies * 2)]
    items = [bodies[i % len(bodies)] for i in range(1000)]
    sends.append(send("batch of 1,000", "POST", "/v1/triggers/batch", {"items": items}))
    return list(await asyncio.gather(*sends))


async def test_a_hostile_caller_neither_stalls_nor_errors_and_the_other_is_answered(
        stack: Stack) -> None:
    victim_waits_ms: list[float] = []

    async def victim() -> list[int]:
        statuses = []
        for n in range(20):
            started = time.monotonic()
            resp = await stack.client.post(
                "/v1/triggers", json=stack.body(delaySeconds=3600, payload={"n": n}),
                headers=stack.auth(), timeout=aiohttp.ClientTimeout(total=ANSWER_TIMEOUT_S))
            statuses.append(resp.status)
            await resp.read()
            victim_waits_ms.append((time.monotonic() - started) * 1000)
            await asyncio.sleep(0.05)
        return statuses

    hostile = asyncio.ensure_future(attack(stack, stack.token + "-other"))
    await asyncio.sleep(0.05)  # B's requests are in before A's first
    statuses = await victim()
    answers = await hostile
    waits = sorted(victim_waits_ms)
    print(f"A's registrations during the attack: p50 {waits[len(waits) // 2]:.0f} ms, "
          f"max {waits[-1]:.0f} ms")
    assert statuses == [201] * 20
    for what, status, body in answers:
        # A preview of a rule that never matches lists no occurrence (the empty list).
        previewed_none = what.startswith("preview") and body == {"occurrences": []}
        assert 400 <= status < 500 or (status == 200 and (
            what.startswith("batch") or previewed_none)), (what, status, body)
        if status != 200:
            assert set(body) >= {"error", "message"}, (what, body)
    batch = next(body for what, _, body in answers if what.startswith("batch"))
    if "items" in batch:
        assert all(400 <= item["status"] < 500 for item in batch["items"]), batch["items"][:3]
