"""Flow control at delivery (``dispatcher.flow_control``) on the in-memory limiter and the
ManualClock: which bounds apply, a herd spread at the rate and never early, at most
``parallelism`` open, a slot far ahead sent back to SQS with the claim timed at the slot, the
delay metric's bounded labels, and failing open."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from dispatcher.flow_control import LABELLED_KEYS, FlowGate
from tests.unit.dispatcher.fakes import (
    CALLER,
    OTHER_CALLER,
    START_MS,
    VISIBILITY_S,
    Env,
    settle,
)
from trigger_service.adapters.memory.flow import MemoryFlowLimiter
from trigger_service.config.callers import CallerRegistry
from trigger_service.core.flow import FlowControl, FlowScope
from trigger_service.core.model import Status
from trigger_service.core.ports.flow import Admission

pytestmark = pytest.mark.timeout(20)

FLOW = FlowControl("partner", 10.0, 2)  # 10 starts a second, 2 open at once


def gate(env: Env, limiter: MemoryFlowLimiter | None = None) -> FlowGate:
    return FlowGate(limiter or MemoryFlowLimiter(), env.callers, env.clock, env.metrics,
                    lease_ms=15_000)


def callers_with_default() -> CallerRegistry:
    return CallerRegistry.from_mapping({"callers": {CALLER: {
        "token_sha256": "a" * 64, "callback_prefixes": ["https://orders.internal/"],
        "flow_control": [{"origin": "https://orders.internal", "rate_per_second": 50,
                          "parallelism": 5}]}, OTHER_CALLER: {
        "token_sha256": "b" * 64, "callback_prefixes": ["https://billing.internal/"]}}})


async def test_the_triggers_own_wins_over_its_callers_default_for_the_origin() -> None:
    env = Env(callers=callers_with_default())
    g = gate(env)
    plain = await env.add(1_000)
    assert g.policy(plain) == FlowControl("orders|https://orders.internal:443", 50.0, 5)
    own = await env.add(1_000, flow_control=FLOW)
    assert g.policy(own) == FLOW
    elsewhere = await env.add(1_000, callback_url="https://other.internal:8443/cb")
    assert g.policy(elsewhere) is None
    assert gate(Env()).policy(plain) is None  # no default in the callers file


async def test_another_callers_key_equal_to_a_default_does_not_move_its_slots() -> None:
    """Caller B writes A's default key (``<A>|<origin>``) with a tiny rate: each B trigger
    would have pushed A's next slot 2.8 hours out. Keys are per caller: A's slots are laid
    from its own due times as if B were not there; B's own herd is spread as asked."""
    env = Env(callers=callers_with_default())
    g = gate(env)
    key = g.policy(await env.add(1_000))
    assert key is not None and key.key == f"{CALLER}|https://orders.internal:443"
    foreign = FlowControl(key.key, 0.0001, 1)
    theirs = [await env.add(1_000, caller=OTHER_CALLER, flow_control=foreign)
              for _ in range(3)]
    assert [await g.reserve(t) for t in theirs] == [
        theirs[0].fire_at_ms + 10_000_000 * i for i in range(3)]
    mine = [await env.add(1_000) for _ in range(3)]
    assert [await g.reserve(t) for t in mine] == [mine[0].fire_at_ms + 20 * i
                                                   for i in range(3)]
    # A's explicit key of that same text is A's, but apart from its default (and from B's).
    own = await env.add(1_000, flow_control=FlowControl(key.key, 0.0001, None))
    assert await g.reserve(own) == own.fire_at_ms


async def test_another_callers_slow_sends_hold_none_of_its_parallelism() -> None:
    """B's sends under A's key, stuck open, hold B's places only: A's deliveries under its
    own key (written or default) are admitted at once."""
    env = Env(callers=callers_with_default())
    g = gate(env)
    shared = FlowControl("partner", None, 1)
    theirs = await env.add(0, caller=OTHER_CALLER, flow_control=shared)
    stuck = asyncio.Event()
    entered: list[str] = []

    async def send(t: object, holder: str) -> None:
        assert isinstance(t, type(theirs))
        async with g.admitted(t, holder):
            entered.append(holder)
            if holder.startswith("b"):
                await stuck.wait()

    b_tasks = [asyncio.create_task(send(theirs, f"b{i}")) for i in range(2)]
    await settle()
    assert entered == ["b0"]  # B's own key: one at a time
    mine = await env.add(0, flow_control=shared)
    default = await env.add(0)  # A's default: parallelism 5
    default_foreign = await env.add(0, caller=OTHER_CALLER, flow_control=FlowControl(
        f"{CALLER}|https://orders.internal:443", None, 1))
    b_tasks.append(asyncio.create_task(send(default_foreign, "b-default")))
    await settle()
    await asyncio.wait_for(send(mine, "a"), 1)
    await asyncio.wait_for(send(default, "a-default"), 1)
    assert entered == ["b0", "b-default", "a", "a-default"]
    assert {(v.caller, v.key) for v in g.views()} >= {(CALLER, "partner"),
                                                       (OTHER_CALLER, "partner")}
    stuck.set()
    while not all(task.done() for task in b_tasks):
        env.clock.advance_ms(10)
        await settle()
    await asyncio.gather(*b_tasks)


