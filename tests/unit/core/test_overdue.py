from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from trigger_service.config.settings import Settings
from trigger_service.core.model import CLAIM_STALE_SLACK_MS, Route, Status, Trigger, is_overdue

NOW = 1_800_000_000_000
GRACE_MS = 3_600_000


TIMEOUT_MS = int(Settings().dispatch.callback_timeout_s * 1000)


def trig(status: Status, fire_ago_ms: int, **kw: Any) -> Trigger:
    t = Trigger("trg_x", "c", "http://x/", "null", NOW - fire_ago_ms, 0, 0, Route.DIRECT)
    return replace(t, status=status, **kw)


@pytest.mark.parametrize(
    ("t", "leak"),
    [
        (trig(Status.PENDING, GRACE_MS + 1), True),
        (trig(Status.PENDING, GRACE_MS - 1), False),  # still within the grace
        # waiting for a retry that is not due yet is not a leak
        (trig(Status.PENDING, GRACE_MS * 2, next_attempt_at_ms=NOW + 1000, attempts=2), False),
        (trig(Status.IN_FLIGHT, GRACE_MS * 2, claimed_at_ms=NOW - GRACE_MS - 60_000), True),
        (trig(Status.IN_FLIGHT, GRACE_MS * 2, claimed_at_ms=NOW - 1000), False),  # fresh claim
        # stale (a timeout and the slack after the delivery started): a leak at once
        (trig(Status.IN_FLIGHT, GRACE_MS * 2,
              claimed_at_ms=NOW - TIMEOUT_MS - CLAIM_STALE_SLACK_MS - 1), True),
        (trig(Status.IN_FLIGHT, GRACE_MS * 2,
              claimed_at_ms=NOW - TIMEOUT_MS - CLAIM_STALE_SLACK_MS + 1), False),
        (trig(Status.FIRED, GRACE_MS * 2), False),
        (trig(Status.CANCELLED, GRACE_MS * 2), False),
        (trig(Status.FAILED, GRACE_MS * 2), False),
    ],
)
def test_leak_rule(t: Trigger, leak: bool) -> None:
    assert is_overdue(t, NOW, grace_ms=GRACE_MS, callback_timeout_ms=TIMEOUT_MS) is leak
