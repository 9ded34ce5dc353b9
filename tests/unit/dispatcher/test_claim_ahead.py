"""Claims ahead of the fire time: the lead grows with the backlog (``ClaimGate``), a race
between a claim and a cancel is decided by the row's LWT alone (never by clocks: a 200 cancel
is never followed by a callback), the bulkhead bounds the sends and not the claims, and an
outcome is only ever written after its send answered.

Every test drives time with the ManualClock; nothing sleeps for real.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest

from dispatcher.claim_gate import ClaimGate, DueTimers, Waves
from tests.unit.dispatcher.fakes import Env, failed, make_callers, settle
from trigger_service.adapters.memory.idempotency import MemoryIdempotencyCache
from trigger_service.adapters.memory.store import MemoryStore
from trigger_service.app.registration import NewTrigger
from trigger_service.app.triggers import TriggerService
from trigger_service.core.dead_letters import Attempt
from trigger_service.core.errors import NotCancellable, NotEditable
from trigger_service.core.model import Status, Trigger
from trigger_service.core.notify.channels import PushSpec
from trigger_service.core.notify.plan import DeliveryPlan
from trigger_service.core.time.clock import ManualClock
from trigger_service.core.time.recurrence import Recurrence, RuleKind, parse_rule
from trigger_service.core.time.zones import load_zone

pytestmark = pytest.mark.timeout(10)

START_MS = 1_700_000_000_000


class WatchedGate(ClaimGate):
    @property
    def backlog(self) -> int:
        """Held messages waiting for their claim time."""
        return sum(map(len, self._waiting))


# --- the gate ---------------------------------------------------------------------------------
async def _claim_times(gate: ClaimGate, clock: ManualClock, dues: list[int],
                       until_ms: int, groups: list[str] | None = None) -> list[int | None]:
    """When each turn's block started, stepping the clock 10 ms at a time up to ``until_ms``
    (claims take no time here)."""
    started: list[int | None] = [None] * len(dues)

    async def one(i: int, due_ms: int) -> None:
        async with gate.turn(due_ms, None, groups[i] if groups else None) as go:
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


async def test_a_claim_takes_its_partition_mates_due_soon_along() -> None:
    """The held messages of one group (a store partition) due within the minimum lead after
    a claim are claimed with it, so that their claims share one Paxos round; a mate due
    later, and a message of another group, wait for their own claim times."""
    clock = ManualClock(START_MS)
    gate = ClaimGate(clock, min_lead_ms=1_000, max_lead_ms=1_000, concurrency=8)
    due = START_MS + 10_000
    started = await _claim_times(gate, clock, [due, due + 600, due + 3_000, due + 600],
                                 due + 3_000, groups=["a", "a", "a", "b"])
    assert started == [due - 1_000, due - 1_000, due + 2_000, due - 400]
    assert gate.woken_total == 1


def test_an_outcome_waits_for_company_only_while_mates_of_its_wave_are_being_sent() -> None:
    """The last of a wave to be answered (and a lone delivery) records its outcome at once:
    waiting would only widen the window in which a SIGKILL delivers it twice."""
    waves = Waves()
    with waves.open("a") as first, waves.open("a") as second, waves.open("b") as other:
        with waves.open(None) as homeless:
            pass
        with waves.open("a") as third:
            pass
    assert third.waiting and second.waiting and not first.waiting
    assert not other.waiting and not homeless.waiting


class PatienceSpy(MemoryStore):
    """Records, for each FIRED write and each history line, whether it was allowed to wait
    for company."""

    def __init__(self) -> None:
        super().__init__()
        self.fired_patient: dict[str, bool] = {}
        self.history_patient: dict[str, bool] = {}

    async def record_attempt(self, attempt: Attempt, ttl_s: int, *, kept: int,
                             patient: bool = False) -> None:
        self.history_patient[attempt.trigger_id] = patient
        await super().record_attempt(attempt, ttl_s, kept=kept, patient=patient)

    async def compare_and_set(self, old: Trigger, new: Trigger, *,
                              ttl_s: int | None = None, patient: bool = False) -> bool:
        if new.status is Status.FIRED:
            self.fired_patient[new.trigger_id] = patient
        return await super().compare_and_set(old, new, ttl_s=ttl_s, patient=patient)


async def test_fired_is_patient_only_while_a_mate_is_still_being_sent(env: Env) -> None:
    env.store = store = PatienceSpy()
    env.with_dispatch(claim_lead_ms=1_000)
    a = await env.add(10_000)
    b = await env.add(10_000, shard=a.shard + 8, home_at_ms=a.home_at_ms)  # a's partition
    lone = await env.add(20_000, shard=a.shard + 1, home_at_ms=a.fire_at_ms + 10_000)
    await env.enqueue(a, b, lone)
    d = env.dispatcher()
    tasks = [asyncio.create_task(d.handle(m)) for m in await env.receive()]
    for at_ms in (a.fire_at_ms - 1_000, a.fire_at_ms, lone.fire_at_ms):  # claims, sends
        env.clock.set_ms(at_ms)
        await settle()
    await asyncio.gather(*tasks)
    assert sorted(store.fired_patient[t.trigger_id] for t in (a, b)) == [False, True]
    assert store.fired_patient[lone.trigger_id] is False
    assert store.history_patient == store.fired_patient  # the history line waits as its outcome


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
    gate = WatchedGate(clock, min_lead_ms=1_000, max_lead_ms=1_000, concurrency=2)
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


# --- a cancel against a claim: Paxos decides ------------------------------------------------
class SkewedClock:
    """Another process's view of the same time: its wall clock ``offset_ms`` ahead (or
    behind), its monotonic clock from an origin of its own (``mono_origin_ms``)."""

    def __init__(self, clock: ManualClock, offset_ms: int, mono_origin_ms: int = 0) -> None:
        self._clock, self._offset_ms = clock, offset_ms
        self._mono_origin_ms = mono_origin_ms

    def now_ms(self) -> int:
        return self._clock.now_ms() + self._offset_ms

    def monotonic_ms(self) -> int:
        return self._clock.monotonic_ms() - self._mono_origin_ms

    async def sleep_until_ms(self, deadline_ms: int) -> None:
        await self._clock.sleep_until_ms(deadline_ms - self._offset_ms)

    async def sleep_ms(self, duration_ms: int) -> None:
        await self._clock.sleep_ms(duration_ms)


class SlowAnswerStore(MemoryStore):
    """The claim's LWT commits at once but its answer reaches the dispatcher only when
    ``answer`` is set: the window in which the old design's clocks could be fooled."""

    def __init__(self) -> None:
        super().__init__()
        self.answer = asyncio.Event()
        self.committed = asyncio.Event()

    async def compare_and_set(self, old: Trigger, new: Trigger, *,
                              ttl_s: int | None = None, patient: bool = False) -> bool:
        applied = await super().compare_and_set(old, new, ttl_s=ttl_s, patient=patient)
        if applied and new.status is Status.IN_FLIGHT and old.status is Status.PENDING:
            self.committed.set()
            await self.answer.wait()
        return applied


