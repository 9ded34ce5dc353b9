"""Debounce on create (``app.debouncing``) on the in-memory fakes with a manual clock."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace

import pytest

from tests.unit.app.support import NOW_MS, Env, make_env
from trigger_service.app.debouncing import HEAD_TTL_SLACK_S
from trigger_service.app.idempotency import Registered
from trigger_service.app.registration import RegisterRequest
from trigger_service.app.schedules import TimeRequest
from trigger_service.config.callers import CallbackPrefix, Caller
from trigger_service.core.debounce import Debounce, DebounceHead, DebounceMode
from trigger_service.core.errors import IdempotencyKeyReused, InvalidRequest
from trigger_service.core.model import Status
from trigger_service.core.time.recurrence import RuleKind

CALLER = Caller("orders", ("a" * 64,), (CallbackPrefix.parse("http://127.0.0.1:9000/"),))
REPLACE = Debounce("digest", DebounceMode.REPLACE)
KEEP = Debounce("digest", DebounceMode.KEEP)


def _request(env: Env, delay_ms: int, payload: object) -> RegisterRequest:
    now = env.clock.now_ms()
    return RegisterRequest("http://127.0.0.1:9000/cb", json.dumps(payload),
                           TimeRequest(at_ms=now + delay_ms), now)


async def _send(env: Env, debounce: Debounce, payload: object, delay_ms: int = 600_000,
                key: str | None = None, request_hash: str | None = None) -> Registered:
    done = await env.service.register(CALLER, _request(env, delay_ms, payload), key,
                                      request_hash or f"h{payload}", debounce=debounce)
    return done.registered


async def test_replace_keeps_one_trigger_with_the_last_payload_and_time() -> None:
    env = make_env()
    first = await _send(env, REPLACE, 1)
    assert not first.debounced and not first.replayed
    for n in range(2, 11):
        env.clock.advance_ms(200)
        got = await _send(env, REPLACE, n)
        assert got.debounced and got.trigger_id == first.trigger_id
    t = env.store.triggers[first.trigger_id]
    assert json.loads(t.payload_json) == 10 and t.fire_at_ms == NOW_MS + 1_800 + 600_000
    assert len(env.store.triggers) == 1 and t.status is Status.PENDING
    assert env.metrics.snapshot().get('triggers_debounced_total{mode="replace"}') == 9


async def test_keep_leaves_the_first_request_as_it_is() -> None:
    env = make_env()
    first = await _send(env, KEEP, "a", delay_ms=60_000)
    env.clock.advance_ms(1_000)
    again = await _send(env, KEEP, "b", delay_ms=600_000)
    assert again.debounced and again.trigger_id == first.trigger_id
    assert again.fire_at_ms == first.fire_at_ms == NOW_MS + 60_000
    assert json.loads(env.store.triggers[first.trigger_id].payload_json) == "a"


async def test_max_wait_bounds_a_trailing_debounce_from_the_first_request() -> None:
    env = make_env()
    bounded = Debounce("digest", DebounceMode.REPLACE, max_wait_s=30)
    first = await _send(env, bounded, 1, delay_ms=10_000)
    assert first.fire_at_ms == NOW_MS + 10_000
    env.clock.advance_ms(25_000)
    later = await _send(env, bounded, 2, delay_ms=10_000)  # asks +35 s: capped at +30 s
    assert later.fire_at_ms == NOW_MS + 30_000
    assert env.store.triggers[first.trigger_id].fire_at_ms == NOW_MS + 30_000


@pytest.mark.parametrize("status", [Status.IN_FLIGHT, Status.FIRED, Status.CANCELLED])
async def test_once_its_trigger_went_out_the_next_request_starts_another(
        status: Status) -> None:
    env = make_env()
    first = await _send(env, REPLACE, 1)
    t = env.store.triggers[first.trigger_id]
    env.store.triggers[first.trigger_id] = replace(t, status=status)
    env.clock.advance_ms(1_000)
    second = await _send(env, REPLACE, 2)
    assert not second.debounced and second.trigger_id != first.trigger_id
    assert json.loads(env.store.triggers[first.trigger_id].payload_json) == 1
    third = await _send(env, REPLACE, 3)
    assert third.debounced and third.trigger_id == second.trigger_id


async def test_a_trigger_retrying_an_attempt_is_not_joined() -> None:
    env = make_env()
    first = await _send(env, REPLACE, 1)
    t = env.store.triggers[first.trigger_id]
    env.store.triggers[first.trigger_id] = replace(t, attempts=1,
                                                   next_attempt_at_ms=NOW_MS + 5_000)
    env.clock.advance_ms(1)
    assert (await _send(env, REPLACE, 2)).trigger_id != first.trigger_id


async def test_concurrent_first_requests_make_one_trigger() -> None:
    env = make_env()
    got = await asyncio.gather(*(_send(env, REPLACE, n) for n in range(8)))
    assert len({r.trigger_id for r in got}) == 1
    assert sum(not r.debounced for r in got) == 1
    assert len(env.store.triggers) == 1


async def test_a_head_whose_first_writer_died_is_completed_by_the_next_request() -> None:
    env = make_env()
    await env.store.start_head(DebounceHead("orders", "digest", NOW_MS - 5_000), 3600)
    got = await _send(env, KEEP, "late")
    assert not got.debounced and got.trigger_id in env.store.triggers
    assert json.loads(env.store.triggers[got.trigger_id].payload_json) == "late"


def _head_outlives_its_trigger(env: Env, trigger_id: str) -> bool:
    """The head's expiry is at least as late as the trigger's row may live (from now)."""
    t = env.store.triggers[trigger_id]
    head = env.store.heads[("orders", "digest")]
    now = env.clock.now_ms()
    assert head.expires_at_ms is not None
    return head.expires_at_ms >= now + env.settings.index_ttl_s(t.fire_at_ms, now) * 1000


async def test_trailing_requests_renew_the_head_only_when_their_trigger_would_outlive_it(
        ) -> None:
    env = make_env()
    first = await _send(env, REPLACE, 0, delay_ms=60_000)
    assert env.store.head_writes == 1  # its start
    for n in range(1, 101):  # a request a minute, each a minute ahead: 100 minutes on
        env.clock.advance_ms(60_000)
        assert (await _send(env, REPLACE, n, delay_ms=60_000)).debounced
        assert _head_outlives_its_trigger(env, first.trigger_id)
    assert env.store.head_writes == 1  # the slack covers 100 minutes: no renewal
    env.clock.advance_ms(HEAD_TTL_SLACK_S * 1000)  # past the slack: renewed, once
    for n in range(101, 111):
        env.clock.advance_ms(1_000)
        assert (await _send(env, REPLACE, n, delay_ms=60_000)).debounced
        assert _head_outlives_its_trigger(env, first.trigger_id)
    assert env.store.head_writes == 2


async def test_a_head_with_max_wait_lives_past_its_deadline_and_is_never_renewed() -> None:
    env = make_env()
    bounded = Debounce("digest", DebounceMode.REPLACE, max_wait_s=7 * 86_400)
    first = await _send(env, bounded, 0, delay_ms=60_000)
    for n in range(1, 57):  # requests up to the deadline, each later
        env.clock.advance_ms(3 * 3_600_000)
        got = await _send(env, bounded, n, delay_ms=3_600_000)
        assert got.debounced and got.trigger_id == first.trigger_id
        assert _head_outlives_its_trigger(env, first.trigger_id)
    assert env.store.triggers[first.trigger_id].fire_at_ms == NOW_MS + 7 * 86_400_000
    assert env.store.head_writes == 1


async def test_a_head_written_without_its_expiry_is_renewed_once() -> None:
    env = make_env()
    first = await _send(env, REPLACE, 0)
    head = env.store.heads[("orders", "digest")]
    env.store.heads[("orders", "digest")] = replace(head, expires_at_ms=None)  # an old row
    for n in range(1, 4):
        env.clock.advance_ms(1_000)
        await _send(env, REPLACE, n)
        assert _head_outlives_its_trigger(env, first.trigger_id)
    assert env.store.head_writes == 2


async def test_keys_of_other_callers_and_other_keys_are_apart() -> None:
    env = make_env()
    a = await _send(env, REPLACE, 1)
    b = await _send(env, Debounce("other", DebounceMode.REPLACE), 1)
    other = replace(CALLER, name="billing")
    c = (await env.service.register(other, _request(env, 600_000, 1), None, "h",
                                    debounce=REPLACE)).registered
    assert len({a.trigger_id, b.trigger_id, c.trigger_id}) == 3


async def test_an_idempotency_key_replays_its_first_answer() -> None:
    env = make_env()
    first = await _send(env, REPLACE, 1, key="k1", request_hash="same")
    env.clock.advance_ms(1_000)
    again = await _send(env, REPLACE, 1, key="k1", request_hash="same")
    assert again.replayed and again.debounced and again.trigger_id == first.trigger_id
    assert again.fire_at_ms == first.fire_at_ms  # the retry moved nothing
    with pytest.raises(IdempotencyKeyReused):
        await _send(env, REPLACE, 2, key="k1", request_hash="another")


async def test_a_series_cannot_be_debounced() -> None:
    env = make_env()
    now = env.clock.now_ms()
    req = RegisterRequest("http://127.0.0.1:9000/cb", "null",
                          TimeRequest(at_ms=now + 60_000, rule_kind=RuleKind.RRULE,
                                      rule_text="FREQ=DAILY"), now)
    with pytest.raises(InvalidRequest) as e:
        await env.service.register(CALLER, req, None, "h", debounce=REPLACE)
    assert e.value.extra["field"] == "debounce"