async def test_reservations_spread_a_herd_from_its_due_time_and_repeat() -> None:
    env = Env()
    g = gate(env)
    herd = [await env.add(5_000, flow_control=FLOW) for _ in range(30)]
    starts = [await g.reserve(t) for t in herd]
    due = herd[0].fire_at_ms
    assert starts == [due + 100 * i for i in range(30)]
    assert await g.reserve(herd[7]) == starts[7]  # the same attempt: the same slot
    retry = replace(env.row(herd[7]), attempts=1)
    assert await g.reserve(retry) == due + 3_000  # a new attempt: a new slot
    unlimited = await env.add(5_000)
    assert await g.reserve(unlimited) == unlimited.fire_at_ms
    in_flight = replace(env.row(herd[0]), status=Status.IN_FLIGHT, attempts=1)
    assert await g.reserve(in_flight) == due  # no slot spent on a claimed one
    assert await g.reserve(replace(env.row(herd[1]), attempts=2)) == due + 3_100


async def test_at_most_parallelism_are_open_and_the_next_starts_when_one_ends() -> None:
    env = Env()
    g = gate(env)
    t = await env.add(0, flow_control=FlowControl("p", None, 2))
    release = asyncio.Event()
    entered: list[int] = []

    async def send(n: int) -> None:
        async with g.admitted(t, f"h{n}"):
            entered.append(n)
            await release.wait()

    tasks = [asyncio.create_task(send(n)) for n in range(3)]
    await settle()
    assert entered == [0, 1]
    env.clock.advance_ms(50)
    await settle()
    assert entered == [0, 1]  # still full: it asks again, it does not get in
    release.set()
    await settle()
    env.clock.advance_ms(10)
    await asyncio.gather(*tasks)
    assert entered == [0, 1, 2]


class RoundTrips(MemoryFlowLimiter):
    """The in-memory limiter behind a network: each ask waits for the next round trip
    (``trip``), as asks sharing Redis's pipelined round trips do."""

    def __init__(self) -> None:
        super().__init__()
        self._trip = asyncio.Event()
        self.asking = 0

    async def admit(self, scope: FlowScope, holder: str, now_ms: int, lease_ms: int,
                    parallelism: int | None, window: tuple[int, int] | None
                    ) -> tuple[Admission, int]:
        self.asking += 1
        try:
            await self._trip.wait()
        finally:
            self.asking -= 1
        return await super().admit(scope, holder, now_ms, lease_ms, parallelism, window)

    async def trip(self) -> None:
        """One round trip: every ask made so far is answered."""
        self._trip.set()
        self._trip = asyncio.Event()
        await settle()


async def test_a_backlog_drains_several_admissions_per_round_trip_not_one() -> None:
    """Waiters refused for a full key ask again side by side (up to the parallelism),
    woken by the sends ending here: one round trip admits as many as there are places,
    where one head asking alone admitted one per round trip (a busy loop then fell behind
    the rate, and the claims of those waiting went stale)."""
    env = Env()
    limiter = RoundTrips()
    g = gate(env, limiter)
    t = await env.add(0, flow_control=FlowControl("p", None, 5))
    release = asyncio.Event()
    entered: list[int] = []

    async def send(n: int) -> None:
        async with g.admitted(t, f"h{n}"):
            entered.append(n)
            if n < 5:
                await release.wait()

    tasks = [asyncio.create_task(send(n)) for n in range(5)]
    await settle()
    await limiter.trip()
    assert entered == [0, 1, 2, 3, 4]
    tasks += [asyncio.create_task(send(n)) for n in range(5, 15)]
    await settle()
    await limiter.trip()  # all refused: the key is full
    assert len(entered) == 5
    release.set()  # the five sends end here
    await settle()
    env.clock.advance_ms(10)  # a poll's worth too
    await settle()
    assert limiter.asking == 5  # five ask at once, not one
    await limiter.trip()
    assert len(entered) == 10  # five places, five admitted in one round trip
    while not all(task.done() for task in tasks):
        env.clock.advance_ms(10)
        await limiter.trip()
    await asyncio.gather(*tasks)
    assert sorted(entered) == list(range(15))


