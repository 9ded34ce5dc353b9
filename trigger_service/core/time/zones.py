"""Wall-clock time in IANA zones, and the DST policy that turns a wall time into instants.

A wall time is a naive ``datetime`` read in a zone. Most map to one instant; around a DST
transition one may map to none (a gap: 02:30 on a spring-forward night) or two (an overlap:
01:30 on a fall-back night). :class:`DstPolicy` decides, per trigger:

- gap ``shift`` (RFC 5545's reading): the wall time is read with the offset in force *before*
  the transition, so 02:30 in New York on 2027-03-14 becomes 03:30 EDT (07:30Z); ``skip``
  drops it;
- overlap ``first`` / ``second``: the earlier / later of the two instants; ``both``: both.

Zone rules come from the PyPI ``tzdata`` package (``trigger_service/__init__.py`` switches the
OS's zone files off), so every host resolves the same wall time to the same instant.

Pure: no I/O beyond ``zoneinfo`` reading its packaged rules; no clock.
"""

from __future__ import annotations

import zoneinfo
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum

import tzdata

from trigger_service.core.errors import InvalidRequest
from trigger_service.core.time.timing import datetime_to_ms, ms_to_datetime

UTC_ZONE = "UTC"
# The IANA release of the zone rules in use (e.g. "2026f"), recorded with each wall-clock
# occurrence so a later release's changes can be found and re-resolved.
TZDATA_VERSION: str = tzdata.IANA_VERSION
_MAX_ZONE_NAME = 64


class Gap(StrEnum):
    SHIFT = "shift"
    SKIP = "skip"


class Overlap(StrEnum):
    FIRST = "first"
    SECOND = "second"
    BOTH = "both"


@dataclass(frozen=True, slots=True)
class DstPolicy:
    gap: Gap = Gap.SHIFT
    overlap: Overlap = Overlap.FIRST

    def to_json(self) -> dict[str, str]:
        return {"gap": self.gap.value, "overlap": self.overlap.value}


class WallKind(StrEnum):
    NORMAL = "normal"
    GAP = "gap"  # does not exist in the zone
    OVERLAP = "overlap"  # happens twice


def load_zone(name: object, field: str = "timeZone") -> zoneinfo.ZoneInfo:
    """The zone called ``name`` (an IANA name such as ``America/New_York``); raises
    ``InvalidRequest`` naming ``field`` for anything else."""
    if not isinstance(name, str) or not name or len(name) > _MAX_ZONE_NAME:
        raise InvalidRequest(f"{field}: must be an IANA time zone name such as "
                             "'America/New_York'", field=field)
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError) as e:
        raise InvalidRequest(f"{field}: unknown IANA time zone {name!r}", field=field) from e


def classify(wall: datetime, tz: zoneinfo.ZoneInfo) -> WallKind:
    """Whether ``wall`` (naive) exists once, not at all, or twice in ``tz``."""
    early = wall.replace(tzinfo=tz, fold=0)
    late = wall.replace(tzinfo=tz, fold=1)
    if early.utcoffset() == late.utcoffset():
        return WallKind.NORMAL
    round_trip = early.astimezone(UTC).astimezone(tz).replace(tzinfo=None)
    return WallKind.GAP if round_trip != wall else WallKind.OVERLAP


def resolve(wall: datetime, tz: zoneinfo.ZoneInfo, policy: DstPolicy) -> tuple[int, ...]:
    """The instants (epoch ms, ascending) ``wall`` stands for under ``policy``: one, none
    (a gap under ``skip``) or two (an overlap under ``both``)."""
    kind = classify(wall, tz)
    # PEP 495: in a gap fold=0 uses the offset before the transition (``shift``); in an
    # overlap fold=0 is the earlier instant.
    early = datetime_to_ms(wall.replace(tzinfo=tz, fold=0))
    if kind is WallKind.NORMAL:
        return (early,)
    if kind is WallKind.GAP:
        return () if policy.gap is Gap.SKIP else (early,)
    late = datetime_to_ms(wall.replace(tzinfo=tz, fold=1))
    first, second = min(early, late), max(early, late)
    if policy.overlap is Overlap.FIRST:
        return (first,)
    if policy.overlap is Overlap.SECOND:
        return (second,)
    return (first, second)


def wall_of(at_ms: int, tz: zoneinfo.ZoneInfo) -> datetime:
    """The naive wall time in ``tz`` at the instant ``at_ms`` (milliseconds kept)."""
    return ms_to_datetime(at_ms).astimezone(tz).replace(tzinfo=None)


# An instant is its wall time minus the zone's UTC offset, and offsets lie within
# [-12 h, +14 h]: a wall time later than W always resolves to an instant after W - 14 h.
MAX_UTC_OFFSET = timedelta(hours=14)
