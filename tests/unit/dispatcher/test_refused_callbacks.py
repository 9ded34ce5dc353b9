"""What the dispatcher does with a callback the SSRF guard refuses: no retry, a
dead letter ``callback_not_allowed``, the origin's breaker untouched; a literal forbidden
address under a broad prefix is not even handed to the channel."""

from __future__ import annotations

import asyncio

import pytest

from tests.unit.dispatcher.fakes import CALLER, Env, breaker_of
from tests.unit.dispatcher.test_delivery import deliver_now
from tests.unit.dispatcher.test_fanout import EMAIL
from trigger_service.config.callers import CallerRegistry
from trigger_service.core.dead_letters import DeadLetterReason
from trigger_service.core.model import Status
from trigger_service.core.notify.plan import DeliveryPlan
from trigger_service.core.ports.values import DeliveryResult

pytestmark = pytest.mark.timeout(10)

REFUSED = DeliveryResult(False, None, "refused: rebind.test resolves to 127.0.0.1, loopback",
                         refused=True)


async def test_a_refused_address_dead_letters_at_once(env: Env) -> None:
    env.with_dispatch(max_attempts=6, breaker_fail_max=1)
    env.channel.results = [REFUSED]
    t = await env.add(0)
    d = env.dispatcher()
    await d.handle(await env.receive_one(t))
    row = env.row(t)
    assert (row.status, row.attempts) == (Status.FAILED, 1)
    letter = env.store.dead_letters[t.occurrence_id]
    assert letter.reason is DeadLetterReason.CALLBACK_NOT_ALLOWED
    assert env.queue.dead_letters[0].reason.startswith("callback_not_allowed: refused: ")
    # A refusal says nothing about the origin: with fail_max=1 a failure would open it.
    assert breaker_of(d.delivery).try_acquire() == 0


@pytest.mark.parametrize("url", ["http://127.0.0.1/cb", "http://2130706433/cb",
                                 "http://[::ffff:127.0.0.1]/cb", "http://localhost/cb",
                                 "http://169.254.169.254/latest"])
async def test_a_literal_forbidden_address_is_never_sent(env: Env, url: str) -> None:
    env.callers = CallerRegistry.from_mapping({"callers": {CALLER: {
        "token_sha256": "a" * 64, "callback_prefixes": ["http://", "https://"]}}})
    t = await env.add(0, callback_url=url)
    await deliver_now(env, t)
    assert env.channel.calls == []
    assert env.store.dead_letters[t.occurrence_id].reason is (
        DeadLetterReason.CALLBACK_NOT_ALLOWED)


async def test_a_refused_callback_channel_is_not_retried(env: Env) -> None:
    env.with_dispatch(max_attempts=6)
    env.channel.results = [REFUSED]
    t = await env.add(0, plan=DeliveryPlan((EMAIL,)))
    await env.enqueue(t)
    d = env.dispatcher()
    for m in await env.receive():
        await asyncio.wait_for(d.handle(m), 5)
    row = env.row(t)
    assert row.status is Status.FAILED
    assert [(s.type, s.status.value, s.attempts) for s in row.channel_states] == [
        ("email", "DELIVERED", 1), ("http", "FAILED", 1)]
    assert env.store.dead_letters[t.occurrence_id].reason is (
        DeadLetterReason.CALLBACK_NOT_ALLOWED)
