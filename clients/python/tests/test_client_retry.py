"""Creates always carry an Idempotency-Key and are retried with that same key (connection
errors, 429 with Retry-After, 5xx); what is not retried; sync and async alike."""

from __future__ import annotations

import httpx
import pytest

from mock_api import CREATED, Script, error
from trigger_client import (
    ApiError,
    AsyncTriggerClient,
    ConnectionFailed,
    InvalidRequest,
    QuotaExceeded,
    RateLimited,
    RetryPolicy,
    ServerError,
    TriggerClient,
)

POLICY = RetryPolicy(max_attempts=4, base_s=0.01, max_backoff_s=0.05, max_retry_after_s=30)


def sync_client(script: Script, sleeps: list[float]) -> TriggerClient:
    return TriggerClient("http://api", "tok", retry=POLICY, transport=script.transport,
                         sleep=sleeps.append)


def test_a_create_retried_after_503_a_lost_connection_and_429_keeps_one_key(
        script: Script) -> None:
    script.answers = [error(503, "dependency_unavailable"),
                      httpx.ConnectError("refused"),
                      error(429, "rate_limited", headers={"Retry-After": "7"}),
                      httpx.Response(201, json=CREATED)]
    sleeps: list[float] = []
    created = sync_client(script, sleeps).triggers.create(callback_url="http://x/cb", delay_s=5)
    assert created.trigger_id == CREATED["triggerId"] and not created.replayed
    keys = {r.headers["Idempotency-Key"] for r in script.requests}
    assert len(script.requests) == 4 and len(keys) == 1 and keys.pop().startswith("sdk-")
    assert len({r.content for r in script.requests}) == 1  # the identical body every time
    assert script.requests[0].headers["Authorization"] == "Bearer tok"
    # Retry-After honoured (7 s and at most a little jitter); the others are short backoffs
    assert len(sleeps) == 3 and 7 <= sleeps[2] <= 7.5 and max(sleeps[:2]) <= 0.05


def test_the_callers_key_is_used_and_a_replayed_answer_says_so(script: Script) -> None:
    script.answers = [httpx.Response(201, json=CREATED, headers={"Idempotent-Replayed": "true"})]
    created = sync_client(script, []).triggers.create(
        callback_url="http://x/cb", delay_s=5, idempotency_key="order-42")
    assert script.requests[0].headers["Idempotency-Key"] == "order-42" and created.replayed


def test_two_creates_get_two_keys(script: Script) -> None:
    script.answers = [httpx.Response(201, json=CREATED)]
    c = sync_client(script, [])
    c.triggers.create(delay_s=1, callback_url="http://x/cb")
    c.triggers.create(delay_s=1, callback_url="http://x/cb")
    assert len({r.headers["Idempotency-Key"] for r in script.requests}) == 2


def test_after_the_last_attempt_the_5xx_is_raised(script: Script) -> None:
    script.answers = [error(503, "dependency_unavailable", "try again")]
    sleeps: list[float] = []
    with pytest.raises(ServerError) as e:
        sync_client(script, sleeps).triggers.create(delay_s=1, callback_url="http://x/cb")
    assert (e.value.status, e.value.error, e.value.message) == (
        503, "dependency_unavailable", "try again")
    assert len(script.requests) == 4 and len(sleeps) == 3


def test_connection_errors_to_the_end_raise_connection_failed(script: Script) -> None:
    script.answers = [httpx.ConnectError("refused")]
    with pytest.raises(ConnectionFailed):
        sync_client(script, []).triggers.create(delay_s=1, callback_url="http://x/cb")
    assert len(script.requests) == 4


@pytest.mark.parametrize(("answer", "cls"), [
    (error(400, "invalid_request", field="delaySeconds"), InvalidRequest),
    (error(429, "quota_exceeded"), QuotaExceeded),
    (error(429, "rate_limited", headers={"Retry-After": "3600"}), RateLimited),  # too long
])
def test_what_is_not_retried(script: Script, answer: httpx.Response,
                             cls: type[ApiError]) -> None:
    script.answers = [answer]
    with pytest.raises(cls) as e:
        sync_client(script, []).triggers.create(delay_s=1, callback_url="http://x/cb")
    assert len(script.requests) == 1 and e.value.status == answer.status_code


def test_a_patch_is_not_retried(script: Script) -> None:
    script.answers = [error(503, "dependency_unavailable")]
    with pytest.raises(ServerError):
        sync_client(script, []).triggers.patch(CREATED["triggerId"], payload={"a": 1})
    assert len(script.requests) == 1
    assert script.requests[0].headers["Content-Type"] == "application/merge-patch+json"


async def test_the_async_client_retries_with_one_key_and_honours_retry_after(
        script: Script) -> None:
    script.answers = [error(429, "rate_limited", headers={"Retry-After": "2"}),
                      httpx.ReadTimeout("lost"), httpx.Response(201, json=CREATED)]
    sleeps: list[float] = []

    async def sleep(s: float) -> None:
        sleeps.append(s)

    async with AsyncTriggerClient("http://api", "tok", retry=POLICY,
                                  transport=script.transport, sleep=sleep) as c:
        created = await c.triggers.create(callback_url="http://x/cb", delay_s=5)
    assert created.status == "PENDING"
    assert len({r.headers["Idempotency-Key"] for r in script.requests}) == 1
    assert len(script.requests) == 3 and 2 <= sleeps[0] <= 2.5