def _daily_from(at_ms: int) -> Recurrence:
    """A daily series in UTC whose first occurrence is ``at_ms``."""
    start = datetime.fromtimestamp(at_ms / 1000, UTC).replace(tzinfo=None)
    return Recurrence(RuleKind.RRULE, parse_rule(RuleKind.RRULE, "FREQ=DAILY",
                                                 load_zone("UTC"), start), "UTC", start)


def _service(env: Env, offset_ms: int = 0) -> TriggerService:
    """The API's use case on the dispatcher's store (the same rows), its clock
    ``offset_ms`` off the dispatcher's."""
    clock = SkewedClock(env.clock, offset_ms) if offset_ms else env.clock
    return TriggerService(env.settings, env.store, env.store, env.queue,
                          MemoryIdempotencyCache(env.clock), clock, env.metrics)


async def _cancel(env: Env, t: Trigger, offset_ms: int = 0) -> int:
    """The HTTP status a cancel would answer: 200 or 409."""
    try:
        await _service(env, offset_ms).cancel(t.caller, t.trigger_id)
    except NotCancellable:
        return 409
    return 200


async def test_a_cancel_before_the_claim_wins_and_nothing_is_sent(env: Env) -> None:
    env.with_dispatch(claim_lead_ms=5_000)
    # Not in t's partition: a mate of t's would take t's claim along with its own, early
    # (test_a_claim_takes_its_partition_mates_due_soon_along).
    t = await env.add(10_000)
    other = await env.add(10_000, shard=1, home_at_ms=t.fire_at_ms)
    await env.enqueue(t, other)
    d = env.dispatcher()
    tasks = [asyncio.create_task(d.handle(m)) for m in await env.receive()]
    env.clock.set_ms(t.fire_at_ms - 5_001)
    await settle()
    assert await _cancel(env, t) == 200
    env.clock.set_ms(t.fire_at_ms)
    await asyncio.gather(*tasks)
    assert env.channel.ids() == [other.trigger_id]  # the cancelled one was never sent
    assert env.row(t).status is Status.CANCELLED and env.queued(t) == []
    assert env.row(other).status is Status.FIRED


