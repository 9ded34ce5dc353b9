"""What a receiver's answer tells the dispatcher: 410 Gone, Retry-After, per-caller attempt
policy, and which answers count against an origin's circuit breaker."""

from __future__ import annotations

import pytest

from tests.unit.dispatcher.fakes import CALLER, START_MS, Env, breaker_of, failed, settle
from tests.unit.dispatcher.test_delivery import attempt_now, deliver_now
from trigger_service.adapters.memory.queue import QueuedDeadLetter
from trigger_service.config.callers import CallerRegistry
from trigger_service.core.model import Status
from trigger_service.core.ports.values import DeliveryResult

pytestmark = pytest.mark.timeout(10)


def callers_with(**policy: object) -> CallerRegistry:
    table = {"token_sha256": "a" * 64, "callback_prefixes": ["https://orders.internal/"],
             **policy}
    return CallerRegistry.from_mapping({"callers": {CALLER: table}})


async def test_410_gone_dead_letters_at_once(env: Env) -> None:
    env.with_dispatch(max_attempts=6)
    env.channel.results = [failed("HTTP 410", 410)]
    t = await env.add(0)
    await deliver_now(env, t)
    row = env.row(t)
    assert (row.status, row.attempts) == (Status.FAILED, 1)
    assert env.queue.dead_letters == [
        QueuedDeadLetter(t.trigger_id, t.fire_at_ms, "gone: HTTP 410")]


@pytest.mark.parametrize(("retry_after_s", "backoff_s", "expected_s"), [
    (4, 1, 4),  # the receiver's wait wins over a shorter backoff
    (0.2, 1, 1),  # never sooner than the backoff
    (10_000, 1, 3600),  # capped by TRIGGER_DISPATCH_RETRY_AFTER_MAX_S
    (None, 7, 7),
])
async def test_retry_after_sets_the_next_attempt(env: Env, retry_after_s: float | None,
                                                 backoff_s: int, expected_s: int) -> None:
    env.with_dispatch(retry_backoff_s=(backoff_s,))
    env.channel.results = [DeliveryResult(False, 429, "HTTP 429", retry_after_s)]
    t = await env.add(0)
    await attempt_now(env, t)
    row = env.row(t)
    assert row.status is Status.PENDING
    assert row.next_attempt_at_ms == START_MS + expected_s * 1000


async def test_a_callers_own_attempts_and_backoff(env: Env) -> None:
    env.callers = callers_with(max_attempts=2, retry_backoff_s=[5])
    env.with_dispatch(max_attempts=6, retry_backoff_s=(60,))
    env.channel.results = [failed(), failed()]
    t = await env.add(0)
    await env.enqueue(t)
    d = env.dispatcher()
    assert await d.run_once() == 1
    await settle()
    assert env.row(t).next_attempt_at_ms == START_MS + 5_000  # the caller's backoff
    env.clock.set_ms(START_MS + 5_000)
    await d.drain()  # the retry, held until then
    assert (env.row(t).status, env.row(t).attempts) == (Status.FAILED, 2)


async def test_max_age_gives_up_once_the_fire_time_is_that_old(env: Env) -> None:
    env.callers = callers_with(max_age_s=60)
    env.channel.results = [failed()]
    t = await env.add(-61_000)
    await deliver_now(env, t)
    assert env.row(t).status is Status.FAILED
    assert env.queue.dead_letters[0].reason == "max_age: HTTP 500"


@pytest.mark.parametrize(("result", "counts"), [
    (DeliveryResult(False, None, "timeout"), True),
    (DeliveryResult(False, 503, "HTTP 503"), True),
    (DeliveryResult(False, 429, "HTTP 429"), True),
    (DeliveryResult(False, 410, "HTTP 410"), False),
    (DeliveryResult(False, 404, "HTTP 404"), False),
    (DeliveryResult(True, 204, None), False),
])
def test_only_answers_that_show_the_origin_in_trouble_count_for_its_breaker(
        result: DeliveryResult, counts: bool) -> None:
    assert result.origin_failed is counts


async def test_4xx_answers_never_open_the_breaker(env: Env) -> None:
    env.with_dispatch(breaker_fail_max=2, max_attempts=1)
    d = env.dispatcher()
    for status in (404, 404, 404, 500, 500):
        env.channel.results = [failed(f"HTTP {status}", status)]
        await d.handle(await env.receive_one(await env.add(0)))
        if status == 404:
            assert breaker_of(d.delivery).try_acquire() == 0  # still closed
            breaker_of(d.delivery).release()
    assert breaker_of(d.delivery).try_acquire() > 0  # two 500s in a row open it
