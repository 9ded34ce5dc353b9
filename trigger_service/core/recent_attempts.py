"""A trigger's recent attempts: where each is kept, and how they are paged (no I/O).

Each trigger keeps its attempts in a ring of ``kept`` slots (``TRIGGER_ATTEMPTS_KEPT``): an
attempt takes slot ``number mod kept``, replacing what was there, so a trigger never holds
more than ``kept`` of them however long its series runs, with no counter to read first. The
``number`` comes from what the dispatcher already holds (``attempt_number``): the
occurrence's sequence number times a stride, plus the attempt's place in its occurrence. It
grows with every attempt of a trigger, so a slot is only ever taken by a later attempt (and
the store's last write wins anyway). The stride is the first number from ``STRIDE_MIN`` up
that has no factor in common with ``kept``: a series delivered at its first attempt each time
then fills every slot, its last ``kept`` occurrences each in its own. What is kept for
sure: every attempt numbered within ``kept`` of the newest (all of a one-time trigger's last
``kept``; every attempt of a series' last ``kept // stride`` occurrences); older ones until
a later attempt takes their slot (a retry's number falls on a later occurrence's first
attempt's slot, so a series that retries shows a few gaps among its older attempts).

Read newest first: by start time, then occurrence id, channel and attempt, descending (ties
only between the channels of one wave). A page's cursor is the last item's key: the next
page starts just after it, so a page never repeats an item; attempts made between two pages
show on a new first page, not on the next.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass

from trigger_service.core.dead_letters import Attempt

STRIDE_MIN = 8  # numbers an occurrence has before the next one's start: its attempts
_CURSOR_MAX_CHARS = 400
_MS_MAX = 2**63 - 1  # what the bigint column holds


def stride(kept: int) -> int:
    """The numbers each occurrence is given: ``STRIDE_MIN`` or more, coprime with ``kept``."""
    n = STRIDE_MIN
    while math.gcd(n, kept) != 1:
        n += 1
    return n


def attempt_number(occurrence_seq: int, index: int, kept: int) -> int:
    """The number of the ``index``-th attempt (from 1) of occurrence ``occurrence_seq``.
    An occurrence with more than a stride of attempts shares numbers with the next one's
    first: those attempts are the older, and are the ones replaced."""
    return occurrence_seq * stride(kept) + index


def ring_slot(number: int, kept: int) -> int:
    """The slot of attempt ``number`` in a ring of ``kept``."""
    return number % kept


# (started_at_ms, occurrence_id, channel, attempt): the order key, newest first.
AttemptKey = tuple[int, str, str, int]


def key_of(a: Attempt) -> AttemptKey:
    return a.started_at_ms, a.occurrence_id, a.channel, a.attempt


@dataclass(frozen=True, slots=True)
class AttemptPage:
    items: list[Attempt]
    next_cursor: AttemptKey | None  # where the next page starts after; None: no more


def newest_first(attempts: Sequence[Attempt], kept: int) -> list[Attempt]:
    """The newest ``kept`` of ``attempts`` (a ring written with a larger ``kept`` before may
    hold more), newest first."""
    return sorted(attempts, key=key_of, reverse=True)[:kept]


def page(ordered: Sequence[Attempt], after: AttemptKey | None, limit: int) -> AttemptPage:
    """Up to ``limit`` of ``ordered`` (newest first) after the key ``after``."""
    rest = [a for a in ordered if after is None or key_of(a) < after]
    items = rest[:limit]
    return AttemptPage(items, key_of(items[-1]) if len(rest) > limit else None)


def encode_cursor(key: AttemptKey) -> str:
    return base64.urlsafe_b64encode(json.dumps(list(key)).encode()).decode().rstrip("=")


def decode_cursor(text: str) -> AttemptKey:
    """What ``encode_cursor`` made; ``ValueError`` otherwise."""
    try:
        if len(text) > _CURSOR_MAX_CHARS:
            raise ValueError("too long")
        started_ms, occurrence_id, channel, attempt = json.loads(
            base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
        if not (type(started_ms) is int and 0 <= started_ms <= _MS_MAX
                and isinstance(occurrence_id, str) and isinstance(channel, str)
                and type(attempt) is int and 0 <= attempt < 2**31):
            raise ValueError("bad cursor fields")
        return started_ms, occurrence_id, channel, attempt
    except (binascii.Error, TypeError, UnicodeDecodeError) as e:
        raise ValueError("not a cursor") from e
