"""Pause and resume of one trigger, as values: what the row becomes. Pure: every "now" is an
argument; the use cases (``app.pausing``) write it by LWT.

A paused trigger keeps its current occurrence (``fire_at_ms``), the one it has not fired: the
occurrences a resume finds missed are that one and the ones after it that are due by the
resume, so no pause time needs storing. They came due while the trigger was paused (the
current one may have been due already when it was paused, late or waiting for a retry: it
counts with them, as it never fired). Each is missed however little late it is: the catch-up
tolerance (``core.time.catchup``) is the slack of a running system's delivery, and nothing is
delivered during a pause. Resuming picks among them by the policy: ``all`` the first (the rest
follow in a row, as each step fires the next), ``latest`` the most recent, ``none`` none (the
series goes on at the first occurrence not yet due); occurrences more than the series' window
late never fire. A one-time trigger whose time passed fires at once under ``all`` and
``latest``, and is cancelled under ``none`` (with a ``last_error`` that says so).
"""

from __future__ import annotations

from dataclasses import replace

from trigger_service.core.model import Status, Trigger, route_for
from trigger_service.core.time import series
from trigger_service.core.time.catchup import CatchUpPolicy, Pick, is_missed

MISSED_WHILE_PAUSED = "its time passed while it was paused; resumed with policy none"
NOTHING_LEFT = "resumed after its last occurrence: none left to fire under its catch-up policy"
# How late an occurrence may be at a resume and not count as missed: not at all (the module's
# docstring). An occurrence due exactly at the resume is not missed: it comes due now.
PAUSED_TOLERANCE_MS = 0


def paused(t: Trigger) -> Trigger:
    """``t`` (PENDING) paused: a new revision, so a copy read before cannot be claimed."""
    return replace(t, status=Status.PAUSED, revision=(t.revision or 0) + 1)


def resumed(t: Trigger, *, now_ms: int, policy: CatchUpPolicy | None, horizon_days: int,
            direct_max_delay_s: int) -> tuple[Trigger, Pick]:
    """``t`` (PAUSED) resumed at ``now_ms`` by ``policy`` (None: the series' own, ``all``
    for a one-time trigger): PENDING at the occurrence picked, routed by how far ahead it is,
    or CANCELLED when nothing is left to fire. Every occurrence due before ``now_ms`` is
    missed, whatever the catch-up tolerance. Returns it with what was passed over."""
    bumped = (t.revision or 0) + 1
    if t.schedule is None or not t.schedule.recurring:
        missed = is_missed(t.fire_at_ms, now_ms, PAUSED_TOLERANCE_MS)
        if policy is CatchUpPolicy.NONE and missed:
            return replace(t, status=Status.CANCELLED, revision=bumped, next_attempt_at_ms=None,
                                 last_error=MISSED_WHILE_PAUSED), Pick(None, 0, 1)
        return replace(t, status=Status.PENDING, revision=bumped, route=route_for(
            t.due_at_ms(), now_ms, direct_max_delay_s)), Pick(None)
    nxt, chosen = series.catch_up(t, now_ms=now_ms, horizon_days=horizon_days,
                                  direct_max_delay_s=direct_max_delay_s, policy=policy,
                                  tolerance_ms=PAUSED_TOLERANCE_MS)
    if nxt is None:
        return replace(t, status=Status.CANCELLED, revision=bumped, next_attempt_at_ms=None,
                             last_error=NOTHING_LEFT), chosen
    return replace(nxt, status=Status.PENDING, revision=bumped, route=route_for(
        nxt.due_at_ms(), now_ms, direct_max_delay_s)), chosen
