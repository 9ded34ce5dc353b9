"""When a call is tried again, and how long to wait first (pure; used by both clients).

A call marked retryable (every create and snooze, which always carry an Idempotency-Key;
reads; cancel and acknowledge, which are idempotent) is tried again after a connection error
(nothing answered, or the answer was lost), a ``429 rate_limited`` or any 5xx. The wait is
full-jitter exponential backoff, and never shorter than the answer's ``Retry-After``.
``429 quota_exceeded`` is not retried: waiting alone does not free a quota.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any

import httpx
import tenacity

from trigger_client.errors import retry_after_s


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """``max_attempts`` in all (1 = no retry); backoff ``base_s * 2**(n-1)`` with full
    jitter up to ``max_backoff_s``; a ``Retry-After`` is honoured up to ``max_retry_after_s``
    (longer than that, the answer is returned as it is: the caller decides)."""

    max_attempts: int = 4
    base_s: float = 0.25
    max_backoff_s: float = 8.0
    max_retry_after_s: float = 60.0


NO_RETRY = RetryPolicy(max_attempts=1)


def retryable_response(response: httpx.Response, policy: RetryPolicy) -> bool:
    """Whether this answer is worth another attempt."""
    if response.status_code >= 500:
        return True
    if response.status_code != 429:
        return False
    try:
        code = json.loads(response.content).get("error")
    except (ValueError, AttributeError):
        code = None
    if code == "quota_exceeded":
        return False
    wait_s = retry_after_s(response)
    return wait_s is None or wait_s <= policy.max_retry_after_s


def wait_s(state: tenacity.RetryCallState, policy: RetryPolicy,
           rand: random.Random | None = None) -> float:
    """Seconds before the next attempt of ``state``."""
    n = state.attempt_number
    backoff_s = (rand or random).uniform(0, min(policy.max_backoff_s,
                                                policy.base_s * 2 ** (n - 1)))
    outcome = state.outcome
    if outcome is not None and not outcome.failed:
        result = outcome.result()
        if isinstance(result, httpx.Response):
            after_s = retry_after_s(result)
            if after_s is not None:
                # the server's minimum, plus a little jitter so waiters do not come back
                # together
                return after_s + (rand or random).uniform(0, min(1.0, policy.base_s))
    return backoff_s


def _retry_if(policy: RetryPolicy) -> tenacity.retry_base:
    return (tenacity.retry_if_exception_type(httpx.TransportError)
            | tenacity.retry_if_result(lambda r: isinstance(r, httpx.Response)
                                       and retryable_response(r, policy)))


def _last_outcome(state: tenacity.RetryCallState) -> httpx.Response:
    """After the last attempt: its answer, or its exception raised again."""
    assert state.outcome is not None
    result: httpx.Response = state.outcome.result()
    return result


def retrying_kwargs(policy: RetryPolicy) -> dict[str, Any]:
    """The arguments of ``tenacity.Retrying``/``AsyncRetrying`` for ``policy`` (the caller
    adds ``sleep``)."""
    return {"stop": tenacity.stop_after_attempt(policy.max_attempts),
            "wait": lambda state: wait_s(state, policy),
            "retry": _retry_if(policy),
            "retry_error_callback": _last_outcome,
            "reraise": True}
