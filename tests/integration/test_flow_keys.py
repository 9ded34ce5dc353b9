"""Flow-control keys are per caller, on the real stack (Cassandra, SQS, Redis, a dispatcher
with the Redis limiter): caller B writes caller A's keys, its default ``<A>|<origin>`` with a
rate of one start in 2.8 hours and A's own key with its callbacks hanging, ahead of A's
triggers; A's are delivered on time, not hours out, and B's are spread as B asked."""

from __future__ import annotations

import time

import pytest

from tests.integration.conftest import ANY_RECIPIENT, Receiver, Stack
from tests.integration.test_batch import create_due_at

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

DEFAULT_RATE = 50  # A's default for the receiver's origin: 50 a second, 5 open at once
TINY_RATE = 0.0001  # one start in 10,000 s: each trigger of the key moves the next 2.8 h
ON_TIME_MS = 5_000  # "on time" on a loaded 2-core box running everything in one process
HANG_S = 12.0


@pytest.fixture
def caller_controls(receiver: Receiver) -> str:
    return (ANY_RECIPIENT + f'flow_control = [{{origin = "http://127.0.0.1:{receiver.port}", '
            f'rate_per_second = {DEFAULT_RATE}, parallelism = 5}}]\n')


@pytest.fixture
def extra_env() -> dict[str, str]:
    # Messages shown early enough that every slot is reserved before its due time; B's
    # hanging callbacks hold their places for the whole callback timeout.
    return {"TRIGGER_SQS_ENQUEUE_LEAD_S": "3", "TRIGGER_DISPATCH_CALLBACK_TIMEOUT_S": "8"}


async def test_another_callers_triggers_on_its_keys_leave_its_deliveries_on_time(
        stack: Stack) -> None:
    await stack.start_dispatcher()
    rec = stack.receiver
    rec.hang_s = HANG_S
    url = rec.base_url + "cb"
    a_default_key = f"{stack.caller}|http://127.0.0.1:{rec.port}"
    b_token = stack.token + "-other"
    due_ms = time.time_ns() // 1_000_000 + 8_000
    # B first, due a second earlier: on a shared key its slots come first.
    b_rate = await create_due_at(stack, 3, due_ms - 1_000, lambda _i: url, token=b_token,
                                 flowControl={"key": a_default_key,
                                              "ratePerSecond": TINY_RATE})
    b_slow = await create_due_at(stack, 2, due_ms - 1_000, lambda _i: url, token=b_token,
                                 flowControl={"key": "partner", "parallelism": 1})
    for tid in b_slow:
        rec.script[tid] = ["hang", "hang", "hang"]
    a_default = await create_due_at(stack, 5, due_ms, lambda _i: url)  # A's default key
    a_own = await create_due_at(stack, 3, due_ms, lambda _i: url,
                                flowControl={"key": "partner", "parallelism": 1})
    mine = set(a_default + a_own)
    arrived = await rec.wait_for(
        lambda: mine <= {a.trigger_id for a in rec.arrivals}
        and any(t in {a.trigger_id for a in rec.arrivals} for t in b_rate),
        8 + ON_TIME_MS / 1000 + 15)
    got = {a.trigger_id: a.at_ms for a in reversed(rec.arrivals)}  # the first arrival each
    late = {t: got[t] - due_ms if t in got else None for t in mine
            if t not in got or got[t] - due_ms > ON_TIME_MS}
    assert not late, f"A's late (ms after due) or missing (None): {late}"
    assert arrived and all(got[t] >= due_ms for t in mine)  # and never early
    # B's own herd is spread as B asked: one started, the others hours out.
    assert len([t for t in b_rate if t in got]) == 1
    print(f"\nA's {len(mine)} deliveries: at most "
          f"{max(got[t] for t in mine) - due_ms} ms after due")
