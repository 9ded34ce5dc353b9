"""``FlowLimiter`` and ``FlowBoard``: the in-memory fakes and the Redis scripts against one
contract. Times are given (the callers' clock), so the real one is tested at any instant."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from tests.contract.conftest import REDIS_URL, _impls
from tests.contract.support import unique
from trigger_service.adapters.memory.flow import MemoryFlowBoard, MemoryFlowLimiter
from trigger_service.adapters.redis.client import open_client
from trigger_service.adapters.redis.flow_control import RedisFlowBoard, RedisFlowLimiter
from trigger_service.core.flow import FlowScope, rate_window
from trigger_service.core.ports.flow import Admission, FlowBoard, FlowLimiter, FlowView

T0 = 1_800_000_000_000
LEASE_MS = 10_000
CALLER = "orders"


@pytest.fixture(params=_impls("memory", "redis"))
async def limiter(request: pytest.FixtureRequest) -> AsyncIterator[FlowLimiter]:
    """Keys expire by themselves and tests use unique keys: nothing needs deleting."""
    if request.param == "memory":
        yield MemoryFlowLimiter()
        return
    client = open_client(REDIS_URL)
    try:
        yield RedisFlowLimiter(client)
    finally:
        await client.aclose()


@pytest.fixture(params=_impls("memory", "redis"))
async def board(request: pytest.FixtureRequest) -> AsyncIterator[FlowBoard]:
    if request.param == "memory":
        yield MemoryFlowBoard()
        return
    client = open_client(REDIS_URL)
    try:
        yield RedisFlowBoard(client, unique("ns"))
    finally:
        await client.aclose()


async def test_a_herd_is_laid_end_to_end_from_its_due_time(limiter: FlowLimiter) -> None:
    key = FlowScope(CALLER, unique("k"))
    starts = [await limiter.reserve(key, f"m{i}", T0 + 500, 10.0, T0) for i in range(300)]
    assert starts == [T0 + 500 + 10 * i for i in range(300)]


async def test_never_before_due_nor_now(limiter: FlowLimiter) -> None:
    key = FlowScope(CALLER, unique("k"))
    assert await limiter.reserve(key, "past", T0 - 5_000, 10.0, T0) == T0
    assert await limiter.reserve(key, "later", T0 + 7_000, 10.0, T0) == T0 + 7_000


async def test_a_reservation_is_idempotent_per_member(limiter: FlowLimiter) -> None:
    key = FlowScope(CALLER, unique("k"))
    first = [await limiter.reserve(key, f"m{i}", T0, 100.0, T0) for i in range(5)]
    again = await limiter.reserve(key, "m3", T0, 100.0, T0 + 50)
    assert again == first[3] == T0 + 300
    assert await limiter.reserve(key, "m5", T0, 100.0, T0 + 50) == T0 + 500


async def test_a_gap_is_filled_only_where_a_whole_slot_fits(limiter: FlowLimiter) -> None:
    """A slot reserved far ahead leaves the earlier ones their place (never later than the
    rate needs), and a gap narrower than a slot is skipped."""
    key = FlowScope(CALLER, unique("k"))
    assert await limiter.reserve(key, "far", T0 + 950, 100.0, T0) == T0 + 950
    near = [await limiter.reserve(key, f"n{i}", T0, 100.0, T0) for i in range(10)]
    assert near[:9] == [T0 + 100 * i for i in range(9)]
    assert near[9] == T0 + 1_050  # 900..950 is narrower than a slot: after the far one
    assert await limiter.reserve(key, "gap", T0 + 920, 100.0, T0) == T0 + 1_150


async def test_fractional_widths_do_not_drift(limiter: FlowLimiter) -> None:
    key = FlowScope(CALLER, unique("k"))
    starts = [await limiter.reserve(key, f"m{i}", T0, 1000 / 3, T0) for i in range(7)]
    assert starts == [T0, T0 + 334, T0 + 667, T0 + 1000, T0 + 1334, T0 + 1667, T0 + 2000]


async def test_parallelism_is_a_semaphore_with_leases(limiter: FlowLimiter) -> None:
    key = FlowScope(CALLER, unique("k"))
    for h in ("a", "b"):
        assert await limiter.admit(key, h, T0, LEASE_MS, 2, None) == (Admission.ADMITTED, 0)
    verdict, wait_ms = await limiter.admit(key, "c", T0 + 1, LEASE_MS, 2, None)
    assert verdict is Admission.FULL and 0 < wait_ms <= LEASE_MS
    assert (await limiter.admit(key, "a", T0 + 2, LEASE_MS, 2, None))[0] is Admission.ADMITTED
    await limiter.release(key, "a")
    assert (await limiter.admit(key, "c", T0 + 3, LEASE_MS, 2, None))[0] is Admission.ADMITTED
    # b's holder died: its lease ends and frees the place.
    verdict, _ = await limiter.admit(key, "d", T0 + LEASE_MS + 1, LEASE_MS, 2, None)
    assert verdict is Admission.ADMITTED
    await limiter.release(key, "never-held")  # nothing to do


async def test_the_rate_window_holds_starts_that_came_late(limiter: FlowLimiter) -> None:
    key = FlowScope(CALLER, unique("k"))
    window = rate_window(3)  # 3 starts in any 1000 ms
    for i in range(3):
        assert (await limiter.admit(key, f"h{i}", T0 + i, LEASE_MS, None, window)
                ) == (Admission.ADMITTED, 0)
    verdict, wait_ms = await limiter.admit(key, "h3", T0 + 10, LEASE_MS, None, window)
    assert verdict is Admission.TOO_SOON and wait_ms == 990
    verdict, _ = await limiter.admit(key, "h3", T0 + 1000, LEASE_MS, None, window)
    assert verdict is Admission.ADMITTED


async def test_an_ask_behind_a_counted_start_waits_for_it(limiter: FlowLimiter) -> None:
    """Asks can arrive out of order (several processes, pipelines on several connections):
    one timed before a start already counted waits until that start, so no window ever
    holds more than its count."""
    key = FlowScope(CALLER, unique("k"))
    window = rate_window(2)  # 2 starts in any 1000 ms
    for h in ("a", "b"):
        assert (await limiter.admit(key, h, T0, LEASE_MS, None, window)
                )[0] is Admission.ADMITTED
    # T0 + 1000: a and b have left its window (and are forgotten).
    assert (await limiter.admit(key, "c", T0 + 1000, LEASE_MS, None, window)
            )[0] is Admission.ADMITTED
    # Timed at T0 + 500 but arriving after c's ask: admitted, it would be the third start
    # within [T0, T0 + 999]. It waits for c's time instead.
    assert await limiter.admit(key, "d", T0 + 500, LEASE_MS, None, window) == (
        Admission.TOO_SOON, 500)
    verdict, _ = await limiter.admit(key, "d", T0 + 1000, LEASE_MS, None, window)
    assert verdict is Admission.ADMITTED


async def test_concurrent_reservations_never_share_a_slot(limiter: FlowLimiter) -> None:
    key = FlowScope(CALLER, unique("k"))
    starts = await asyncio.gather(*(limiter.reserve(key, f"m{i}", T0, 10.0, T0)
                                    for i in range(200)))
    assert sorted(starts) == [T0 + 10 * i for i in range(200)]


async def test_equal_keys_of_two_callers_share_no_slot_and_no_lease(
        limiter: FlowLimiter) -> None:
    """A key is its caller's: another caller writing the same text (even the text of this
    caller's default, ``<caller>|<origin>``) gets its own slots and semaphore, and a
    caller's own key of that text is apart from its default."""
    text = f"{CALLER}|https://{unique('h')}.example:443"
    mine, default = FlowScope(CALLER, text), FlowScope(CALLER, text, default=True)
    foreign = FlowScope(unique("b"), text)
    assert await limiter.reserve(foreign, "b1", T0, 10_000_000.0, T0) == T0
    assert await limiter.reserve(foreign, "b2", T0, 10_000_000.0, T0) == T0 + 10_000_000
    assert await limiter.reserve(mine, "a1", T0, 10.0, T0) == T0
    assert await limiter.reserve(default, "a1", T0, 10.0, T0) == T0
    assert (await limiter.admit(foreign, "b", T0, LEASE_MS, 1, rate_window(0.0001))
            )[0] is Admission.ADMITTED
    for scope in (mine, default):
        assert await limiter.admit(scope, "a", T0, LEASE_MS, 1, rate_window(10)) == (
            Admission.ADMITTED, 0)
    # ... and theirs is still full.
    assert (await limiter.admit(foreign, "b2", T0, LEASE_MS, 1, None))[0] is Admission.FULL


async def test_the_board_shows_live_views_with_their_source(board: FlowBoard) -> None:
    view = FlowView("partner-a", 100.0, 10, 3, 0.5, 2.0, 40)
    await board.publish_flow("d1", [view], T0, 30)
    got = await board.read_flow(T0 + 1_000)
    assert [(v.source, v.key, v.open_now, v.delay_max_s) for v in got] == [
        ("d1", "partner-a", 3, 2.0)]
    assert await board.read_flow(T0 + 31_000) == []


async def test_the_board_keeps_two_callers_equal_keys_apart(board: FlowBoard) -> None:
    views = [FlowView("shared", 1.0, None, 1, 0.0, 0.0, 1, caller="a"),
             FlowView("shared", 2.0, None, 2, 0.0, 0.0, 2, caller="b"),
             FlowView("shared", 3.0, None, 3, 0.0, 0.0, 3, caller="b", default=True)]
    await board.publish_flow("d1", views, T0, 30)
    got = await board.read_flow(T0 + 1_000)
    assert sorted((v.caller, v.key, v.default, v.open_now) for v in got) == [
        ("a", "shared", False, 1), ("b", "shared", False, 2), ("b", "shared", True, 3)]
