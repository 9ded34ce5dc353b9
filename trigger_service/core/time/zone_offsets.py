"""The range of UTC offsets a zone ever uses, read from its TZif data: what bounds how far a
wall time's instant can lie from the wall time itself.

Every instant a wall time ``W`` resolves to (``zones.resolve``, under any DST policy) is
``W - offset`` for one of the zone's offsets: the ``shift`` reading of a gap uses the offset
in force before the transition, an overlap either of its two. So with ``lo <= offset <= hi``
for all of them, ``W - hi <= instant <= W - lo``. Expansion uses both sides: ``W - hi`` is the
earliest a later wall time can resolve to (the instant-order buffering), ``W - lo`` the latest
an earlier one can (how far behind a cursor a series' anchor must stay).

The offsets are every local time type of the TZif v2+ data (``tzdata`` package, the file
``zoneinfo`` reads) and the standard and daylight offsets of its footer, the POSIX rule for
times after the last transition. A zone whose data cannot be read gets the widest bound any
zone in tzdata's history needs (``FALLBACK``). Pure: reads packaged data only, cached.
"""

from __future__ import annotations

import re
import struct
from datetime import timedelta
from functools import lru_cache
from importlib import resources

# Beyond tzdata's extremes: Asia/Manila's LMT (-15:56, before 1845) and the +15:13 of an
# Alaskan LMT (before 1867); today's range is -12 h to +14 h.
FALLBACK = (timedelta(hours=-16), timedelta(hours=16))

_HEADER = struct.Struct(">4sc15x6l")
_POSIX_NAME = r"(?:<[^>]*>|[A-Za-z]{3,})"
_POSIX_OFFSET = r"[+-]?\d{1,3}(?::\d{1,2}(?::\d{1,2})?)?"
_POSIX_RE = re.compile(
    rf"^{_POSIX_NAME}(?P<std>{_POSIX_OFFSET})(?P<dst>{_POSIX_NAME}(?P<dst_off>{_POSIX_OFFSET})?)?"
    r"(?:,|$)")


@lru_cache(maxsize=1024)
def offset_bounds(zone_name: str) -> tuple[timedelta, timedelta]:
    """``(lo, hi)``: the smallest and largest UTC offset ``zone_name`` ever uses (east of
    Greenwich positive), or :data:`FALLBACK` when its data cannot be read. Never raises."""
    try:
        data = resources.files("tzdata.zoneinfo").joinpath(*zone_name.split("/")).read_bytes()
        offsets = _offsets(data)
    except (OSError, ValueError, struct.error, ModuleNotFoundError):
        return FALLBACK
    if not offsets:
        return FALLBACK
    return timedelta(seconds=min(offsets)), timedelta(seconds=max(offsets))


def _offsets(data: bytes) -> set[int]:
    """Every offset (seconds) of a TZif file's v2 block and footer (v1 block for a v1 file)."""
    magic, version, *counts = _HEADER.unpack_from(data, 0)
    if magic != b"TZif":
        raise ValueError("not a TZif file")
    pos = _HEADER.size
    if version != b"\x00":  # skip the 32-bit block: the 64-bit one has every type
        isut, isstd, leap, times, types, chars = counts
        pos += times * 5 + types * 6 + chars + leap * 8 + isstd + isut
        _, _, *counts = _HEADER.unpack_from(data, pos)
        pos += _HEADER.size
        time_size = 8
    else:
        time_size = 4
    isut, isstd, leap, times, types, chars = counts
    pos += times * (time_size + 1)
    found = {struct.unpack_from(">l", data, pos + 6 * n)[0] for n in range(types)}
    if version == b"\x00":
        return found
    pos += types * 6 + chars + leap * (time_size + 4) + isstd + isut
    footer = data[pos:].strip(b"\n").decode("ascii")
    return found | _footer_offsets(footer)


def _footer_offsets(rule: str) -> set[int]:
    """The standard and daylight offsets of a POSIX TZ string (whose signs are west-positive;
    daylight defaults to standard + 1 h)."""
    if not rule:
        return set()
    m = _POSIX_RE.match(rule)
    if m is None:
        raise ValueError(f"unreadable TZ footer {rule!r}")
    std = -_posix_seconds(m.group("std"))
    out = {std}
    if m.group("dst"):
        dst_off = m.group("dst_off")
        out.add(-_posix_seconds(dst_off) if dst_off else std + 3600)
    return out


def _posix_seconds(text: str) -> int:
    sign = -1 if text.startswith("-") else 1
    parts = [int(p) for p in text.lstrip("+-").split(":")]
    h, m, s = [*parts, 0, 0][:3]
    return sign * (h * 3600 + m * 60 + s)
