"""Backfill: the past occurrences of a series in a range, fired late, once each, oldest
first. What a backfill is, which occurrences it fires, each one's identity and its pace.
Pure: no I/O, no clock (``now_ms`` is an argument).

- *Which*: every occurrence of the series' schedule (as stored now: its rule, zone, DST
  policy and exclusions) whose scheduled instant lies in ``[from, min(to, now))``, found by
  the schedule's own bounded expansion (``core.time.recurrence.occurrences``), at most
  ``MAX_BACKFILL_OCCURRENCES`` of them: a wider range is refused before anything is made.
- *Identity*: each occurrence is fired by a one-time copy of the series whose trigger id is
  derived from (caller, series id, scheduled instant) as a keyed registration's is
  (``occurrence_key`` is its key, in a form no Idempotency-Key header can take, so no
  caller's key can name it): a second backfill over the same range finds the copies there
  and creates nothing.
- *Pace*: copy ``k`` (0 the oldest) fires ``k * pace_ms`` after the first, ``pace_ms`` the
  width of one rate slot of the series' flow control (its own, else its caller's default
  for its callback's origin), ``DEFAULT_PACE_MS`` without a rate bound: due times strictly
  in order, one per slot, so that a big backfill neither lands as one herd nor overtakes
  itself in the flow limiter.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from trigger_service.core.errors import InvalidRequest
from trigger_service.core.flow import FlowControl
from trigger_service.core.time.recurrence import Recurrence, occurrences
from trigger_service.core.time.zones import wall_of

MAX_BACKFILL_OCCURRENCES = 1_000  # occurrences one backfill fires (more: narrow the range)
DEFAULT_PACE_MS = 100  # between two copies' fire times when no flow control bounds a rate
# The wall times looked at past the range's end: a gap shifted by "later" or a zone's offset
# can move a wall time's instant by less than a day.
_WALL_MARGIN = timedelta(days=1)
_KEY_PREFIX = "backfill\x1f"  # \x1f: not printable, never an Idempotency-Key header's


@dataclass(frozen=True, slots=True)
class Backfill:
    """A backfill job's subject: the series, the range asked (``[from_ms, to_ms)``) and the
    pace of its copies' fire times."""

    trigger_id: str
    from_ms: int
    to_ms: int
    pace_ms: int

    def to_json(self) -> dict[str, Any]:
        """The stored form (``from_json`` reads it back)."""
        return {"triggerId": self.trigger_id, "fromMs": self.from_ms, "toMs": self.to_ms,
                "paceMs": self.pace_ms}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Backfill:
        return cls(str(d["triggerId"]), int(d["fromMs"]), int(d["toMs"]), int(d["paceMs"]))

    def dumps(self) -> str:
        return json.dumps({"backfill": self.to_json()}, separators=(",", ":"))


def loads(text: str) -> Backfill | None:
    """What ``Backfill.dumps`` stored; None for any other JSON (a filter)."""
    try:
        d = json.loads(text)
        return Backfill.from_json(d["backfill"]) if isinstance(d, dict) and "backfill" in d \
            else None
    except (ValueError, KeyError, TypeError):
        return None


def past_occurrences(rec: Recurrence, from_ms: int, to_ms: int, now_ms: int) -> list[int]:
    """The scheduled instants of ``rec``'s occurrences in ``[from_ms, min(to_ms, now_ms))``,
    oldest first. Raises ``InvalidRequest`` (field ``to``) past ``MAX_BACKFILL_OCCURRENCES``,
    counted while walking (the bound is checked before more are expanded), or
    ``RuleTooCostly`` when the expansion runs out of its step budget."""
    end_ms = min(to_ms, now_ms)
    out: list[int] = []
    for at_ms in _instants(rec, from_ms, end_ms):
        if len(out) >= MAX_BACKFILL_OCCURRENCES:
            raise InvalidRequest(f"to: the range holds more than {MAX_BACKFILL_OCCURRENCES} "
                                 "occurrences, the most one backfill fires; narrow it",
                                 field="to")
        out.append(at_ms)
    return out


def _instants(rec: Recurrence, from_ms: int, end_ms: int) -> Iterator[int]:
    limit = wall_of(end_ms, rec.zone) + _WALL_MARGIN
    for occ in occurrences(rec, limit=limit, not_before_ms=from_ms):
        if occ.at_ms >= end_ms:
            return
        yield occ.at_ms


def pace_ms(flow: FlowControl | None) -> int:
    """Between two copies' fire times: one rate slot of ``flow`` (rounded up to a whole
    millisecond), ``DEFAULT_PACE_MS`` without a rate bound."""
    if flow is None or not flow.rate_per_second:
        return DEFAULT_PACE_MS
    return max(1, math.ceil(flow.interval_ms))


def occurrence_key(series_id: str, at_ms: int) -> str:
    """The idempotency key of the copy that fires ``series_id``'s occurrence at ``at_ms``:
    its trigger id is ``keyed_trigger_id(caller, this)``, the same in every backfill."""
    return f"{_KEY_PREFIX}{series_id}\x1f{at_ms}"


def item_id(index: int, at_ms: int) -> str:
    """A backfill job's item: the occurrence's place (``index``, 0 the oldest: items are
    read in id order, so zero-padded) and its scheduled instant."""
    return f"{index:06d}:{at_ms}"


def parse_item_id(item: str) -> tuple[int, int]:
    """(index, scheduled instant) of an ``item_id``."""
    index, at_ms = item.split(":", 1)
    return int(index), int(at_ms)
