"""Claims ahead of the fire time: the lead grows with the backlog (``ClaimGate``), a cancel
still wins until the cancel fence, the bulkhead bounds the sends and not the claims, and an
outcome is only ever written after its send answered.

Every test drives time with the ManualClock; nothing sleeps for real.
"""

from __future__ import annotations

import asyncio

import pytest

from dispatcher.claim_gate import BatchedReads, ClaimGate, DueTimers
from tests.unit.dispatcher.fakes import CLAIM_LEAD_MS, Env, failed, make_callers, settle
from trigger_service.adapters.memory import MemoryIdempotencyCache
from trigger_service.app.triggers import TriggerService
from trigger_service.core.clock import ManualClock
from trigger_service.core.errors import NotCancellable
from trigger_service.core.model import Status, Trigger

pytestmark = pytest.mark.timeout(10)

FENCE_MS = 2_000  # Settings().dispatch.cancel_fence_ms
START_MS = 1_700_000_000_000


# --- the gate ---------------------------------------------------------------------------------
async def _claim_times(gate: ClaimGate, clock: ManualClock, dues: list[int],
                       until_ms: int) -> list[int | None]:
    """When each turn's block started, stepping the clock 10 ms at a time up to ``until_ms``
    (claims take no time here)."""
    started: list[int | None] = [None] * len(dues)

    async def one(i: int, due_ms: int) -> None:
        async with gate.turn(due_ms) as go:
            assert go
            started[i] = clock.now_ms()

    tasks = [asyncio.create_task(one(i, d)) for i, d in enumerate(dues)]
    await settle()
    while clock.now_ms() < until_ms:
        clock.advance_ms(10)
        await settle()
    await asyncio.gather(*tasks)
    return started


async def test_a_lone_message_is_claimed_at_the_minimum_lead() -> None:
    clock = ManualClock(START_MS)
    gate = ClaimGate(clock, min_lead_ms=1_000, max_lead_ms=15_000, concurrency=4)
    due = START_MS + 10_000
    assert await _claim_times(gate, clock, [due], due) == [due - 1_000]


async def test_each_message_due_no_later_moves_the_claim_earlier_by_one_claim_cost() -> None:
    clock = ManualClock(START_MS)
    gate = ClaimGate(clock, min_lead_ms=1_000, max_lead_ms=15_000, concurrency=1)
    # Nothing measured yet: a claim is assumed to take 100 ms, one at a time.
    assert gate.claim_cost_ms == 100
    due = START_MS + 10_000
    times = await _claim_times(gate, clock, [due, due, due, due + 5_000], due + 5_000)
    # Arrival order: the later arrivals with the same due time are claimed earlier; the
    # message due later has three ahead of it and its own lead.
    assert times == [due - 1_000, due - 1_100, due - 1_200, due + 5_000 - 1_300]


async def test_the_lead_is_capped_and_measured_latency_sets_the_cost() -> None:
    clock = ManualClock(START_MS)
    gate = ClaimGate(clock, min_lead_ms=1_000, max_lead_ms=1_250, concurrency=2)
    assert gate.lead_ms(100) == 1_250  # capped
    for _ in range(200):  # claims that took 10 ms each, two at a time: 5 ms per claim
        gate._observe(10)
    assert gate.claim_cost_ms == pytest.approx(5.0, abs=0.1)
    assert gate.lead_ms(10) == pytest.approx(1_050, abs=1)


async def test_at_most_concurrency_claims_run_at_once() -> None:
    clock = ManualClock(START_MS)
    gate = ClaimGate(clock, min_lead_ms=0, max_lead_ms=0, concurrency=2)
    release = asyncio.Event()
    inside = 0
    peak = 0

    async def claim() -> None:
        nonlocal inside, peak
        async with gate.turn(START_MS):
            inside += 1
            peak = max(peak, inside)
            await release.wait()
            inside -= 1

    tasks = [asyncio.create_task(claim()) for _ in range(5)]
    await settle()
    assert (inside, peak) == (2, 2)
    release.set()
    await asyncio.gather(*tasks)
    assert peak == 2


