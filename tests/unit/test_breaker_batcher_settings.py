from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from dispatcher.breaker import BreakerState, CircuitBreaker
from trigger_service.batcher import Batcher
from trigger_service.clock import ManualClock
from trigger_service.errors import ConfigError
from trigger_service.settings import VARIABLES, Settings


def test_breaker_opens_after_consecutive_failures_and_half_opens() -> None:
    clock = ManualClock()
    b = CircuitBreaker(clock, fail_max=3, reset_s=10)
    for _ in range(2):
        assert b.try_acquire() == 0
        b.record_failure()
    b.record_success()  # a success resets the run of failures
    for _ in range(3):
        assert b.try_acquire() == 0
        b.record_failure()
    assert b.state is BreakerState.OPEN
    assert b.try_acquire() == 10_000
    clock.advance_ms(4_000)
    assert b.try_acquire() == 6_000
    clock.advance_ms(6_000)
    assert b.state is BreakerState.HALF_OPEN
    assert b.try_acquire() == 0  # one trial
    assert b.try_acquire() > 0  # a second caller waits for the trial
    b.record_failure()  # the trial failed: open again for a full period
    assert b.state is BreakerState.OPEN and b.try_acquire() == 10_000
    clock.advance_ms(10_000)
    assert b.try_acquire() == 0
    b.record_success()
    assert b.state is BreakerState.CLOSED and b.try_acquire() == 0


def test_breaker_release_gives_back_the_trial() -> None:
    clock = ManualClock()
    b = CircuitBreaker(clock, fail_max=1, reset_s=1)
    b.record_failure()
    clock.advance_ms(1000)
    assert b.try_acquire() == 0
    b.release()
    assert b.try_acquire() == 0


async def test_batcher_groups_concurrent_items_and_reports_errors() -> None:
    batches: list[list[int]] = []

    async def flush(items: Sequence[int]) -> None:
        batches.append(list(items))
        if 13 in items:
            raise RuntimeError("boom")

    b: Batcher[int] = Batcher(flush, max_batch=10, linger_s=0.01)
    results = await asyncio.gather(*(b.submit(i) for i in range(25)), return_exceptions=True)
    assert sorted(x for batch in batches for x in batch) == list(range(25))
    assert all(len(batch) <= 10 for batch in batches) and len(batches) == 3
    failed = {i for i, r in enumerate(results) if isinstance(r, RuntimeError)}
    bad_batch = next(batch for batch in batches if 13 in batch)
    assert failed == set(bad_batch)
    await b.drain()


def test_settings_defaults_and_errors() -> None:
    s = Settings.from_env({})
    assert s.shards == 64 and s.dispatch.retry_backoff_s == (10, 30, 120, 600, 1800)
    assert s.dispatch.max_attempts == 6 and s.direct_max_delay_s == 900
    assert s.dispatch.visibility_timeout_s > s.dispatch.callback_timeout_s
    for env in ({"TRIGGER_SHARDS": "x"}, {"TRIGGER_DIRECT_MAX_DELAY_S": "901"},
                {"TRIGGER_NOPE": "1"}, {"TRIGGER_RETRY_BACKOFF_S": "1,-2"},
                {"TRIGGER_LOG_FORMAT": "xml"}):
        with pytest.raises(ConfigError) as e:
            Settings.from_env(env)
        assert next(iter(env)) in str(e.value)


def test_every_variable_default_parses_to_the_dataclass_default() -> None:
    env = {v.name: v.default for v in VARIABLES}
    from_defaults = Settings.from_env(env)
    assert from_defaults.api.port == Settings().api.port
    assert from_defaults.dispatch == Settings().dispatch
    assert from_defaults.sqs == Settings().sqs
    assert from_defaults.cassandra.hosts == Settings().cassandra.hosts


def test_sweep_settings_must_not_let_a_trigger_land_behind_a_scan() -> None:
    with pytest.raises(ConfigError) as e:
        Settings.from_env({"TRIGGER_DIRECT_MAX_DELAY_S": "60", "TRIGGER_SWEEP_HORIZON_S": "60"})
    assert "TRIGGER_SWEEP_HORIZON_S" in str(e.value)
    with pytest.raises(ConfigError):
        Settings.from_env({"TRIGGER_SWEEP_HORIZON_S": "35", "TRIGGER_SWEEP_INTERVAL_S": "30"})
    ok = Settings.from_env({"TRIGGER_DIRECT_MAX_DELAY_S": "6", "TRIGGER_SWEEP_HORIZON_S": "4",
                            "TRIGGER_SWEEP_INTERVAL_S": "1", "TRIGGER_SWEEP_PROMOTE_AHEAD_S": "2"})
    assert ok.sweep.horizon_s == 4
