"""The claim fence without clocks (``dispatcher.claim_keeping``): a send goes out only
within its claim's lease, checked after every wait before it; another dispatcher takes a
claim over only after watching it for its lease on its own monotonic clock. Wall clocks skewed
either way change neither; a cancel answered 200 is never followed by a send.

Every test drives time with the ManualClock; the dispatchers' clocks are views of it (their
wall clocks offset, their monotonic clocks from origins of their own).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest

from dispatcher.channels.webhook import WebhookChannel
from dispatcher.delivery import Delivery, DispatchDeps
from dispatcher.dispatcher import WATCH_STEP_MS, Dispatcher
from dispatcher.succession import Incarnation, Succession, incarnation_of
from tests.unit.dispatcher.fakes import START_MS, Env, failed, settle
from tests.unit.dispatcher.test_claim_ahead import SkewedClock, _cancel
from trigger_service.adapters.memory.deaths import MemoryDispatcherDeaths
from trigger_service.adapters.memory.store import MemoryQueue, MemoryStore
from trigger_service.core.errors import StoreError
from trigger_service.core.model import Route, Status, Trigger
from trigger_service.core.ports import Clock
from trigger_service.core.ports.values import ReceivedMessage
from trigger_service.core.time.clock import ManualClock

pytestmark = pytest.mark.timeout(20)

CALLBACK_TIMEOUT_MS = 10_000


class StallingQueue(MemoryQueue):
    """A single ``ChangeMessageVisibility`` (``Visibility.keep_hidden``'s call) that hangs
    until ``release`` is set, or (the first ``stalls`` of them) for ``stall_ms`` of the
    manual clock; batched changes (the deferrals) answer at once."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock)
        self._manual = clock
        self.release: asyncio.Event | None = None
        self.stall_ms = 0
        self.stalls = 1
        self.stalled = 0  # calls that started to hang

    async def change_visibility(self, receipt_handle: str, visibility_s: int) -> None:
        self.stalled += 1
        if self.release is not None:
            await self.release.wait()
        if self.stall_ms and self.stalled <= self.stalls:
            await self._manual.sleep_ms(self.stall_ms)
        # The message may have been received again meanwhile (its receipt stale): the
        # hidden time no longer matters to these tests.


@dataclass(frozen=True, slots=True)
class Claimed:
    claim_id: str
    at_ms: int  # the true time its LWT applied
    lease_ms: int | None


class ClaimLog(MemoryStore):
    """Every claim that applied, with the true time of its LWT."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__()
        self._clock = clock
        self.claims: list[Claimed] = []

    async def compare_and_set(self, old: Trigger, new: Trigger, *,
                              ttl_s: int | None = None, patient: bool = False) -> bool:
        applied = await super().compare_and_set(old, new, ttl_s=ttl_s, patient=patient)
        if applied and new.status is Status.IN_FLIGHT and new.claim_id != old.claim_id:
            assert new.claim_id is not None
            self.claims.append(Claimed(new.claim_id, self._clock.now_ms(),
                                       getattr(new, "claim_lease_ms", None)))
        return applied


def _world() -> tuple[Env, StallingQueue, ClaimLog]:
    env = Env()
    env.queue = queue = StallingQueue(env.clock)
    env.store = store = ClaimLog(env.clock)
    return env, queue, store


def _delivery(env: Env, clock: Clock) -> Delivery:
    """Dispatcher A's delivery, on its own clock."""
    deps = DispatchDeps(env.settings, env.store, env.queue, clock, env.metrics)
    return Delivery(deps, env.channel, env.callers, claim_ids=env._new_claim_id)


def _dispatcher(env: Env, clock: Clock) -> Dispatcher:
    """Dispatcher B, on its own clock."""
    return Dispatcher(env.settings, env.store, env.queue, env.channel, env.callers, clock,
                      env.metrics, new_claim_id=env._new_claim_id, notifiers=env.notifiers)


async def _claimed_and_stalled(env: Env, queue: StallingQueue, a: Delivery, t: Trigger
                               ) -> tuple[asyncio.Task[object], ReceivedMessage, str]:
    """A claims ``t`` at its fire time by its own clock (the true one, or up to 2 s later)
    and hangs keeping its message hidden (an SQS call the send's timeout does not cover)
    before the send."""
    [m] = await env.receive()
    env.clock.set_ms(t.fire_at_ms)
    # Known hidden only until the fire time: the send needs an SQS call first.
    task: asyncio.Task[object] = asyncio.create_task(
        a.claim_and_deliver(m, t, hidden_until_ms=t.fire_at_ms))
    await settle()
    while not queue.stalled:
        env.clock.advance_ms(100)
        await settle()
    row = env.row(t)
    assert row.status is Status.IN_FLIGHT and queue.stalled == 1 and env.channel.calls == []
    assert row.claim_id is not None
    return task, m, row.claim_id


async def _b_until(env: Env, b: Dispatcher, t: Trigger, until_ms: int,
                   step_ms: int = 100) -> None:
    """Move true time on to ``until_ms`` in steps, B handling every copy of ``t``'s
    message as it shows up (the due-scan re-sends it: one more copy at the start)."""
    tasks: list[asyncio.Task[None]] = []
    while env.clock.now_ms() < until_ms:
        env.clock.advance_ms(step_ms)
        tasks += [asyncio.create_task(b.handle(m)) for m in await env.receive()]
        await settle()
    await settle()
    for task in tasks:
        if not task.done():
            task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


# --- the sequence that sent a cancelled trigger -----------------------------------------------
@pytest.mark.parametrize("b_offset_ms", [0, 2_000, -2_000])
async def test_a_stalled_sender_never_sends_after_a_takeover_and_a_200_cancel(
        b_offset_ms: int) -> None:
    """A claims and hangs before its POST (keeping the message hidden); B takes the claim
    over, its attempt fails and the row goes back to PENDING for a retry; a cancel applies
    and answers 200. When A's wait ends, its POST must not go out."""
    env, queue, _ = _world()
    queue.release = asyncio.Event()
    t = await env.add(10_000)
    await env.enqueue(t)
    a = _delivery(env, SkewedClock(env.clock, 0, mono_origin_ms=5_000))
    task, _, a_claim = await _claimed_and_stalled(env, queue, a, t)
    b = _dispatcher(env, SkewedClock(env.clock, b_offset_ms, mono_origin_ms=-77_000))
    env.channel.results = [failed()]  # B's attempt fails
    await env.enqueue(t)  # the due-scan's copy
    await _b_until(env, b, t, t.fire_at_ms + 40_000)
    row = env.row(t)
    assert row.status is Status.PENDING and row.attempts == 2  # B's attempt, to be retried
    assert [c.claim_id for c in env.channel.calls] != [a_claim]
    assert await _cancel(env, t) == 200
    queue.release.set()  # A's wait ends
    await asyncio.wait_for(task, 5)
    assert a_claim not in [c.claim_id for c in env.channel.calls]  # A never sent
    assert len(env.channel.calls) == 1 and env.row(t).status is Status.CANCELLED


# --- skewed clocks: safety and liveness -------------------------------------------------------
@pytest.mark.parametrize(("a_offset_ms", "b_offset_ms"),
                         [(-2_000, 2_000), (2_000, -2_000), (0, 0)])
@pytest.mark.parametrize("stall_ends_ms", list(range(0, 16_001, 1_000)))
async def test_no_takeover_while_the_claimer_may_still_send(
        a_offset_ms: int, b_offset_ms: int, stall_ends_ms: int) -> None:
    """A's wait before its send ends ``stall_ends_ms`` after the fire time, B watches the
    row all along: A's send (from its start, for the time it was given) and B's takeover
    never overlap, whichever wall clock runs ahead, and exactly one of them sends."""
    env, queue, store = _world()
    queue.release = asyncio.Event()
    t = await env.add(10_000)
    await env.enqueue(t)
    a = _delivery(env, SkewedClock(env.clock, a_offset_ms, mono_origin_ms=123))
    task, _, a_claim = await _claimed_and_stalled(env, queue, a, t)
    b = _dispatcher(env, SkewedClock(env.clock, b_offset_ms, mono_origin_ms=-9_999))
    await env.enqueue(t)
    await _b_until(env, b, t, t.fire_at_ms + stall_ends_ms)
    queue.release.set()
    await settle()
    await _b_until(env, b, t, t.fire_at_ms + 40_000)
    await asyncio.wait_for(task, 5)
    a_sends = [(c, s) for c, s in zip(env.channel.calls, env.channel.timeouts, strict=True)
               if c.claim_id == a_claim]
    b_takeovers = [c for c in store.claims if c.claim_id != a_claim]
    for call, timeout_s in a_sends:
        ends_ms = call.at_ms + int((timeout_s or CALLBACK_TIMEOUT_MS / 1000) * 1000)
        assert all(taken.at_ms > ends_ms for taken in b_takeovers), (call, b_takeovers)
    assert len(env.channel.calls) == 1  # sent once: by A in time, else by B
    assert env.row(t).status is Status.FIRED


@pytest.mark.parametrize(("a_offset_ms", "b_offset_ms"), [(-2_000, 2_000), (2_000, -2_000)])
async def test_a_crashed_claimer_is_taken_over_within_about_a_lease(
        a_offset_ms: int, b_offset_ms: int) -> None:
    """A dies right after its claim; B, which sees the row from the fire time on, takes it
    over once it has watched the claim for its lease (and the margin, rounded up to SQS's
    whole seconds), whatever the wall clocks say."""
    env, queue, store = _world()
    queue.release = asyncio.Event()
    t = await env.add(10_000)
    await env.enqueue(t)
    a = _delivery(env, SkewedClock(env.clock, a_offset_ms, mono_origin_ms=1))
    task, _, a_claim = await _claimed_and_stalled(env, queue, a, t)
    task.cancel()  # killed
    await asyncio.gather(task, return_exceptions=True)
    b = _dispatcher(env, SkewedClock(env.clock, b_offset_ms, mono_origin_ms=2))
    seen_from_ms = env.clock.now_ms()
    await env.enqueue(t)
    await _b_until(env, b, t, t.fire_at_ms + 18_000)
    [claim, takeover] = store.claims
    assert claim.claim_id == a_claim and claim.lease_ms is not None
    # Watched from its first sighting (B's first step) for the lease and 1 s.
    watched_ms = claim.lease_ms + 1_000
    assert seen_from_ms + watched_ms < takeover.at_ms <= seen_from_ms + watched_ms + 1_100
    assert env.row(t).status is Status.FIRED and len(env.channel.calls) == 1


# --- a send near its lease's end ----------------------------------------------------------------
@pytest.mark.parametrize(("stall_ms", "renewed"), [(10_000, False), (10_001, True)])
async def test_a_send_near_its_leases_end_is_given_what_is_left_or_renews(
        stall_ms: int, renewed: bool) -> None:
    """The wait before the send leaves 2 s of the 12 s lease: sent with 2 s; 1.999 s: the
    claim is renewed (a new claim id and lease) and sent with the whole timeout."""
    env, queue, store = _world()
    queue.stall_ms = stall_ms
    t = await env.add(10_000)
    await env.enqueue(t)
    [m] = await env.receive()
    env.clock.set_ms(t.fire_at_ms)
    task = asyncio.create_task(_delivery(env, env.clock).claim_and_deliver(
        m, t, hidden_until_ms=t.fire_at_ms))
    await settle()
    env.clock.advance_ms(stall_ms)
    await asyncio.wait_for(task, 5)
    [call] = env.channel.calls
    last = store.claims[-1]
    assert call.claim_id == last.claim_id and len(store.claims) == (2 if renewed else 1)
    assert env.channel.timeouts == [None if renewed else 2.0]
    assert last.lease_ms is not None
    sent_until_ms = call.at_ms + int((env.channel.timeouts[0] or 10.0) * 1000)
    assert sent_until_ms <= last.at_ms + last.lease_ms  # within its claim's lease


async def test_a_send_whose_time_is_lost_again_after_each_renewal_is_not_made() -> None:
    """Keeping the message hidden hangs 13 s every time, longer than a lease: each renewal's
    time is lost before the send. After a few renewals nothing is sent; the claim is left
    to run out (and be taken over)."""
    env, queue, store = _world()
    queue.stall_ms, queue.stalls = 13_000, 1_000
    t = await env.add(10_000)
    await env.enqueue(t)
    [m] = await env.receive()
    env.clock.set_ms(t.fire_at_ms)
    task = asyncio.create_task(_delivery(env, env.clock).claim_and_deliver(
        m, t, hidden_until_ms=t.fire_at_ms))
    while not task.done():
        env.clock.advance_ms(500)
        await settle()
    assert env.channel.calls == []  # never sent past a lease
    assert 2 <= len(store.claims) <= 5 and env.row(t).status is Status.IN_FLIGHT


# --- the webhook channel: the signing secrets' read is inside the send's time -----------------
async def test_a_slow_signing_secret_read_ends_the_send_unsent() -> None:
    """A refresh of the signing secrets that outlasts the send's time: nothing is sent (a
    ``StoreError``), instead of a POST after the time the fence allowed."""
    posted: list[str] = []

    async def slow_secrets(caller: str) -> list[str]:
        await asyncio.sleep(0.5)
        return ["whsec_" + "A" * 32]

    class Recorder(WebhookChannel):
        async def signature_headers(self, trigger: Trigger, body: str) -> dict[str, str]:
            headers = await super().signature_headers(trigger, body)
            posted.append(trigger.trigger_id)  # the POST would follow at once
            return headers

    ch = Recorder(10.0, secrets_for=slow_secrets, trusts=lambda caller, url: True)
    await ch.open()
    try:
        t = Trigger("trg_01HF7YAT0085GF0BANA9NK482Y", "orders", "https://127.0.0.1:9/cb",
                    "null", START_MS, START_MS, 0, Route.DIRECT)
        with pytest.raises(StoreError):
            await ch.deliver(t, 1, 0.1)
        await asyncio.sleep(0.6)
        assert posted == []
    finally:
        await ch.close()


# --- a claimer proved dead by its successor (dispatcher.succession) ---------------------------
async def _dead_claimer_taken_over(declared: str | None, declared_after_ms: int = 0
                                   ) -> tuple[Env, ClaimLog, int, str, Trigger]:
    """A (incarnation ``aaaa…``) claims and is killed; ``declared`` (an incarnation) is
    declared dead, ``declared_after_ms`` after B first sees the row (0: before); B, which
    proves deaths on the same records, handles the due-scan's copy from the fire time on.
    Returns when B first saw the row (the true clock), A's claim id and the trigger."""
    env, queue, store = _world()
    queue.release = asyncio.Event()
    deaths = MemoryDispatcherDeaths(env.clock)
    t = await env.add(10_000)
    await env.enqueue(t)
    a_life = Incarnation("a" * 16)
    deps = DispatchDeps(env.settings, env.store, env.queue, env.clock, env.metrics)
    a = Delivery(deps, env.channel, env.callers, claim_ids=a_life.claim_id)
    task, _, a_claim = await _claimed_and_stalled(env, queue, a, t)
    task.cancel()  # killed
    await asyncio.gather(task, return_exceptions=True)
    if declared is not None and not declared_after_ms:
        await deaths.declare(declared, ttl_s=600)
    b_life = Succession(deaths, env.clock, env.metrics, incarnation=Incarnation("b" * 16))
    b = Dispatcher(env.settings, env.store, env.queue, env.channel, env.callers, env.clock,
                   env.metrics, succession=b_life,
                   notifiers=env.notifiers)
    seen_from_ms = env.clock.now_ms()
    await env.enqueue(t)
    if declared is not None and declared_after_ms:
        async def declare_later() -> None:
            await env.clock.sleep_until_ms(seen_from_ms + declared_after_ms)
            await deaths.declare(declared, ttl_s=600)

        later = asyncio.create_task(declare_later())
    await _b_until(env, b, t, t.fire_at_ms + 18_000)
    if declared is not None and declared_after_ms:
        await later
    return env, store, seen_from_ms, a_claim, t


async def test_a_claimer_proved_dead_is_taken_over_at_once() -> None:
    env, store, seen_from_ms, a_claim, t = await _dead_claimer_taken_over("a" * 16)
    [claim, takeover] = store.claims
    assert claim.claim_id == a_claim and incarnation_of(a_claim) == "a" * 16
    assert incarnation_of(takeover.claim_id) == "b" * 16
    assert takeover.at_ms <= seen_from_ms + 200  # no lease watched first
    assert env.row(t).status is Status.FIRED and env.row(t).attempts == 2
    assert len(env.channel.calls) == 1
    assert env.count("claim_takeovers_proved_dead_total") == 1


async def test_a_claimer_declared_dead_while_watched_is_taken_over_within_a_step() -> None:
    """Its successor's declaration comes while B watches the claim (the first one, or the
    next after a Redis flush lost the record): B asks again as it watches, and takes the
    claim over about a step after the declaration, not a lease later."""
    env, store, seen_from_ms, _, t = await _dead_claimer_taken_over("a" * 16, 3_000)
    [claim, takeover] = store.claims
    assert claim.lease_ms is not None and claim.lease_ms > 5_000
    assert seen_from_ms + 3_000 < takeover.at_ms <= seen_from_ms + 3_000 + WATCH_STEP_MS + 300
    assert env.row(t).status is Status.FIRED and len(env.channel.calls) == 1
    assert env.count("claim_takeovers_proved_dead_total") == 1


async def test_a_claimer_not_declared_dead_is_watched_for_its_lease() -> None:
    """Another process's death proves nothing about A: A's claim is watched as always."""
    env, store, seen_from_ms, _, _ = await _dead_claimer_taken_over("c" * 16)
    [claim, takeover] = store.claims
    assert claim.lease_ms is not None
    assert takeover.at_ms > seen_from_ms + claim.lease_ms + 1_000
    assert env.count("claim_takeovers_proved_dead_total") == 0
    assert len(env.channel.calls) == 1
