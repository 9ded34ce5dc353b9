"""A dispatcher's incarnation, its slot file and the declaration of its predecessor's death
(``dispatcher.succession``)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from dispatcher.claim_keeping import TAKEOVER_MARGIN_MS
from dispatcher.succession import (
    DECLARE_EVERY_S,
    DECLARE_FOR_S,
    Incarnation,
    Slot,
    Succession,
    incarnation_of,
)
from tests.unit.dispatcher.fakes import settle
from trigger_service.adapters.memory.deaths import MemoryDispatcherDeaths
from trigger_service.core.errors import CacheError
from trigger_service.core.time.clock import ManualClock
from trigger_service.platform.metrics import InMemoryMetrics

pytestmark = pytest.mark.timeout(20)


def test_a_claim_id_names_its_incarnation() -> None:
    life = Incarnation.new()
    ids = {life.claim_id() for _ in range(1_000)}
    assert len(ids) == 1_000
    assert {incarnation_of(i) for i in ids} == {life.id}
    assert Incarnation.new().id != life.id
    # Claim ids of before, and of tests: no incarnation, never proved dead.
    assert incarnation_of("0123456789abcdef0123456789abcdef") is None
    assert incarnation_of("claim-1") is None and incarnation_of(None) is None


def test_the_next_process_to_lock_a_slot_finds_the_last_holder(tmp_path: Path) -> None:
    path = str(tmp_path / "dispatcher-1.slot")
    first, second = Incarnation.new(), Incarnation.new()
    held = Slot.take(path, first)
    assert held is not None and held.predecessor is None
    # While it is held (the process alive), nobody else gets it, and the file is unchanged.
    assert Slot.take(path, second) is None
    assert Path(path).read_text() == first.id
    held.release()  # the process is gone
    after = Slot.take(path, second)
    assert after is not None and after.predecessor == first.id
    assert Path(path).read_text() == second.id
    after.release()


def test_a_slot_file_without_an_incarnation_names_no_predecessor(tmp_path: Path) -> None:
    path = tmp_path / "slot"
    path.write_text("not an incarnation\n")
    held = Slot.take(str(path), Incarnation.new())
    assert held is not None and held.predecessor is None
    held.release()


class FailingDeaths(MemoryDispatcherDeaths):
    """Redis away for the first ``failures`` declarations."""

    def __init__(self, clock: ManualClock, failures: int) -> None:
        super().__init__(clock)
        self.failures = failures

    async def declare(self, incarnation: str, ttl_s: int) -> None:
        if self.failures:
            self.failures -= 1
            raise CacheError("redis away")
        await super().declare(incarnation, ttl_s)


async def test_the_successor_declares_its_predecessor_dead_after_the_margin_and_again(
        tmp_path: Path) -> None:
    clock = ManualClock()
    deaths = FailingDeaths(clock, failures=1)
    path = str(tmp_path / "slot")
    dead = Incarnation.new()
    Slot.take(path, dead).release()  # type: ignore[union-attr]
    metrics = InMemoryMetrics()
    heir = Succession(deaths, clock, metrics)
    heir.take_slot(path)
    assert heir.slot is not None and heir.slot.predecessor == dead.id
    stop = asyncio.Event()
    task = asyncio.create_task(heir.run(stop))
    await settle()
    clock.advance_ms(TAKEOVER_MARGIN_MS - 1)
    await settle()
    assert not await deaths.is_dead(dead.id)  # not before the kernel flushed its requests
    clock.advance_ms(1)
    await settle()
    assert not await deaths.is_dead(dead.id)  # Redis was away: declared at the next round
    clock.advance_ms(DECLARE_EVERY_S * 1000)
    await settle()
    assert await deaths.is_dead(dead.id)
    assert await heir.proven_dead(f"{dead.id}.0123456789abcdef")
    assert not await heir.proven_dead(heir.claim_id())
    # Past the rounds, the record still outlives the last declaration.
    clock.advance_ms(DECLARE_FOR_S * 1000)
    await settle()
    assert await deaths.is_dead(dead.id)
    stop.set()
    await asyncio.wait_for(task, 5)
    assert metrics.snapshot()["dispatcher_deaths_declared_total"] >= 1
    heir.release()


async def test_without_a_slot_nothing_is_declared_and_stop_ends_the_wait(tmp_path: Path) -> None:
    clock = ManualClock()
    deaths = MemoryDispatcherDeaths(clock)
    lone = Succession(deaths, clock, InMemoryMetrics())
    lone.take_slot("")
    assert lone.slot is None
    await asyncio.wait_for(lone.run(asyncio.Event()), 1)  # nothing to declare: returns
    path = str(tmp_path / "slot")
    Slot.take(path, Incarnation.new()).release()  # type: ignore[union-attr]
    heir = Succession(deaths, clock, InMemoryMetrics())
    heir.take_slot(path)
    stop = asyncio.Event()
    task = asyncio.create_task(heir.run(stop))
    await settle()
    stop.set()  # stopped within the margin: returns, declares nothing
    await asyncio.wait_for(task, 1)
    assert heir.slot is not None and not await deaths.is_dead(heir.slot.predecessor or "")
    heir.release()


class CountingDeaths(MemoryDispatcherDeaths):
    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock)
        self.reads = 0

    async def is_dead(self, incarnation: str) -> bool:
        self.reads += 1
        return await super().is_dead(incarnation)


async def test_a_claimer_found_alive_is_asked_about_again_a_second_later() -> None:
    """Many watched claims of one claimer cost a read a second; a death declared meanwhile
    is seen at the next one, and then without reads."""
    clock = ManualClock()
    deaths = CountingDeaths(clock)
    watcher = Succession(deaths, clock, InMemoryMetrics())
    claims = [f"{'a' * 16}.{i:016x}" for i in range(50)]
    assert not any([await watcher.proven_dead(c) for c in claims])
    assert deaths.reads == 1
    await deaths.declare("a" * 16, ttl_s=600)
    clock.advance_ms(999)
    assert not await watcher.proven_dead(claims[0]) and deaths.reads == 1
    clock.advance_ms(1)
    assert all([await watcher.proven_dead(c) for c in claims])
    assert deaths.reads == 2
    assert not await watcher.proven_dead(f"{'b' * 16}.{0:016x}") and deaths.reads == 3