async def test_a_stopping_dispatcher_claims_nothing() -> None:
    clock = ManualClock(START_MS)
    gate = ClaimGate(clock, min_lead_ms=1_000, max_lead_ms=1_000, concurrency=2)
    stopping = asyncio.Event()
    answers: list[bool] = []

    async def one() -> None:
        async with gate.turn(START_MS + 60_000, stopping) as go:
            answers.append(go)

    task = asyncio.create_task(one())
    await settle()
    stopping.set()
    await task
    assert answers == [False] and gate.backlog == 0


async def test_reads_asked_for_together_go_out_as_one_get_many(env: Env) -> None:
    ts = [await env.add(5_000) for _ in range(3)]
    reads = BatchedReads(env.store)
    rows = await asyncio.gather(*(reads.get(t.trigger_id) for t in ts),
                                reads.get(ts[0].trigger_id))
    assert [r.trigger_id for r in rows if r] == [*(t.trigger_id for t in ts), ts[0].trigger_id]
    assert env.store.calls.get("get_many", 0) == 1


# --- a cancel against a claim taken ahead -----------------------------------------------------
def _service(env: Env) -> TriggerService:
    """The API's use case on the dispatcher's store (the same rows)."""
    return TriggerService(env.settings, env.store, env.store, env.queue,
                          MemoryIdempotencyCache(env.clock), env.clock, env.metrics)


async def _claimed_ahead(env: Env, n: int, fire_in_ms: int
                         ) -> tuple[list[Trigger], list[asyncio.Task[None]]]:
    """``n`` triggers due together, received and claimed ahead (the herd's lead)."""
    env.with_dispatch(claim_lead_ms=FENCE_MS + 3_000)  # every claim well before the fence
    ts = [await env.add(fire_in_ms) for _ in range(n)]
    await env.enqueue(*ts)
    d = env.dispatcher()
    tasks = [asyncio.create_task(d.handle(m)) for m in await env.receive()]
    env.clock.set_ms(ts[0].fire_at_ms - FENCE_MS - 3_000)
    await settle()
    assert all(env.row(t).status is Status.IN_FLIGHT for t in ts)
    return ts, tasks


async def test_a_cancel_before_the_fence_wins_over_a_claim_taken_ahead(env: Env) -> None:
    (t, other), tasks = await _claimed_ahead(env, 2, 10_000)
    env.clock.set_ms(t.fire_at_ms - FENCE_MS - 1)
    cancelled = await _service(env).cancel(t.caller, t.trigger_id)
    assert cancelled.status is Status.CANCELLED
    env.clock.set_ms(t.fire_at_ms)
    await asyncio.gather(*tasks)
    assert env.channel.ids() == [other.trigger_id]  # the cancelled one was never sent
    assert env.row(t).status is Status.CANCELLED and env.queued(t) == []
    assert env.row(other).status is Status.FIRED
    assert env.count("claims_withdrawn_total") == 1
    assert env.count("cancel_fence_overruns_total") == 0


async def test_a_cancel_inside_the_fence_gets_409_and_the_trigger_fires(env: Env) -> None:
    (t,), tasks = await _claimed_ahead(env, 1, 10_000)
    env.clock.set_ms(t.fire_at_ms - FENCE_MS)
    with pytest.raises(NotCancellable):
        await _service(env).cancel(t.caller, t.trigger_id)
    env.clock.set_ms(t.fire_at_ms)
    await asyncio.gather(*tasks)
    assert env.channel.ids() == [t.trigger_id]
    assert env.row(t).status is Status.FIRED