async def _run_herd(env: Env, n: int) -> None:
    d = env.dispatcher_with(flow=gate(env))
    herd = [await env.add(2_000, flow_control=FLOW) for _ in range(n)]
    await env.enqueue(*herd)
    tasks = []
    for _ in range(n // 10 + 1):
        tasks += [asyncio.create_task(d.handle(m)) for m in await env.receive()]
    await settle()
    while not all(t.done() for t in tasks):
        env.clock.advance_ms(5)
        await settle()
    await asyncio.gather(*tasks)


async def test_a_herd_is_delivered_at_the_rate_never_early_and_once_each() -> None:
    env = Env()
    await _run_herd(env, 40)
    times = sorted(c.at_ms for c in env.channel.calls)
    assert len(env.channel.calls) == len({c.trigger_id for c in env.channel.calls}) == 40
    due = times[0]
    assert due == START_MS + 2_000  # never before the due time
    # The rate: starts 100 ms apart from the due time (any 1 s holds at most 10).
    assert times == [due + 100 * i for i in range(40)]
    assert env.fired_count() == 40
    assert env.metrics.observed("flow_control_delay_seconds")[-1] == pytest.approx(3.9)


async def test_a_slot_far_ahead_goes_back_to_sqs_and_its_claim_is_timed_at_it() -> None:
    env = Env()
    d = env.dispatcher_with(flow=gate(env))
    slow = FlowControl("slow", 0.04, None)  # one start every 25 s
    first, second = [await env.add(1_000, flow_control=slow) for _ in range(2)]
    await env.enqueue(first, second)
    tasks = [asyncio.create_task(d.handle(m)) for m in await env.receive()]
    await settle()
    assert env.count("flow_control_deferrals_total") == 1
    slot_ms = first.fire_at_ms + 25_000
    # One is held for its due time; the other is back on SQS until the enqueue lead (3 s
    # here) before its slot 25 s later, not held in memory.
    held_ms = START_MS + VISIBILITY_S * 1000
    later = next(t for t in (first, second) if env.queued(t) != [held_ms])
    assert env.queued(later) == [slot_ms - 3_000]
    env.clock.advance_ms(1_000)
    await asyncio.gather(*tasks)
    env.clock.set_ms(slot_ms - 3_000)
    task = asyncio.create_task(d.handle((await env.receive())[0]))
    await settle()
    env.clock.set_ms(slot_ms - 1_000)  # the claim lead before the slot
    await settle()
    row = env.row(later)
    assert row.status is Status.IN_FLIGHT and row.claimed_at_ms == slot_ms
    env.clock.set_ms(slot_ms)
    await task
    assert [c.at_ms for c in env.channel.calls] == [first.fire_at_ms, slot_ms]


async def test_a_long_wait_for_admission_keeps_the_claim_fresh() -> None:
    """A send kept waiting by a full key (another dispatcher's sends) long past its claim's
    time renews the claim while it waits, so no one takes it over; sent once, later."""
    env = Env()
    limiter = MemoryFlowLimiter()
    d = env.dispatcher_with(flow=gate(env, limiter))
    flow = FlowControl("busy", None, 1)
    busy = FlowScope(CALLER, "busy")
    assert (await limiter.admit(busy, "elsewhere", env.clock.now_ms(), 60_000, 1, None)
            )[0] is Admission.ADMITTED
    t = await env.add(1_000, flow_control=flow)
    await env.enqueue(t)
    task = asyncio.create_task(d.handle((await env.receive())[0]))
    claimed_at: set[int | None] = set()
    for _ in range(300):  # 30 s waiting for the place
        env.clock.advance_ms(100)
        await settle()
        row = env.row(t)
        assert row.status is Status.IN_FLIGHT
        stale_at = row.claim_stale_at_ms(int(env.settings.dispatch.callback_timeout_s * 1000))
        assert env.clock.now_ms() < stale_at  # never stale: no one may take it over
        claimed_at.add(row.claimed_at_ms)
    assert len(claimed_at) > 3 and env.count("claim_renewals_total") == len(claimed_at) - 1
    assert env.channel.calls == []
    await limiter.release(busy, "elsewhere")
    while not task.done():
        env.clock.advance_ms(10)
        await settle()
    await task
    assert len(env.channel.calls) == 1 and env.fired_count() == 1


async def test_only_the_first_keys_get_their_own_label() -> None:
    """A key is the caller's to choose: the delay's label set stays bounded."""
    env = Env()
    g = gate(env)
    for i in range(LABELLED_KEYS + 5):
        t = await env.add(0, flow_control=FlowControl(f"k{i}", None, 1))
        async with g.admitted(t, "h"):
            pass
    labels = {k for k in env.metrics.observations if k.startswith("flow_control_delay")}
    assert len(labels) == LABELLED_KEYS + 1
    other = f'flow_control_delay_seconds{{caller="{CALLER}",key="_other"}}'
    assert other in labels
    assert len(env.metrics.observations[other]) == 5
    assert {v.key for v in g.views()} == {f"k{i}" for i in range(LABELLED_KEYS + 5)}


async def test_redis_away_means_delivered_without_flow_control() -> None:
    env = Env()
    limiter = MemoryFlowLimiter()
    limiter.fail = True
    g = gate(env, limiter)
    t = await env.add(1_000, flow_control=FLOW)
    assert await g.reserve(t) == t.fire_at_ms
    async with g.admitted(t, "h"):
        pass
    assert env.count("flow_control_fail_open_total") == 2
