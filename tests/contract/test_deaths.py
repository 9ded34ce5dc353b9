"""``DispatcherDeaths``: a declared death is read back until its TTL runs out; another
incarnation's is not; declaring again keeps it."""

from __future__ import annotations

import asyncio

from dispatcher.succession import Incarnation
from trigger_service.core.ports.deaths import DispatcherDeaths


async def test_a_declared_death_is_read_back_and_only_that_one(deaths: DispatcherDeaths) -> None:
    dead, alive = Incarnation.new().id, Incarnation.new().id
    assert not await deaths.is_dead(dead)
    await deaths.declare(dead, ttl_s=60)
    assert await deaths.is_dead(dead)
    assert not await deaths.is_dead(alive)
    await deaths.declare(dead, ttl_s=60)  # declared again: still dead
    assert await deaths.is_dead(dead)


async def test_a_death_is_forgotten_after_its_ttl(deaths: DispatcherDeaths) -> None:
    dead = Incarnation.new().id
    await deaths.declare(dead, ttl_s=1)
    assert await deaths.is_dead(dead)
    await asyncio.sleep(1.2)
    assert not await deaths.is_dead(dead)
