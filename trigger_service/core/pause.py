"""Pause and resume of one trigger, as values: what the row becomes. Pure: every "now" is an
argument; the use cases (``app.pausing``) write it by LWT.

A paused trigger keeps its current occurrence (``fire_at_ms``): the occurrences that came due
while it was paused are that one and the ones after it up to the resume, so no pause time
needs storing. Resuming picks among them by the catch-up policy (``core.time.catchup``):
``all`` the first missed (the rest follow in a row, as each step fires the next missed one),
``latest`` the most recent missed, ``none`` the first not yet due; occurrences more than the
series' window late never fire. A one-time trigger whose time passed while paused fires at
once under ``all`` and ``latest``, and is cancelled under ``none`` (with a ``last_error``
that says so).
"""

from __future__ import annotations

from dataclasses import replace

from trigger_service.core.model import Status, Trigger, route_for
from trigger_service.core.time import series
from trigger_service.core.time.catchup import MISSED_TOLERANCE_MS, CatchUpPolicy, Pick, is_missed

MISSED_WHILE_PAUSED = "its time passed while it was paused; resumed with policy none"
NOTHING_LEFT = "resumed after its last occurrence: none left to fire under its catch-up policy"


def paused(t: Trigger) -> Trigger:
    """``t`` (PENDING) paused: a new revision, so a copy read before cannot be claimed."""
    return replace(t, status=Status.PAUSED, revision=(t.revision or 0) + 1)


def resumed(t: Trigger, *, now_ms: int, policy: CatchUpPolicy | None, horizon_days: int,
            direct_max_delay_s: int, tolerance_ms: int = MISSED_TOLERANCE_MS
            ) -> tuple[Trigger, Pick]:
    """``t`` (PAUSED) resumed at ``now_ms`` by ``policy`` (None: the series' own, ``all``
    for a one-time trigger): PENDING at the occurrence picked, routed by how far ahead it is,
    or CANCELLED when nothing is left to fire. Returns it with what was passed over."""
    bumped = (t.revision or 0) + 1
    if t.schedule is None or not t.schedule.recurring:
        if policy is CatchUpPolicy.NONE and is_missed(t.fire_at_ms, now_ms, tolerance_ms):
            return replace(t, status=Status.CANCELLED, revision=bumped, next_attempt_at_ms=None,
                                 last_error=MISSED_WHILE_PAUSED), Pick(None, 0, 1)
        return replace(t, status=Status.PENDING, revision=bumped, route=route_for(
            t.due_at_ms(), now_ms, direct_max_delay_s)), Pick(None)
    nxt, chosen = series.catch_up(t, now_ms=now_ms, horizon_days=horizon_days,
                                  direct_max_delay_s=direct_max_delay_s, policy=policy,
                                  tolerance_ms=tolerance_ms)
    if nxt is None:
        return replace(t, status=Status.CANCELLED, revision=bumped, next_attempt_at_ms=None,
                             last_error=NOTHING_LEFT), chosen
    return replace(nxt, status=Status.PENDING, revision=bumped, route=route_for(
        nxt.due_at_ms(), now_ms, direct_max_delay_s)), chosen
