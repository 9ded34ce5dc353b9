"""``SecretStore`` (``MemoryStore``, ``CassandraStore``) against one contract: a read takes the
newest ``limit`` secrets, newest first; ``retire_secrets`` deletes the ones made before a
millisecond (idempotent); and concurrent rotations of one caller, every one stored before any
reads, leave at most ``max_live`` secrets stored (each rotation retires below the oldest one
that signs of what it reads after its own write)."""

from __future__ import annotations

import asyncio

import pytest

from tests.contract.support import unique
from trigger_service.adapters.cassandra.store import CassandraStore
from trigger_service.adapters.memory.limits import MemoryRateLimiter
from trigger_service.adapters.memory.store import MemoryStore
from trigger_service.app.signing import RotationPolicy, SigningSecrets
from trigger_service.core.ports import SecretStore
from trigger_service.core.time.clock import ManualClock

T0 = 1_700_000_000_000
ROTATIONS = 6


@pytest.fixture(params=[pytest.param("memory"),
                        pytest.param("cassandra", marks=pytest.mark.integration)])
def secrets(request: pytest.FixtureRequest) -> SecretStore:
    if request.param == "memory":
        return MemoryStore()
    real: CassandraStore = request.getfixturevalue("cassandra_store")
    return real


async def test_a_read_takes_the_newest_and_retire_deletes_the_older(secrets: SecretStore) -> None:
    caller = unique("sec-")
    for n in range(5):
        assert await secrets.add_secret(caller, T0 + n, f"whsec_{n}") == T0 + n
    assert await secrets.secrets(caller, 2) == [(T0 + 4, "whsec_4"), (T0 + 3, "whsec_3")]
    await secrets.retire_secrets(caller, T0 + 3)
    await secrets.retire_secrets(caller, T0 + 3)  # idempotent
    assert await secrets.secrets(caller, 10) == [(T0 + 4, "whsec_4"), (T0 + 3, "whsec_3")]
    assert await secrets.secrets(unique("sec-"), 10) == []


class AddsFirst:
    """A ``SecretStore`` whose reads wait until ``n`` secrets were added: the rotations
    given to it all write before any of them reads (the worst interleaving for the cap)."""

    def __init__(self, inner: SecretStore, n: int) -> None:
        self._inner = inner
        self._n = n
        self._all_added = asyncio.Event()

    async def add_secret(self, caller: str, created_at_ms: int, secret: str) -> int:
        ms = await self._inner.add_secret(caller, created_at_ms, secret)
        self._n -= 1
        if self._n == 0:
            self._all_added.set()
        return ms

    async def secrets(self, caller: str, limit: int) -> list[tuple[int, str]]:
        await self._all_added.wait()
        return await self._inner.secrets(caller, limit)

    async def retire_secrets(self, caller: str, before_ms: int) -> None:
        await self._inner.retire_secrets(caller, before_ms)


@pytest.mark.timeout(30)
async def test_concurrent_rotations_leave_at_most_max_live_stored(secrets: SecretStore) -> None:
    caller = unique("sec-")
    clock = ManualClock(T0)  # every rotation in the same millisecond: each takes the next
    policy = RotationPolicy(overlap_s=86_400, max_live=3, rotations_per_minute=ROTATIONS)
    book = SigningSecrets(AddsFirst(secrets, ROTATIONS), clock, MemoryRateLimiter(clock),
                          policy)
    rotated = await asyncio.gather(*(book.rotate(caller) for _ in range(ROTATIONS)))
    newest = sorted(((r.created_at_ms, r.secret) for r in rotated), reverse=True)
    assert len({ms for ms, _ in newest}) == ROTATIONS  # none lost
    assert await secrets.secrets(caller, 100) == newest[:policy.max_live]
