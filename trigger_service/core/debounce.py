"""Debounce (``"debounce": {"key", "mode", "maxWaitSeconds"}`` on create): the values of one
caller's debounce key. Pure; the use case is ``app.debouncing``.

A key names one *head* at a time: the open trigger its requests go to. A head is known by
when it started (``started_at_ms``, the first request's time): the trigger's id is derived
from (caller, key, that instant) exactly as a keyed registration's is from its key
(``core.model.keyed_trigger_id``), so every request that finds the head finds one id, and
concurrent first writers of that id make one row (``TriggerCatalog.create_keyed``). Once the
trigger is no longer open for debouncing (it is being delivered, fired, failed, cancelled or
retrying an attempt) the next request starts a new head, with a new instant and so a new id
and new occurrence ids.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from trigger_service.core.model import Status, Trigger

KEY_MAX_LEN = 200
MAX_WAIT_S = 366 * 86_400  # a year and a day: longer is a schedule, not a debounce
# A debounce key's derived Idempotency-Key starts with a control character, which an
# Idempotency-Key sent by a caller (printable ASCII) never holds: the two never meet.
_DERIVED_PREFIX = "\x1fdebounce\x1f"


class DebounceMode(StrEnum):
    REPLACE = "replace"  # trailing: the last request's payload and fire time
    KEEP = "keep"  # leading: the first request's, later ones only answered


@dataclass(frozen=True, slots=True)
class Debounce:
    """A request's ``debounce`` object, its shape checked."""

    key: str
    mode: DebounceMode
    max_wait_s: int | None = None  # replace: never later than this after the head started


@dataclass(frozen=True, slots=True)
class DebounceHead:
    """The head of (caller, key): started at ``started_at_ms`` by a request whose
    ``max_wait_s`` bounds it. ``expires_at_ms``: when its row expires, as written (None:
    not known, a row written before heads carried it); ``app.debouncing`` renews the head
    only when its trigger may outlive that."""

    caller: str
    key: str
    started_at_ms: int
    max_wait_s: int | None = None
    expires_at_ms: int | None = None

    @property
    def idem_key(self) -> str:
        """The derived key its trigger is created with (its id: ``keyed_trigger_id``)."""
        return f"{_DERIVED_PREFIX}{self.key}\x1f{self.started_at_ms}"

    @property
    def deadline_ms(self) -> int | None:
        """The latest fire time ``replace`` may set (None: no bound)."""
        return None if self.max_wait_s is None else self.started_at_ms + self.max_wait_s * 1000


def open_for_debounce(t: Trigger) -> bool:
    """Whether requests may still join ``t``: pending (or paused) and never attempted. A
    trigger being delivered, finished or retrying has gone out with its payload: the next
    request starts another."""
    return t.status in (Status.PENDING, Status.PAUSED) and t.attempts == 0


def debounced_fire_at_ms(head: DebounceHead, requested_ms: int) -> int:
    """The fire time ``replace`` gives the head's trigger for a request asking
    ``requested_ms``: that, but never past the head's deadline."""
    deadline = head.deadline_ms
    return requested_ms if deadline is None else min(requested_ms, deadline)