async def test_a_cancel_after_a_claim_taken_ahead_gets_409_and_the_trigger_fires(
        env: Env) -> None:
    env.with_dispatch(claim_lead_ms=5_000)  # a herd's lead: claimed 5 s ahead
    t = await env.add(10_000)
    task = asyncio.create_task(env.dispatcher().handle(await env.receive_one(t)))
    env.clock.set_ms(t.fire_at_ms - 5_000)
    await settle()
    assert env.row(t).status is Status.IN_FLIGHT
    assert await _cancel(env, t) == 409  # 5 s before the fire time: the claim came first
    env.clock.set_ms(t.fire_at_ms)
    await task
    assert env.channel.ids() == [t.trigger_id]
    assert env.row(t).status is Status.FIRED


async def test_the_race_a_clock_could_lose_is_decided_by_the_claim(env: Env) -> None:
    """The claim's LWT commits at T-2010 ms and the dispatcher hears of it at T-1995 ms; a
    cancel arrives at T-2005 ms, in between. With clocks deciding (the old cancel fence) the
    cancel answered 200 and the trigger was sent anyway. Now the cancel sees the claim."""
    env.store = store = SlowAnswerStore()
    env.with_dispatch(claim_lead_ms=2_010)
    t = await env.add(10_000)
    task = asyncio.create_task(env.dispatcher().handle(await env.receive_one(t)))
    env.clock.set_ms(t.fire_at_ms - 2_010)
    await store.committed.wait()
    env.clock.set_ms(t.fire_at_ms - 2_005)
    assert await _cancel(env, t) == 409
    env.clock.set_ms(t.fire_at_ms - 1_995)
    store.answer.set()
    env.clock.set_ms(t.fire_at_ms)
    await task
    assert env.channel.ids() == [t.trigger_id] and env.row(t).status is Status.FIRED


@pytest.mark.parametrize("api_offset_ms", [-300, 0, 300])
async def test_no_200_cancel_is_ever_followed_by_a_callback_on_skewed_clocks(
        api_offset_ms: int) -> None:
    """The API's clock 300 ms behind, equal, 300 ms ahead of the dispatcher's; cancels at
    every 5 ms around the claim time: each trigger is either cancelled (200, never sent) or
    sent (the cancel answered 409), never both, never neither."""
    answers: dict[int, int] = {}
    for cancel_at in range(-60, 61, 5):  # ms relative to the claim time
        env = Env()
        env.with_dispatch(claim_lead_ms=3_000)
        t = await env.add(10_000)
        task = asyncio.create_task(env.dispatcher().handle(await env.receive_one(t)))
        claim_at = t.fire_at_ms - 3_000
        env.clock.set_ms(claim_at + cancel_at)
        await settle()  # a claim due by now has been taken
        status = await _cancel(env, t, api_offset_ms)
        env.clock.set_ms(t.fire_at_ms)
        await settle()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        sent = env.channel.ids() == [t.trigger_id]
        assert (status, sent) in ((200, False), (409, True)), (cancel_at, status, sent)
        assert (status == 200) == (env.row(t).status is Status.CANCELLED)
        answers[cancel_at] = status
    # Both outcomes happened: the sweep crossed the claim, whatever the API's clock said.
    assert set(answers.values()) == {200, 409}
    assert answers[-5] == 200 and answers[0] == 409


async def test_a_series_cancel_waits_for_the_occurrence_being_delivered(env: Env) -> None:
    """A series whose occurrence is IN_FLIGHT: the cancel answers only after that occurrence
    finished, so its callback comes before the 200, never after."""
    gate = env.channel.gate = asyncio.Event()
    t = await env.add(1_000, schedule=_daily_from(env.clock.now_ms() + 1_000))
    task = asyncio.create_task(env.dispatcher().handle(await env.receive_one(t)))
    env.clock.set_ms(t.fire_at_ms)
    await settle()
    assert env.channel.ids() == [t.trigger_id]  # being delivered
    cancel = asyncio.create_task(_cancel(env, t))
    for _ in range(5):
        env.clock.advance_ms(25)
        await settle()
    assert not cancel.done()  # waiting for the occurrence
    gate.set()
    await task
    while not cancel.done():
        env.clock.advance_ms(25)
        await settle()
    assert cancel.result() == 200
    assert env.row(t).status is Status.CANCELLED
    assert len(env.channel.ids()) == 1