async def test_a_claim_taken_inside_the_fence_is_not_read_again(env: Env) -> None:
    t = await env.add(10_000)
    task = asyncio.create_task(env.dispatcher().handle(await env.receive_one(t)))
    env.clock.set_ms(t.fire_at_ms - CLAIM_LEAD_MS)  # the default lead: inside the fence
    await settle()
    assert env.row(t).status is Status.IN_FLIGHT
    with pytest.raises(NotCancellable):
        await _service(env).cancel(t.caller, t.trigger_id)
    gets = env.store.calls.get("get", 0) + env.store.calls.get("get_many", 0)
    env.clock.set_ms(t.fire_at_ms)
    await task
    assert env.store.calls.get("get", 0) + env.store.calls.get("get_many", 0) == gets
    assert env.row(t).status is Status.FIRED


# --- sends first, then outcomes ---------------------------------------------------------------
async def test_fired_is_never_written_before_the_send_answered(env: Env) -> None:
    env.callers = make_callers(orders_max_concurrency=3)
    gate = env.channel.gate = asyncio.Event()
    ts = [await env.add(1_000) for _ in range(5)]
    env.channel.results = [failed()]  # the first send fails
    await env.enqueue(*ts)
    d = env.dispatcher()
    tasks = [asyncio.create_task(d.handle(m)) for m in await env.receive()]
    env.clock.set_ms(ts[0].fire_at_ms)
    await settle()
    sent = set(env.channel.ids())
    assert len(sent) == 3
    # Sends under way: nothing is FIRED, whatever the order the tasks ran in.
    assert all(env.row(t).status is Status.IN_FLIGHT for t in ts)
    gate.set()
    await asyncio.gather(*tasks)
    first = env.channel.calls[0].trigger_id
    statuses = {t.trigger_id: env.row(t).status for t in ts}
    assert statuses.pop(first) is Status.PENDING  # failed: a retry, never FIRED
    assert set(statuses.values()) == {Status.FIRED}


# --- stopping with claims taken ahead ---------------------------------------------------------
async def test_a_stopping_dispatcher_gives_claims_taken_ahead_back(env: Env) -> None:
    """Claimed 5 s ahead, then SIGTERM: the row goes back exactly as it was (no attempt
    spent), the message is visible again at once, and nothing was sent."""
    env.with_dispatch(claim_lead_ms=5_000, receivers=1)
    t = await env.add(10_000)
    await env.enqueue(t)
    d = env.dispatcher()
    stop = asyncio.Event()
    runner = asyncio.create_task(d.run(stop))
    await settle()
    env.clock.set_ms(t.fire_at_ms - 5_000)
    await settle()
    assert env.row(t).status is Status.IN_FLIGHT and env.row(t).attempts == 1
    stop.set()
    env.clock.advance_ms(2_000)  # the receive's long poll ends; the send is still 3 s away
    await runner
    assert env.row(t) == t  # PENDING, attempts 0, no claim
    assert env.channel.calls == []
    assert env.queued(t) == [env.clock.now_ms()]  # handed back, visible now
    assert env.count("claims_given_back_total") == 1


# --- shared timers ----------------------------------------------------------------------------
async def test_waiters_for_one_instant_share_one_sleep_and_survive_a_cancelled_first() -> None:
    clock = ManualClock(START_MS)
    timers = DueTimers(clock)
    woke: list[int] = []

    async def wait(i: int) -> None:
        assert await timers.wait_until(START_MS + 1_000)
        woke.append(i)

    first = asyncio.create_task(wait(0))
    await settle()
    others = [asyncio.create_task(wait(i)) for i in range(1, 4)]
    await settle()
    assert len(timers._timers) == 1  # one shared timer for the instant
    first.cancel()  # the one that was sleeping for everyone
    await settle()
    clock.set_ms(START_MS + 999)
    await settle()
    assert woke == []  # never early
    clock.set_ms(START_MS + 1_000)
    await asyncio.gather(*others)
    assert sorted(woke) == [1, 2, 3] and timers._timers == {}
