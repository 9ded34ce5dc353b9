"""triggerctl's reading of durations and times, and its DST marks (pure)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86_400}
_PART = re.compile(r"(\d+(?:\.\d+)?)([smhd])")


def parse_duration_s(text: str) -> float:
    """``"90"`` or ``"90s"``, ``"10m"``, ``"2h"``, ``"1d"``, ``"1h30m"`` in seconds."""
    t = text.strip().lower()
    try:
        return float(t)
    except ValueError:
        pass
    pos, total = 0, 0.0
    for m in _PART.finditer(t):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNIT_S[m.group(2)]
        pos = m.end()
    if pos != len(t) or not t:
        raise ValueError(f"not a duration: {text!r} (use e.g. 30s, 10m, 2h, 1d, 1h30m)")
    return total


def zone(name: str | None) -> tzinfo | None:
    """The IANA zone ``name`` (None for None); ValueError naming it when unknown."""
    if name is None:
        return None
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown time zone: {name!r}") from None


@dataclass(frozen=True, slots=True)
class At:
    """What ``--at`` means: an instant (``fire_at``) or a wall time (``local_time``)."""

    fire_at: datetime | None = None
    local_time: datetime | None = None


def parse_at(text: str, tz: str | None) -> At:
    """``--at "2027-03-14 09:00"``: with an offset an instant; else a wall time in ``tz``;
    with neither, a wall time in this machine's zone (sent as an instant)."""
    try:
        value = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"not a date and time: {text!r} (use 2027-03-14 09:00)") from None
    if value.tzinfo is not None:
        return At(fire_at=value)
    if tz is not None:
        zone(tz)  # fail here, naming it, rather than in the API
        return At(local_time=value)
    return At(fire_at=value.astimezone())


def local(instant: datetime, tz: tzinfo | None) -> datetime:
    """``instant`` in ``tz`` (this machine's zone when None)."""
    return instant.astimezone(tz) if tz is not None else instant.astimezone()


def dst_marks(instants: Sequence[datetime], tz: tzinfo | None) -> list[str]:
    """For each occurrence, why it looks different from the first one in ``tz``: its wall
    time moved (a DST gap or overlap resolved it elsewhere) and/or its UTC offset changed
    (it is across a DST change); empty when neither."""
    if not instants:
        return []
    first = local(instants[0], tz)
    out = []
    for instant in instants:
        lt = local(instant, tz)
        marks = []
        if lt.time() != first.time():
            marks.append(f"shifted to {lt:%H:%M}")
        if lt.utcoffset() != first.utcoffset():
            marks.append(f"DST (UTC{_offset(lt)})")
        out.append(", ".join(marks))
    return out


def _offset(value: datetime) -> str:
    text = value.strftime("%z")
    return f"{text[:3]}:{text[3:]}"


def show(instant: datetime, tz: tzinfo | None) -> str:
    """``2027-03-14 09:00:00 CET (+01:00) = 2027-03-14T08:00:00Z``."""
    lt = local(instant, tz)
    utc = instant.astimezone(ZoneInfo("UTC"))
    return f"{lt:%Y-%m-%d %H:%M:%S} {lt.tzname()} ({_offset(lt)}) = {utc:%Y-%m-%dT%H:%M:%SZ}"