async def test_a_series_cancel_answers_409_if_the_occurrence_stays_in_flight(
        env: Env) -> None:
    env.channel.gate = asyncio.Event()  # never answers
    t = await env.add(1_000, schedule=_daily_from(env.clock.now_ms() + 1_000))
    task = asyncio.create_task(env.dispatcher().handle(await env.receive_one(t)))
    env.clock.set_ms(t.fire_at_ms)
    await settle()
    cancel = asyncio.create_task(_cancel(env, t))
    while not cancel.done():
        env.clock.advance_ms(100)
        await settle()
    assert cancel.result() == 409
    assert env.row(t).status is Status.IN_FLIGHT
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


# --- sends first, then outcomes ---------------------------------------------------------------
async def test_fired_is_never_written_before_the_send_answered(env: Env) -> None:
    env.callers = make_callers(orders_max_concurrency=3)
    env.with_dispatch(retry_backoff_s=(60,))  # its retry back on the queue: handle() ends
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


# --- an edit and an acknowledgement against a claim -------------------------------------------
@pytest.mark.parametrize("api_offset_ms", [-300, 300])
async def test_no_200_edit_is_followed_by_a_callback_with_the_old_payload(
        api_offset_ms: int) -> None:
    """PATCH of the payload swept around the claim on skewed clocks: an edit answered 200
    means every callback carries the new payload; one answered 409 came after the claim,
    and the callback carries the old one."""
    answers: set[int] = set()
    for edit_at in range(-40, 41, 10):
        env = Env()
        env.with_dispatch(claim_lead_ms=3_000)
        t = await env.add(10_000, payload_json='{"v": "old"}')
        payloads: list[str] = []
        env.channel.on_deliver = lambda sent, out=payloads: out.append(sent.payload_json)
        task = asyncio.create_task(env.dispatcher().handle(await env.receive_one(t)))
        env.clock.set_ms(t.fire_at_ms - 3_000 + edit_at)
        await settle()
        service = _service(env, api_offset_ms)
        current = env.row(t)
        req = NewTrigger(callback_url=t.callback_url, payload_json='{"v": "new"}',
                         fire_at_ms=t.fire_at_ms, received_at_ms=env.clock.now_ms())
        edit = asyncio.create_task(service.edit(current, req, retime=False))
        while not edit.done():  # an edit of an in-flight row waits for it (on this clock)
            env.clock.advance_ms(25)
            await settle()
        try:
            edit.result()
            status = 200
        except NotEditable:
            status = 409
        env.clock.set_ms(max(env.clock.now_ms(), t.fire_at_ms))
        while not task.done():
            env.clock.advance_ms(25)
            await settle()
        answers.add(status)
        want = '{"v": "new"}' if status == 200 else '{"v": "old"}'
        assert payloads == [want], (edit_at, status, payloads)
    assert answers == {200, 409}


async def test_an_ack_that_wins_over_the_claim_stops_the_step(env: Env) -> None:
    """Acknowledged before the claim (the LWT orders them): the claim loses, the dispatcher
    reads the acknowledged row and sends nothing; acknowledged after the claim: the ack
    waits for the step being sent, so its 200 comes after that send, never before."""
    plan = DeliveryPlan((PushSpec("tok", "t", "b"),))
    env.with_dispatch(claim_lead_ms=3_000)
    first = await env.add(10_000, plan=plan, callback_url="")
    second = await env.add(10_000, plan=plan, callback_url="")
    await env.enqueue(first, second)
    d = env.dispatcher()
    tasks = [asyncio.create_task(d.handle(m)) for m in await env.receive()]
    env.clock.set_ms(first.fire_at_ms - 3_001)
    await settle()
    await _service(env).ack(first.caller, first.trigger_id, None)  # before the claim
    env.clock.set_ms(first.fire_at_ms - 3_000)
    await settle()
    assert env.row(second).status is Status.IN_FLIGHT
    ack = asyncio.create_task(_service(env).ack(second.caller, second.trigger_id, None))
    env.clock.set_ms(first.fire_at_ms)
    while not ack.done():
        env.clock.advance_ms(25)
        await settle()
    await asyncio.gather(*tasks)
    sent = [occ for _, occ, *_ in env.notifiers.sent]
    assert sent == [f"{second.trigger_id}.1"]  # the first one's step was never sent
    assert ack.result().trigger_id == second.trigger_id
