"""Tests for sweeper.timing_wheel: unit cases, properties against a reference model, driver."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple
from unittest.mock import patch

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sweeper import timing_wheel
from sweeper.timing_wheel import Expired, TimingWheel
from sweeper.wheel_driver import WheelDriver
from tests.unit.sweeper.wheel_invariants import check_invariants
from trigger_service.core.time.clock import ManualClock

START_MS = 1_700_000_000_000  # a multiple of every tick used here
SECOND_MS = 1_000
HOUR_MS = 3_600 * SECOND_MS
DAY_MS = 24 * HOUR_MS


def keys_of(batch: Sequence[Expired[object]]) -> list[str]:
    return [e.key for e in batch]


def assert_sorted(batch: Sequence[Expired[object]]) -> None:
    deadlines = [e.deadline_ms for e in batch]
    assert deadlines == sorted(deadlines)


@dataclass
class Model:
    """The obviously-correct reference: a dict of live timers, sorted on demand."""

    now_ms: int
    timers: dict[str, tuple[int, int, int]] = field(default_factory=dict)  # deadline, value, added

    def advance(self, now_ms: int) -> list[tuple[int, str, int]]:
        self.now_ms = max(self.now_ms, now_ms)
        due = sorted(
            (deadline_ms, key, value)
            for key, (deadline_ms, value, _) in self.timers.items()
            if deadline_ms <= self.now_ms
        )
        for _, key, _ in due:
            del self.timers[key]
        return due


# -- unit tests ---------------------------------------------------------------------------------


def test_rejects_bad_geometry() -> None:
    with pytest.raises(ValueError):
        TimingWheel[str](tick_ms=0)
    with pytest.raises(ValueError):
        TimingWheel[str](wheel_size=1)


def test_basic_expiry() -> None:
    wheel = TimingWheel[str](tick_ms=10, wheel_size=512, start_ms=START_MS)
    wheel.add("a", START_MS + 25, "A")
    wheel.add("b", START_MS + 5, "B")
    assert len(wheel) == 2 and "a" in wheel and "b" in wheel and "c" not in wheel

    assert wheel.advance(START_MS + 4) == []
    assert wheel.advance(START_MS + 5) == [Expired("b", START_MS + 5, "B")]
    assert "b" not in wheel and len(wheel) == 1
    assert wheel.advance(START_MS + 24) == []
    assert wheel.advance(START_MS + 30) == [Expired("a", START_MS + 25, "A")]
    assert len(wheel) == 0 and wheel.now_ms == START_MS + 30
    assert wheel.advance(START_MS + 10_000) == []


def test_never_before_deadline_exact_to_the_ms() -> None:
    wheel = TimingWheel[int](tick_ms=10, wheel_size=8, start_ms=START_MS)
    offsets_ms = [1, 9, 10, 11, 79, 80, 81, 640, 641, 5_119, 5_120, 5_121, 40_961]
    for offset_ms in offsets_ms:
        wheel.add(f"t{offset_ms}", START_MS + offset_ms, offset_ms)
    fired_at: dict[int, int] = {}
    for now_ms in range(START_MS, START_MS + 41_000):
        for expired in wheel.advance(now_ms):
            fired_at[expired.value] = now_ms
    assert fired_at == {offset_ms: START_MS + offset_ms for offset_ms in offsets_ms}


def test_at_most_one_tick_late_when_advanced_every_tick() -> None:
    tick_ms = 10
    wheel = TimingWheel[int](tick_ms=tick_ms, wheel_size=16, start_ms=START_MS)
    rng = random.Random(7)
    deadlines_ms = {f"t{i}": START_MS + rng.randrange(1, 20_000) for i in range(2_000)}
    for key, deadline_ms in deadlines_ms.items():
        wheel.add(key, deadline_ms, 0)
    seen: set[str] = set()
    now_ms = START_MS + 3  # deliberately not on a tick boundary
    while len(wheel):
        batch = wheel.advance(now_ms)
        assert_sorted(batch)
        for expired in batch:
            assert expired.deadline_ms <= now_ms < expired.deadline_ms + tick_ms
            seen.add(expired.key)
        now_ms += tick_ms
    assert seen == set(deadlines_ms)


def test_reinsert_replaces_earlier_and_later() -> None:
    wheel = TimingWheel[str](tick_ms=10, wheel_size=8, start_ms=START_MS)
    wheel.add("k", START_MS + 100, "old")
    wheel.add("k", START_MS + 50, "new")
    assert len(wheel) == 1
    assert wheel.advance(START_MS + 10_000) == [Expired("k", START_MS + 50, "new")]

    # Moving a deadline later must not leave the earlier one behind (a different level, too).
    wheel.add("k", START_MS + 10_050, "first")
    wheel.add("k", START_MS + 10_000 + DAY_MS, "second")
    assert wheel.advance(START_MS + 20_000) == []
    assert wheel.advance(START_MS + 10_000 + DAY_MS) == [
        Expired("k", START_MS + 10_000 + DAY_MS, "second")
    ]

    # Re-adding the same deadline still yields a single expiry with the newest value.
    wheel.add("k", wheel.now_ms + 5, "x")
    wheel.add("k", wheel.now_ms + 5, "y")
    assert keys_of(wheel.advance(wheel.now_ms + 5)) == ["k"]
    check_invariants(wheel)


def test_cancel() -> None:
    wheel = TimingWheel[str](tick_ms=10, wheel_size=8, start_ms=START_MS)
    wheel.add("a", START_MS + 20, "A")
    wheel.add("b", START_MS + 20, "B")
    wheel.add("far", START_MS + DAY_MS, "F")
    assert wheel.cancel("a") is True
    assert wheel.cancel("a") is False
    assert wheel.cancel("never-added") is False
    assert wheel.cancel("far") is True
    assert "a" not in wheel and len(wheel) == 1
    assert wheel.advance(START_MS + 2 * DAY_MS) == [Expired("b", START_MS + 20, "B")]
    assert wheel.cancel("b") is False  # already expired
    check_invariants(wheel)


def test_cancel_then_readd_expires_once_with_new_deadline() -> None:
    wheel = TimingWheel[str](tick_ms=10, wheel_size=8, start_ms=START_MS)
    wheel.add("k", START_MS + 30, "v1")
    wheel.cancel("k")
    wheel.add("k", START_MS + 60, "v2")
    assert wheel.advance(START_MS + 59) == []
    assert wheel.advance(START_MS + 60) == [Expired("k", START_MS + 60, "v2")]


def test_overflow_levels_and_cascading() -> None:
    wheel = TimingWheel[int](tick_ms=10, wheel_size=8, start_ms=START_MS)
    offsets_ms = [
        5,
        75,
        85,  # just past level 0 (80 ms)
        700,  # level 1 spans 640 ms
        SECOND_MS,
        HOUR_MS,
        HOUR_MS + 1,
        DAY_MS,
        3 * DAY_MS,
        3 * DAY_MS + 7,
    ]
    for i, offset_ms in enumerate(offsets_ms):
        wheel.add(f"t{i}", START_MS + offset_ms, offset_ms)
    # 10 ms * 8**k: three days needs level 8; anything past level 2 proves lazy overflow levels.
    assert wheel.levels >= 3
    check_invariants(wheel)

    # Uneven steps, some landing mid-bucket, so timers cascade through every level.
    rng = random.Random(1)
    now_ms = START_MS
    fired: list[int] = []
    while now_ms < START_MS + 4 * DAY_MS:
        now_ms += rng.choice([1, 7, 10, 333, 5_000, 600_000, 7 * HOUR_MS])
        batch = wheel.advance(now_ms)
        for expired in batch:
            assert expired.deadline_ms <= now_ms
            assert expired.deadline_ms > now_ms - 7 * HOUR_MS  # not held back past a step
        fired.extend(e.value for e in batch)
        check_invariants(wheel)
    assert fired == sorted(offsets_ms)
    assert len(wheel) == 0


def test_cascade_is_exact_at_higher_level_boundaries() -> None:
    tick_ms, size = 10, 8
    wheel = TimingWheel[int](tick_ms=tick_ms, wheel_size=size, start_ms=START_MS)
    # Deadlines straddling the level-1 and level-2 bucket edges.
    level1_ms, level2_ms = tick_ms * size, tick_ms * size * size
    offsets_ms = sorted(
        {
            edge + d
            for edge in (level1_ms, 2 * level1_ms, level2_ms, 3 * level2_ms)
            for d in (-1, 0, 1)
        }
    )
    for offset_ms in offsets_ms:
        wheel.add(f"t{offset_ms}", START_MS + offset_ms, offset_ms)
    for offset_ms in offsets_ms:
        assert wheel.advance(START_MS + offset_ms - 1) == []
        assert [e.value for e in wheel.advance(START_MS + offset_ms)] == [offset_ms]
        check_invariants(wheel)


def test_long_jump_cascade_does_not_mix_buckets() -> None:
    # tick 1, size 4: level 0 holds (0, 3], level 1 up to 12, level 2's first bucket (0, 16].
    wheel = TimingWheel[int](tick_ms=1, wheel_size=4, start_ms=0)
    wheel.add("near", 3, 3)  # level 0, slot 3
    wheel.add("far", 15, 15)  # level 2; on a jump to 14 it cascades into level 0, slot 15 % 4 == 3
    assert keys_of(wheel.advance(14)) == ["near"]
    check_invariants(wheel)
    assert wheel.advance(14) == []
    assert keys_of(wheel.advance(15)) == ["far"]


def test_random_jumps_match_reference() -> None:
    # Many more concurrent timers than the property tests use, with jumps of every size.
    rng = random.Random(11)
    for wheel_size in (4, 5, 8):
        tick_ms = rng.randint(1, 10)
        wheel = TimingWheel[int](tick_ms=tick_ms, wheel_size=wheel_size, start_ms=START_MS)
        model = Model(now_ms=START_MS)
        for step in range(300):
            for _ in range(rng.randint(0, 20)):
                key = f"k{rng.randrange(400)}"
                level = rng.randint(0, 5)
                deadline_ms = model.now_ms + rng.randint(-tick_ms, tick_ms * wheel_size**level)
                wheel.add(key, deadline_ms, step)
                model.timers[key] = (deadline_ms, step, model.now_ms)
            for _ in range(rng.randint(0, 5)):
                key = f"k{rng.randrange(400)}"
                assert wheel.cancel(key) is (model.timers.pop(key, None) is not None)
            now_ms = model.now_ms + rng.randint(0, tick_ms * wheel_size ** rng.randint(0, 5))
            got = wheel.advance(now_ms)
            assert_sorted(got)
            assert sorted((e.deadline_ms, e.key, e.value) for e in got) == model.advance(now_ms)
            assert len(wheel) == len(model.timers)
            check_invariants(wheel)


def test_long_pause_is_fast_and_complete() -> None:
    wheel = TimingWheel[int](tick_ms=10, wheel_size=512, start_ms=START_MS)
    rng = random.Random(3)
    deadlines_ms = [START_MS + rng.randrange(1, 10 * HOUR_MS) for _ in range(20_000)]
    for i, deadline_ms in enumerate(deadlines_ms):
        wheel.add(f"t{i}", deadline_ms, i)
    wheel.add("week", START_MS + 7 * DAY_MS, -1)

    started = time.perf_counter()
    batch = wheel.advance(START_MS + 12 * HOUR_MS)  # 4.3 million ticks in one call
    elapsed_s = time.perf_counter() - started
    assert elapsed_s < 1.0, f"advance over a 12 h pause took {elapsed_s:.2f} s"
    assert len(batch) == 20_000
    assert_sorted(batch)
    assert sorted(e.deadline_ms for e in batch) == sorted(deadlines_ms)
    check_invariants(wheel)

    started = time.perf_counter()
    assert keys_of(wheel.advance(START_MS + 30 * DAY_MS)) == ["week"]
    assert time.perf_counter() - started < 0.1
    assert len(wheel) == 0


def test_deadline_in_the_past_expires_on_next_advance() -> None:
    wheel = TimingWheel[str](tick_ms=10, wheel_size=8, start_ms=START_MS)
    wheel.add("past", START_MS - 1_000, "P")
    wheel.add("now", START_MS, "N")
    wheel.add("future", START_MS + 1, "F")
    assert wheel.next_deadline_ms() == START_MS - 1_000  # already due: <= now_ms
    # Even an advance that does not move time forward delivers them, oldest first.
    assert keys_of(wheel.advance(START_MS)) == ["past", "now"]
    assert wheel.next_deadline_ms() == START_MS + 1
    assert keys_of(wheel.advance(START_MS + 1)) == ["future"]


def test_clock_stepping_back_does_not_rewind() -> None:
    wheel = TimingWheel[str](tick_ms=10, wheel_size=8, start_ms=START_MS)
    wheel.add("a", START_MS + 50, "A")
    assert wheel.advance(START_MS + 40) == []
    assert wheel.advance(START_MS + 10) == []
    assert wheel.now_ms == START_MS + 40
    wheel.add("late", START_MS + 20, "L")  # before the wheel's time: due now
    assert keys_of(wheel.advance(START_MS)) == ["late"]
    assert keys_of(wheel.advance(START_MS + 50)) == ["a"]


def test_many_timers_in_one_slot() -> None:
    wheel = TimingWheel[int](tick_ms=10, wheel_size=8, start_ms=START_MS)
    rng = random.Random(5)
    # 10_000 timers all in the level-0 bucket (START+10, START+20].
    offsets_ms = [rng.randrange(11, 21) for _ in range(10_000)]
    for i, offset_ms in enumerate(offsets_ms):
        wheel.add(f"t{i}", START_MS + offset_ms, offset_ms)
    # A mid-bucket advance takes exactly the due part and leaves the rest in place.
    first = wheel.advance(START_MS + 15)
    assert len(first) == sum(1 for o in offsets_ms if o <= 15)
    assert_sorted(first)
    check_invariants(wheel)
    rest = wheel.advance(START_MS + 20)
    assert len(rest) == sum(1 for o in offsets_ms if o > 15)
    assert_sorted(rest)
    assert len(wheel) == 0


def test_next_deadline_ms_contract() -> None:
    wheel = TimingWheel[str](tick_ms=10, wheel_size=8, start_ms=START_MS)
    assert wheel.next_deadline_ms() is None
    wheel.add("a", START_MS + 37, "A")
    bound_ms = wheel.next_deadline_ms()
    assert bound_ms is not None and START_MS < bound_ms <= START_MS + 37
    assert bound_ms > START_MS + 37 - 10  # within one level-0 tick for a level-0 timer
    wheel.add("far", START_MS + DAY_MS, "F")
    assert wheel.next_deadline_ms() == bound_ms
    wheel.cancel("a")
    bound_ms = wheel.next_deadline_ms()
    assert bound_ms is not None and START_MS < bound_ms <= START_MS + DAY_MS
    wheel.cancel("far")
    assert wheel.next_deadline_ms() is None

    # Mid-bucket: the bound moves past now_ms instead of pointing at the bucket start.
    wheel.add("b", START_MS + 58, "B")
    assert wheel.advance(START_MS + 55) == []
    bound_ms = wheel.next_deadline_ms()
    assert bound_ms is not None and START_MS + 55 < bound_ms <= START_MS + 58


def test_tombstones_are_compacted() -> None:
    wheel = TimingWheel[int](tick_ms=10, wheel_size=16, start_ms=START_MS)
    for i in range(20_000):
        wheel.add(f"t{i}", START_MS + 1 + i * 37, i)
    for i in range(15_000):
        assert wheel.cancel(f"t{i}")
    for i in range(15_000, 17_000):  # replacements leave tombstones too
        wheel.add(f"t{i}", START_MS + 5, i)
    check_invariants(wheel)
    assert wheel._dead <= len(wheel) + 4096  # bounded: memory stays O(live timers)
    fired = wheel.advance(START_MS + 20_000 * 37 + 1)
    assert sorted(e.value for e in fired) == list(range(15_000, 20_000))
    check_invariants(wheel)


# -- property tests against a reference model ---------------------------------------------------


KEYS = [f"k{i}" for i in range(16)]


class Scenario(NamedTuple):
    tick_ms: int
    wheel_size: int
    compact_floor: int
    ops: list[tuple[str, str, int]]  # (kind, key, offset or step in ms)


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    tick_ms = draw(st.integers(1, 10))
    wheel_size = draw(st.integers(4, 16))

    def spread(max_level: int) -> st.SearchStrategy[int]:
        # Offsets that land on every level up to max_level, plus exact bucket edges.
        return st.integers(0, max_level).flatmap(
            lambda level: st.one_of(
                st.integers(-tick_ms, tick_ms * wheel_size**level),
                st.integers(1, 3).map(lambda m: m * tick_ms * wheel_size**level),
            )
        )

    op = st.one_of(
        st.tuples(st.just("add"), st.sampled_from(KEYS), spread(4)),
        st.tuples(st.just("cancel"), st.sampled_from(KEYS), st.just(0)),
        st.tuples(st.just("advance"), st.just(""), spread(4).map(abs)),
        st.tuples(st.just("advance"), st.just(""), st.integers(0, 2 * tick_ms)),
    )
    ops = draw(st.lists(op, min_size=1, max_size=60))
    # A floor of 0 compacts as soon as tombstones outnumber live timers, so compaction gets
    # interleaved with everything else; 4096 (the default) never compacts at this size.
    compact_floor = draw(st.sampled_from([0, 4096]))
    return Scenario(tick_ms, wheel_size, compact_floor, ops)


@settings(max_examples=200, deadline=None)
@given(scenarios())
def test_matches_reference_model(scenario: Scenario) -> None:
    with patch.object(timing_wheel, "_COMPACT_FLOOR", scenario.compact_floor):
        check_against_model(scenario.tick_ms, scenario.wheel_size, scenario.ops)


def check_against_model(tick_ms: int, wheel_size: int, ops: list[tuple[str, str, int]]) -> None:
    wheel = TimingWheel[int](tick_ms=tick_ms, wheel_size=wheel_size, start_ms=START_MS)
    model = Model(now_ms=START_MS)
    cancelled: set[int] = set()  # values whose timer was cancelled or replaced
    for serial, (kind, key, amount) in enumerate(ops):
        if kind == "add":
            if key in model.timers:
                cancelled.add(model.timers[key][1])
            wheel.add(key, model.now_ms + amount, serial)
            model.timers[key] = (model.now_ms + amount, serial, model.now_ms)
        elif kind == "cancel":
            was_live = key in model.timers
            if was_live:
                cancelled.add(model.timers.pop(key)[1])
            assert wheel.cancel(key) is was_live
        else:
            now_ms = model.now_ms + amount
            got = wheel.advance(now_ms)
            want = model.advance(now_ms)
            # Same timers, each exactly once; equal deadlines may come out in any order.
            assert sorted((e.deadline_ms, e.key, e.value) for e in got) == want
            assert_sorted(got)
            for expired in got:
                assert expired.deadline_ms <= now_ms
                assert expired.value not in cancelled
        assert len(wheel) == len(model.timers)
        assert all((k in wheel) == (k in model.timers) for k in KEYS)
        bound_ms = wheel.next_deadline_ms()
        if not model.timers:
            assert bound_ms is None
        else:
            earliest_ms = min(d for d, _, _ in model.timers.values())
            assert bound_ms is not None and bound_ms <= earliest_ms
            if earliest_ms > model.now_ms:
                assert bound_ms > model.now_ms
        check_invariants(wheel)


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 10),
    st.integers(4, 16),
    st.lists(
        st.tuples(st.sampled_from(["add", "add", "cancel", "tick"]), st.sampled_from(KEYS)),
        max_size=80,
    ),
    st.integers(0, 9),
    st.randoms(use_true_random=False),
)
def test_tick_by_tick_at_most_one_tick_late(
    tick_ms: int,
    wheel_size: int,
    ops: list[tuple[str, str]],
    phase_ms: int,
    rng: random.Random,
) -> None:
    start_ms = START_MS + phase_ms % tick_ms  # not necessarily on a tick boundary
    wheel = TimingWheel[int](tick_ms=tick_ms, wheel_size=wheel_size, start_ms=start_ms)
    model = Model(now_ms=start_ms)
    horizon_ms = tick_ms * wheel_size**3

    def tick() -> None:
        added_at = {value: added_ms for _, value, added_ms in model.timers.values()}
        now_ms = model.now_ms + tick_ms
        got = wheel.advance(now_ms)
        assert sorted((e.deadline_ms, e.key, e.value) for e in got) == model.advance(now_ms)
        assert_sorted(got)
        for expired in got:
            assert expired.deadline_ms <= now_ms
            # Late by at most one tick, counting from when it could first have fired (a timer
            # added with a deadline already passed can only fire on the next advance).
            assert now_ms - max(expired.deadline_ms, added_at[expired.value]) <= tick_ms

    for serial, (kind, key) in enumerate(ops):
        if kind == "add":
            deadline_ms = model.now_ms + rng.randint(-tick_ms, horizon_ms)
            wheel.add(key, deadline_ms, serial)
            model.timers[key] = (deadline_ms, serial, model.now_ms)
        elif kind == "cancel":
            assert wheel.cancel(key) is (model.timers.pop(key, None) is not None)
        else:
            tick()
        assert len(wheel) == len(model.timers)
    while model.timers:  # drain tick by tick (a few thousand ticks at most)
        tick()
    assert len(wheel) == 0


# -- driver tests -------------------------------------------------------------------------------


class CountingWheel(TimingWheel[str]):
    """A wheel that counts advance calls, i.e. driver wake-ups."""

    def __init__(self, **kwargs: int) -> None:
        super().__init__(**kwargs)
        self.advances = 0

    def advance(self, now_ms: int) -> list[Expired[str]]:
        self.advances += 1
        return super().advance(now_ms)


async def settle() -> None:
    """Let every ready task run until the loop goes quiet."""
    for _ in range(20):
        await asyncio.sleep(0)


class Harness:
    def __init__(self) -> None:
        self.clock = ManualClock(START_MS)
        self.wheel = CountingWheel(tick_ms=10, wheel_size=64, start_ms=START_MS)
        self.batches: asyncio.Queue[list[Expired[str]]] = asyncio.Queue()
        self.driver = WheelDriver(self.wheel, self.clock, self.on_expired, tick_ms=10)
        self.stop = asyncio.Event()

    async def on_expired(self, batch: list[Expired[str]]) -> None:
        await self.batches.put(batch)

    async def next_batch(self) -> list[str]:
        return keys_of(await asyncio.wait_for(self.batches.get(), timeout=2))

    def start(self) -> asyncio.Task[None]:
        return asyncio.create_task(self.driver.run(self.stop))

    async def finish(self, task: asyncio.Task[None]) -> None:
        self.stop.set()
        await asyncio.wait_for(task, timeout=2)


async def test_run_once_delivers_one_batch() -> None:
    h = Harness()
    h.wheel.add("b", START_MS + 5, "B")
    h.wheel.add("a", START_MS + 4, "A")
    h.wheel.add("later", START_MS + 500, "L")
    assert await h.driver.run_once() == 0
    assert h.batches.empty()
    h.clock.advance_ms(10)
    assert await h.driver.run_once() == 2
    assert await h.next_batch() == ["a", "b"]
    assert len(h.wheel) == 1


async def test_run_expires_as_the_manual_clock_moves_and_stops() -> None:
    h = Harness()
    h.wheel.add("a", START_MS + 5, "A")
    h.wheel.add("b", START_MS + 25, "B")
    task = h.start()
    await settle()
    h.clock.advance_ms(4)
    await settle()
    assert h.batches.empty()
    h.clock.advance_ms(6)  # START+10: the tick boundary at or after a's deadline
    assert await h.next_batch() == ["a"]
    h.clock.advance_ms(20)
    assert await h.next_batch() == ["b"]
    # Idle now: moving the clock a long way must not wake the driver tick after tick.
    advances = h.wheel.advances
    for _ in range(50):
        h.clock.advance_ms(10)
        await settle()
    assert h.wheel.advances == advances
    await h.finish(task)
    assert task.done() and task.exception() is None


async def test_poke_with_an_earlier_timer_wakes_the_sleeper() -> None:
    h = Harness()
    h.wheel.add("far", START_MS + HOUR_MS, "F")
    task = h.start()
    await settle()
    # Without a poke the driver keeps sleeping towards the far timer...
    h.wheel.add("near", START_MS + 50, "N")
    h.clock.advance_ms(50)
    await settle()
    assert h.batches.empty()
    # ...a poke for a later deadline is ignored...
    advances = h.wheel.advances
    h.wheel.add("later", START_MS + 2 * HOUR_MS, "L")
    h.driver.poke(START_MS + 2 * HOUR_MS)
    await settle()
    assert h.wheel.advances == advances and h.batches.empty()
    # ...and a poke for the earlier one wakes it.
    h.driver.poke(START_MS + 50)
    assert await h.next_batch() == ["near"]
    await h.finish(task)


async def test_empty_wheel_sleeps_until_poked_or_stopped() -> None:
    h = Harness()
    task = h.start()
    await settle()
    advances = h.wheel.advances
    h.clock.advance_ms(HOUR_MS)
    await settle()
    assert h.wheel.advances == advances  # no timed wake-ups with nothing scheduled
    h.wheel.add("x", h.clock.now_ms() + 30, "X")
    h.driver.poke(h.clock.now_ms() + 30)
    await settle()
    h.clock.advance_ms(30)
    assert await h.next_batch() == ["x"]
    await h.finish(task)  # stop wakes a sleeper that has no timed wake-up


async def test_on_expired_errors_propagate_out_of_run() -> None:
    clock = ManualClock(START_MS)
    wheel = TimingWheel[str](tick_ms=10, start_ms=START_MS)

    async def explode(batch: list[Expired[str]]) -> None:
        raise RuntimeError(f"downstream failed for {keys_of(batch)}")

    driver = WheelDriver(wheel, clock, explode)
    wheel.add("a", START_MS + 10, "A")
    task = asyncio.create_task(driver.run(asyncio.Event()))
    await settle()
    clock.advance_ms(10)
    with pytest.raises(RuntimeError, match=r"\['a'\]"):
        await asyncio.wait_for(task, timeout=2)
