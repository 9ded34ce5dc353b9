"""Deadlines on the real stack (API → Cassandra → SQS → dispatcher → receiver): an occurrence
that cannot be delivered in time is dead-lettered ``expired`` instead of sent, a series goes
on to its next occurrence, a one-time trigger ends FAILED."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from tests.integration.conftest import Stack
from tests.integration.helpers import until
from trigger_service.core.time.timing import format_rfc3339_ms

pytestmark = pytest.mark.integration

DL = "/v1/dead-letters"


@pytest.fixture
def extra_env() -> dict[str, str]:
    return {"TRIGGER_API_MIN_RECURRENCE_INTERVAL_S": "1", "TRIGGER_DISPATCH_RETRY_BACKOFF_S": "1",
            "TRIGGER_DISPATCH_MAX_ATTEMPTS": "10"}


async def _create(stack: Stack, **fields: Any) -> str:
    status, body, _ = await stack.post(stack.body(**fields))
    assert status == 201, body
    return str(body["triggerId"])


async def _letters(stack: Stack, count: int, timeout_s: float = 20) -> list[dict[str, Any]]:
    """The caller's dead letters, once ``count`` are listed (or the time is up)."""
    items: list[dict[str, Any]] = []

    async def listed() -> bool:
        nonlocal items
        resp = await stack.client.get(DL, headers=stack.auth(), params={"limit": "500"})
        page = await resp.json()
        assert resp.status == 200, page
        items = list(page["items"])
        return len(items) >= count

    await until(listed, timeout_s)
    return items


def _expired(handle_metrics: dict[str, int], caller: str) -> int:
    return handle_metrics.get(f'occurrences_expired_total{{caller="{caller}"}}', 0)


async def test_a_series_occurrence_retried_past_its_lateness_expires_and_the_next_is_sent(
        stack: Stack) -> None:
    """The receiver answers 503 to the first occurrence: its retries (1 s apart) run past
    maxLatenessSeconds 3, so it is dead-lettered (when a retry would start past it, or when
    a retry's message comes back too late to be sent); the next one, 15 s later, is sent."""
    d = await stack.start_dispatcher()
    rec = stack.receiver
    tid = await _create(stack, delaySeconds=1, rrule="FREQ=SECONDLY;INTERVAL=15;COUNT=2",
                        maxLatenessSeconds=3)
    rec.script[tid] = [503] * 10
    [letter] = await _letters(stack, 1)
    rec.script[tid] = []  # the next occurrence is answered 200
    assert (letter["id"], letter["reason"]) == (f"{tid}.1", "expired")
    assert letter["lastError"].startswith("expired: not sent within maxLatenessSeconds 3")
    assert letter["lastError"].endswith("last attempt: HTTP 503")
    view = await stack.wait_status(tid, "FIRED", 30)
    assert view["status"] == "FIRED" and view["occurrencesFired"] == 1
    assert view["maxLatenessSeconds"] == 3 and view["expiresAt"] is None
    arrivals = rec.for_trigger(tid)
    first = [a for a in arrivals if a.body["occurrenceId"] == f"{tid}.1"]
    second = [a for a in arrivals if a.body["occurrenceId"] == f"{tid}.2"]
    assert 1 <= len(first) <= 4 and len(second) == 1  # (at least 1 s apart, within 3 s)
    assert letter["attemptCount"] == len(first)
    assert _expired(d.metrics.snapshot(), stack.caller) == 1
    assert len(await _letters(stack, 2, timeout_s=0)) == 1  # the delivered one is not listed


async def test_a_one_time_trigger_whose_expiry_passes_while_retrying_ends_failed(
        stack: Stack) -> None:
    d = await stack.start_dispatcher()
    rec = stack.receiver
    now_ms = time.time_ns() // 1_000_000
    expires_ms = now_ms + 3_500
    tid = await _create(stack, fireAt=format_rfc3339_ms(now_ms + 1_000),
                        expiresAt=format_rfc3339_ms(expires_ms))
    rec.script[tid] = [503] * 20
    view = await stack.wait_status(tid, "FAILED", 20)
    assert view["status"] == "FAILED", view
    assert view["lastError"].startswith("expired: not sent by expiresAt")
    assert view["lastError"].endswith("last attempt: HTTP 503")
    assert view["expiresAt"] == format_rfc3339_ms(expires_ms)
    [letter] = await _letters(stack, 1)
    assert (letter["id"], letter["reason"]) == (f"{tid}.1", "expired")
    arrivals = rec.for_trigger(tid)
    assert letter["attemptCount"] == len(arrivals) >= 1  # none after the expiry
    # Every attempt started by the expiry (the receiver stamps arrivals a little later).
    assert all(a.at_ms < expires_ms + 500 for a in arrivals)
    assert _expired(d.metrics.snapshot(), stack.caller) == 1


async def test_a_trigger_late_for_a_held_dispatcher_is_expired_never_sent(
        stack: Stack) -> None:
    """No dispatcher runs until well past its maxLatenessSeconds: it is not sent late."""
    tid = await _create(stack, delaySeconds=0.2, maxLatenessSeconds=1)
    await asyncio.sleep(2.5)
    d = await stack.start_dispatcher()
    view = await stack.wait_status(tid, "FAILED", 20)
    assert view["status"] == "FAILED" and view["lastError"].startswith(
        "expired: not sent within maxLatenessSeconds 1")
    [letter] = await _letters(stack, 1)
    assert letter["reason"] == "expired" and letter["attemptCount"] == 0
    assert stack.receiver.for_trigger(tid) == []
    assert _expired(d.metrics.snapshot(), stack.caller) == 1
