"""``Readiness``: one check at a time, shared by the requests that come while it runs, and
its answer kept for a second of the injected clock."""

from __future__ import annotations

import asyncio

from trigger_service.core.errors import CacheError
from trigger_service.core.time.clock import ManualClock
from trigger_service.http.readiness import READY_CACHE_MS, Readiness

NOW_MS = 1_700_000_000_000


class SlowPing:
    """A dependency whose ping waits for ``gate`` and fails while ``down`` is set."""

    def __init__(self) -> None:
        self.calls = 0
        self.gate = asyncio.Event()
        self.gate.set()
        self.down = False

    async def ping(self) -> None:
        self.calls += 1
        await self.gate.wait()
        if self.down:
            raise CacheError("refused")


async def settle() -> None:
    """Let every ready task run until each waits (the checks reach their ping)."""
    for _ in range(20):
        await asyncio.sleep(0)


async def test_concurrent_requests_share_one_check() -> None:
    clock = ManualClock(NOW_MS)
    redis, sqs = SlowPing(), SlowPing()
    redis.gate.clear()
    readiness = Readiness(clock, {"redis": redis, "sqs": sqs})
    waiting = [asyncio.create_task(readiness.down()) for _ in range(20)]
    await settle()
    assert redis.calls == sqs.calls == 1  # one check in flight, whoever asks
    redis.down = True
    redis.gate.set()
    assert await asyncio.gather(*waiting) == [["redis"]] * 20
    assert redis.calls == 1


async def test_the_answer_stands_for_a_second_then_is_checked_again() -> None:
    clock = ManualClock(NOW_MS)
    redis = SlowPing()
    readiness = Readiness(clock, {"redis": redis})
    assert await readiness.down() == []
    redis.down = True
    clock.advance_ms(READY_CACHE_MS - 1)
    assert await readiness.down() == [] and redis.calls == 1
    clock.advance_ms(1)
    assert await readiness.down() == ["redis"] and redis.calls == 2


async def test_a_request_that_goes_away_does_not_cancel_the_shared_check() -> None:
    clock = ManualClock(NOW_MS)
    redis = SlowPing()
    redis.gate.clear()
    readiness = Readiness(clock, {"redis": redis})
    first = asyncio.create_task(readiness.down())
    second = asyncio.create_task(readiness.down())
    await settle()
    first.cancel()
    redis.gate.set()
    assert await second == [] and redis.calls == 1
