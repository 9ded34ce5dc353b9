"""Deadlines: how late an occurrence may still be sent. Pure: every "now" is an
argument.

A trigger may carry either bound, or both (the earlier one wins):

- ``expires_at_ms`` (``expiresAt``): no occurrence is sent after this instant, and a series
  has no occurrence whose fire time is after it (it ends there, as at its rule's end);
- ``max_lateness_s`` (``maxLatenessSeconds``): each occurrence is sent at most this long
  after its fire time. The fire time is the jittered instant (``Trigger.fire_at_ms``), as
  ``core.time.catchup`` counts lateness: jitter is part of when it was meant to fire.

An occurrence is **expired** at ``at_ms`` (the instant a send would start: now, or a retry's
start) when ``at_ms`` is after its deadline. The dispatcher checks before the claim and
before it schedules a retry; an expired occurrence is dead-lettered ``expired`` instead of
sent, and a series goes on to its next occurrence.
"""

from __future__ import annotations

from trigger_service.core.errors import ExpiresBeforeFire, InvalidRequest
from trigger_service.core.model import Trigger
from trigger_service.core.time.timing import format_rfc3339_ms, parse_rfc3339_ms

MAX_LATENESS_MAX_S = 366 * 86_400  # a year: any longer is no deadline at all
DEADLINE_FIELDS = ("expiresAt", "maxLatenessSeconds")  # a create or PATCH body's


def deadline_ms(t: Trigger) -> int | None:
    """The last instant ``t``'s current occurrence may be sent at (None: no deadline)."""
    bounds = [b for b in (t.expires_at_ms,
                          None if t.max_lateness_s is None
                          else t.fire_at_ms + t.max_lateness_s * 1000) if b is not None]
    return min(bounds) if bounds else None


def expired(t: Trigger, at_ms: int) -> bool:
    """Would a send of ``t``'s current occurrence starting at ``at_ms`` be past its deadline?"""
    last_ms = deadline_ms(t)
    return last_ms is not None and at_ms > last_ms


def beyond_expiry(t: Trigger, fire_at_ms: int) -> bool:
    """Is an occurrence firing at ``fire_at_ms`` after ``t``'s ``expires_at_ms`` (a series
    has no such occurrence)?"""
    return t.expires_at_ms is not None and fire_at_ms > t.expires_at_ms


def expiry_error(t: Trigger, at_ms: int, last_error: str | None = None) -> str:
    """``last_error``'s text for an occurrence that expired at ``at_ms`` (``with_reason``
    puts ``expired: `` in front): which bound passed, how late, and the last attempt's
    error if there was one."""
    late_s = max(0, at_ms - t.fire_at_ms) // 1000
    lateness_ms = None if t.max_lateness_s is None else t.max_lateness_s * 1000
    if t.expires_at_ms is not None and (lateness_ms is None
                                        or t.expires_at_ms <= t.fire_at_ms + lateness_ms):
        text = f"not sent by expiresAt {format_rfc3339_ms(t.expires_at_ms)}"
    else:
        text = f"not sent within maxLatenessSeconds {t.max_lateness_s}"
    text += f" (fire time {format_rfc3339_ms(t.fire_at_ms)}, {late_s} s late)"
    return f"{text}; last attempt: {last_error}" if last_error else text


def parse_max_lateness(value: object) -> int | None:
    """``maxLatenessSeconds``: absent or null is none; else whole seconds, at least 1."""
    if value is None:
        return None
    if (isinstance(value, bool) or not isinstance(value, int)
            or not 1 <= value <= MAX_LATENESS_MAX_S):
        raise InvalidRequest(f"maxLatenessSeconds: a whole number of seconds from 1 to "
                             f"{MAX_LATENESS_MAX_S}", field="maxLatenessSeconds")
    return value


def parse_expires_at(value: object) -> int | None:
    """``expiresAt``: absent or null is none; else an RFC 3339 instant with ``Z`` or an
    offset (as ``fireAt``)."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidRequest("expiresAt: must be an RFC 3339 string with Z or an offset",
                             field="expiresAt")
    try:
        return parse_rfc3339_ms(value)
    except (ValueError, OverflowError) as e:
        raise InvalidRequest(f"expiresAt: {e}", field="expiresAt") from e


def check_expiry(expires_at_ms: int | None, first_fire_ms: int) -> None:
    """Refuse an ``expiresAt`` before the first fire time (nothing could ever be sent).
    Raises ``ExpiresBeforeFire`` naming ``expiresAt``."""
    if expires_at_ms is not None and expires_at_ms < first_fire_ms:
        raise ExpiresBeforeFire(
            f"expiresAt: {format_rfc3339_ms(expires_at_ms)} is before the first fire time "
            f"{format_rfc3339_ms(first_fire_ms)}", field="expiresAt")
