"""A series' catch-up policy: what happens to occurrences that came due while nothing could
fire them (an outage, a pause, a long retry). Pure: every "now" is an argument.

Definitions (the contract, the same everywhere the series steps):

- an occurrence is **missed** if it is more than the tolerance late (``MISSED_TOLERANCE_MS``,
  60 s; ``TRIGGER_API_CATCH_UP_TOLERANCE_S``) when it is looked at: when the series steps
  after an occurrence finished, or when a dispatcher is about to deliver it (its first
  attempt). At a resume every occurrence that came due while paused is missed, however
  little late (``core.pause``: the tolerance is the slack of a running system's delivery, and
  a pause delivers nothing);
- a missed occurrence more than ``window_s`` late **never fires**, whatever the policy;
- of the missed ones inside the window: ``all`` fires them in order (the first, and each
  step after it the next), ``latest`` only the most recent, ``none`` none of them: the series
  goes on at the first occurrence not missed.

The default, ``CatchUp()`` (``all`` with a window of a day), is how every series behaved
before the policy could be chosen. Skipped occurrences are not counted in ``occurrence_seq``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from trigger_service.core.errors import InvalidRequest
from trigger_service.core.time.occurrence import Occurrence

# How late an occurrence may be and still count as on time (not missed): a dispatcher's
# claim lead, a busy queue or a sweeper's promotion delay make a few seconds normal.
MISSED_TOLERANCE_MS = 60_000
DEFAULT_WINDOW_S = 86_400
MIN_WINDOW_S = MISSED_TOLERANCE_MS // 1000
MAX_WINDOW_S = 366 * 86_400


class CatchUpPolicy(StrEnum):
    ALL = "all"
    LATEST = "latest"
    NONE = "none"


class SkipReason(StrEnum):
    """Why an occurrence was passed over (the ``reason`` of ``occurrences_skipped_total``)."""

    WINDOW = "window"  # more than the window late
    POLICY = "policy"  # inside the window, left out by ``latest`` or ``none``


@dataclass(frozen=True, slots=True)
class CatchUp:
    policy: CatchUpPolicy = CatchUpPolicy.ALL
    window_s: int = DEFAULT_WINDOW_S

    def to_json(self) -> dict[str, object]:
        return {"policy": self.policy.value, "windowSeconds": self.window_s}

    @classmethod
    def from_json(cls, d: dict[str, Any] | None) -> CatchUp:
        """Read back ``to_json``; None (stored before the policy existed) is the default."""
        if d is None:
            return cls()
        return cls(CatchUpPolicy(d["policy"]), int(d["windowSeconds"]))


def parse_policy(value: object, field: str = "policy") -> CatchUpPolicy:
    """A policy name from a request. Raises ``InvalidRequest`` naming ``field``."""
    try:
        return CatchUpPolicy(value) if isinstance(value, str) else CatchUpPolicy("?")
    except ValueError as e:
        raise InvalidRequest(f"{field}: must be 'all', 'latest' or 'none'", field=field) from e


def parse_catch_up(value: object) -> CatchUp:
    """``catchUp`` of a create or PATCH body: ``{"policy": ..., "windowSeconds": N}``, both
    optional (the default's). Raises ``InvalidRequest`` naming ``catchUp``."""
    if not isinstance(value, dict):
        raise InvalidRequest('catchUp: must be an object such as {"policy": "latest", '
                             '"windowSeconds": 3600}', field="catchUp")
    extra = sorted(set(value) - {"policy", "windowSeconds"})
    if extra:
        raise InvalidRequest(f"catchUp: unknown key {extra[0]!r}", field="catchUp")
    policy = parse_policy(value.get("policy", CatchUpPolicy.ALL.value), "catchUp")
    window = value.get("windowSeconds", DEFAULT_WINDOW_S)
    if (isinstance(window, bool) or not isinstance(window, int)
            or not MIN_WINDOW_S <= window <= MAX_WINDOW_S):
        raise InvalidRequest(f"catchUp: windowSeconds must be an integer from {MIN_WINDOW_S} "
                             f"to {MAX_WINDOW_S}", field="catchUp")
    return CatchUp(policy, window)


@dataclass(frozen=True, slots=True)
class Pick:
    """Where a series goes on: ``occurrence`` (None: the schedule has no more), and how many
    occurrences before it were passed over, by reason."""

    occurrence: Occurrence | None
    skipped_window: int = 0
    skipped_policy: int = 0

    def skipped(self) -> dict[SkipReason, int]:
        return {r: n for r, n in ((SkipReason.WINDOW, self.skipped_window),
                                  (SkipReason.POLICY, self.skipped_policy)) if n}


def is_missed(at_ms: int, now_ms: int, tolerance_ms: int = MISSED_TOLERANCE_MS) -> bool:
    """More than the tolerance late at ``now_ms``."""
    return at_ms < now_ms - tolerance_ms


def pick(candidates: Iterable[Occurrence], *, now_ms: int, catch_up: CatchUp,
         policy: CatchUpPolicy | None = None,
         tolerance_ms: int = MISSED_TOLERANCE_MS) -> Pick:
    """The occurrence a series goes on at, among ``candidates`` (its occurrences not yet
    fired, in order), by ``policy`` (default: ``catch_up``'s) and ``catch_up``'s window.
    Stops reading ``candidates`` at the first occurrence not missed."""
    chosen = policy or catch_up.policy
    oldest_ms = now_ms - catch_up.window_s * 1000
    window = in_window = 0
    latest: Occurrence | None = None
    for occ in candidates:
        if not is_missed(occ.at_ms, now_ms, tolerance_ms):
            if latest is not None:  # (only ``latest`` keeps one)
                return Pick(latest, window, in_window - 1)
            return Pick(occ, window, in_window)
        if occ.at_ms < oldest_ms:
            window += 1
        elif chosen is CatchUpPolicy.ALL:
            return Pick(occ, window, 0)
        else:
            in_window += 1
            if chosen is CatchUpPolicy.LATEST:
                latest = occ
    if latest is not None:
        return Pick(latest, window, in_window - 1)
    return Pick(None, window, in_window)
