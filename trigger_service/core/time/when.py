"""``when``: a time in words ("in 2 hours", "tomorrow at 9am", "every weekday at 9am") → the
time fields the API already has. Pure computation: no I/O; "now" is an argument (the
injected Clock's), never the machine's clock or local zone.

A phrase is read one of three ways, and :class:`Resolved` says which:

- **relative** ("in 2 hours", "in 1 hour and 30 minutes", "90 minutes from now", "now":
  :func:`is_relative`): seconds, minutes, hours, days and weeks of *elapsed* time added to
  now — an instant; no zone needed (with ``timeZone`` too, the instant is the same).
  Behaves as ``fireAt``.
- **wall clock** (anything else dateparser reads: "tomorrow 9am", "next friday 17:30",
  "march 4th at 9:15pm", "in 2 months"): a wall time in ``timeZone`` (required), read by
  dateparser with the zone's wall time now as its base and resolved by ``core.time.zones`` like a
  ``localTime``. Behaves as ``localTime`` + ``timeZone``.
- **recurring** ("every …", "daily at 7:30"): :mod:`trigger_service.core.time.when_rules`'s grammar
  → an RRULE; DTSTART is the rule's first occurrence from now. Behaves as ``localTime`` (that
  first occurrence's wall time) + ``timeZone`` (UTC for zone-free rules) + ``rrule``.

The edges, decided once here:

- a wall time that happens twice (01:30 on a fall-back night) is **ambiguous** — a 400 with
  both instants as ``candidates`` — unless the request gives ``dstPolicy`` (``overlap``
  ``first``/``second``/``both`` then picks, as for ``localTime``);
- a wall time that does not exist (02:30 on a spring-forward night) is **shifted** forward
  by the gap, as ``localTime`` and ``rrule`` are by default (02:30 EST → 03:30 EDT); with
  ``dstPolicy.gap`` ``skip`` it is ``422 nonexistent_local_time``;
- a numeric date ``a/b`` (or ``a.b``, with an optional year) that is a valid date read both
  month-first and day-first, and a different day each way (``03/04``), is **ambiguous**:
  a 400 with both readings' instants; ``13/04`` or ``04/13`` or ``04/04`` have one reading;
- a phrase whose instant is before now ("yesterday", "today at 9am" at 10:00) is refused
  with the instant in the message; so are a zone written in the text ("9am EST": give
  ``timeZone``), a bare number ("9": dateparser reads a month), and a clock time the
  result does not show (dateparser drops what it cannot read: "tomorrow at 25:00").

dateparser is confined to :func:`_dateparser`: ``languages=["en"]``, ``RELATIVE_BASE`` from
the argument, ``TIMEZONE="UTC"`` and naive results (so it never consults the local zone:
the base is already the zone's wall time), ``PREFER_DATES_FROM="future"``, and only its
``relative-time`` and ``absolute-time`` parsers (no epoch timestamps, no "0930"). It does
not convert zones itself because its conversion picks one instant of an overlap silently;
:mod:`trigger_service.core.time.zones` resolves wall times here as everywhere else.
"""

from __future__ import annotations

import re
import zoneinfo
from dataclasses import dataclass
from datetime import UTC, datetime

import dateparser
from dateparser.timezone_parser import pop_tz_offset_from_string

from trigger_service.core.errors import InvalidRequest, NonexistentLocalTime
from trigger_service.core.time import when_rules
from trigger_service.core.time.recurrence import Recurrence, RuleKind, parse_rule
from trigger_service.core.time.series import first_occurrence
from trigger_service.core.time.timing import datetime_to_ms, format_rfc3339_ms, ms_to_datetime
from trigger_service.core.time.zones import (
    UTC_ZONE,
    DstPolicy,
    Gap,
    WallKind,
    classify,
    load_zone,
    resolve,
    wall_of,
)

MAX_WHEN_LEN = 200
# How far a rule's first occurrence is looked for (the default horizon; first_fire() then
# holds it to TRIGGER_API_MAX_FIRE_AHEAD_DAYS). Every rule of the grammar matches within 8
# years.
_SEARCH_DAYS = 3660
_AMOUNT = r"(?:\d{1,6}(?:\.\d{1,3})?|an?|one)"
_UNIT = r"(?:seconds?|secs?|minutes?|mins?|hours?|hrs?|days?|weeks?)"
# The list of durations is possessive (``*+``): once read, no duration is given back. With a
# plain ``*`` the white space on both sides of the optional separator let a failing match
# split the same spaces in exponentially many ways (a 200-character phrase: about a minute of
# CPU). Giving back never helps here: what follows the list (the end, or " from now") cannot
# be read as a duration, and an amount never starts with what a shorter unit leaves (``s``).
_DURS = rf"{_AMOUNT}\s+{_UNIT}(?:\s*(?:,|and|,\s*and)?\s*{_AMOUNT}\s+{_UNIT})*+"
_RELATIVE_RE = re.compile(rf"in\s+{_DURS}|{_DURS}\s+from\s+now|now")
_NUMERIC_DATE_RE = re.compile(r"\b(\d{1,2})[/.](\d{1,2})(?:[/.](\d{4}|\d{2}))?\b")
# "9.30pm", "at 9.30": a clock time with a dot, which dateparser reads as midnight; made "9:30".
_DOTTED_CLOCK_RE = re.compile(r"(?<![\d./])(\d{1,2})\.(\d{2})(?=\s*[ap]\.?m\b)|"
                              r"(?<=\bat )(\d{1,2})\.(\d{2})(?![\d./])")
_CLOCK_IN_TEXT_RE = re.compile(r"\b(\d{1,2}(?::\d{2})?\s*[ap]\.?m\.?|\d{1,2}:\d{2})(?![\w:])")
# Regions whose numeric dates are month first (the rest of the world: day first).
_MONTH_FIRST_REGIONS = frozenset({"US", "PH", "FM", "MH", "PW", "AS", "GU", "MP", "PR", "UM",
                                  "VI"})
_MONTH_NAMES = ["january", "february", "march", "april", "may", "june", "july", "august",
                "september", "october", "november", "december"]


@dataclass(frozen=True, slots=True)
class Resolved:
    """What a phrase means, as the API's own time fields: exactly one of ``at_ms`` (a
    relative phrase) and ``local_time`` (a wall time in ``time_zone``: the fire time, or
    DTSTART when ``rrule`` is set). ``fire_at_ms`` is the first instant it fires."""

    text: str
    fire_at_ms: int
    at_ms: int | None = None
    local_time: datetime | None = None
    time_zone: str | None = None
    rrule: str | None = None


def resolve_when(text: str, *, now_ms: int, time_zone: str | None,
                 dst: DstPolicy | None = None, locale: str | None = None) -> Resolved:
    """Read ``text`` at ``now_ms`` in ``time_zone`` (an IANA name, or None). ``dst`` is the
    request's explicit ``dstPolicy`` (None: none given — an overlap is then ambiguous).
    ``locale`` (a BCP 47 tag such as ``en-US`` or ``de-DE``, or None) is a hint for the order
    of a numeric date: with a region, ``03/04`` is read month-first for the regions that
    write dates so (:func:`month_first`) and day-first for the others, not ambiguous;
    without a region (or None) such a date stays ambiguous. The language stays English.
    Raises ``InvalidRequest`` naming ``when`` (with ``candidates`` when ambiguous) or
    ``timeZone``, or ``NonexistentLocalTime`` (a gap under ``skip``). Never anything else."""
    try:
        return _resolve(text, now_ms, time_zone, dst, month_first(locale))
    except OverflowError as e:  # a reading (or its search) past the year 9999
        raise _bad(f"{text!r} reaches beyond the range of supported times (years 1 to "
                   "9999)") from e


def month_first(locale: str | None) -> bool | None:
    """The date order a locale hint gives: True (month first: the United States and the few
    regions that follow it), False (day first: every other region), None (no region: no
    hint). Only the region subtag counts (``en-GB`` is day-first, ``es-US`` month-first)."""
    parts = [p for p in (locale or "").replace("_", "-").split("-") if p]
    region = next((p.upper() for p in parts[1:] if len(p) == 2 and p.isalpha()), None)
    return None if region is None else region in _MONTH_FIRST_REGIONS


def is_relative(text: str) -> bool:
    """Whether ``text`` (normalised: lower case, single spaces) is a relative phrase, read as
    elapsed time from now; at most a millisecond or so for any phrase of the maximum length."""
    return _RELATIVE_RE.fullmatch(text) is not None


def _resolve(text: str, now_ms: int, time_zone: str | None,
             dst: DstPolicy | None, month_first_hint: bool | None) -> Resolved:
    norm = _DOTTED_CLOCK_RE.sub(_colon, " ".join(text.lower().split()))
    if not norm or len(text) > MAX_WHEN_LEN:
        raise _bad(f"1 to {MAX_WHEN_LEN} characters")
    if time_zone is not None:
        load_zone(time_zone)  # checked even where a phrase does not need it
    if when_rules.is_recurring(norm):
        return _recurring(text, norm, now_ms, time_zone, dst or DstPolicy())
    if is_relative(norm):
        base = ms_to_datetime(now_ms).replace(tzinfo=None)
        at = _dateparser(norm, base)
        if at is None:
            raise _bad(f"cannot read {text!r} as a time")
        return Resolved(text, datetime_to_ms(at.replace(tzinfo=UTC)),
                        at_ms=datetime_to_ms(at.replace(tzinfo=UTC)), time_zone=time_zone)
    return _wall_clock(text, norm, now_ms, time_zone, dst, month_first_hint)


def _colon(m: re.Match[str]) -> str:
    return f"{m.group(1) or m.group(3)}:{m.group(2) or m.group(4)}"


def warm_up() -> None:
    """Read one phrase of each kind at a fixed instant: dateparser loads its English data and
    compiles its patterns on first use (about a second), which no request should wait for.
    Called once per API process before it listens."""
    for phrase in ("tomorrow at 9am", "in 2 hours"):
        resolve_when(phrase, now_ms=1_800_000_000_000, time_zone=UTC_ZONE)


def _bad(message: str, **extra: object) -> InvalidRequest:
    return InvalidRequest(f"when: {message}", field="when", **extra)


def _zone_required(text: str) -> InvalidRequest:
    return InvalidRequest(f"timeZone: required with a wall-clock phrase in when ({text!r}); "
                          "only relative ones ('in 2 hours', 'every 15 minutes') go without",
                          field="timeZone")


def _wall_clock(text: str, norm: str, now_ms: int, time_zone: str | None,
                dst: DstPolicy | None, month_first_hint: bool | None) -> Resolved:
    if time_zone is None:
        raise _zone_required(text)
    tz = load_zone(time_zone)
    _refuse_quirks(text, norm)
    base = wall_of(now_ms, tz)
    walls = [_checked(text, norm, w) for w in _readings(text, norm, base, month_first_hint)]
    readings = [(w, _instants(text, w, tz, dst)) for w in walls]
    candidates = sorted({ms for _, instants in readings for ms in instants})
    if len(readings) > 1 and len(candidates) > 1:
        raise _ambiguous(text, "a numeric date read month-first and day-first", candidates)
    wall, instants = readings[0]
    if dst is None and len(instants) > 1:
        raise _ambiguous(text, f"{wall.isoformat()} happens twice in {time_zone} (the clocks "
                         "go back); give dstPolicy.overlap 'first' or 'second', or fireAt",
                         candidates)
    if instants[0] < now_ms:
        raise _bad(f"{text!r} resolves to {format_rfc3339_ms(instants[0])}, in the past")
    return Resolved(text, instants[0], local_time=wall, time_zone=time_zone)


def _instants(text: str, wall: datetime, tz: zoneinfo.ZoneInfo,
              dst: DstPolicy | None) -> list[int]:
    """The instants ``wall`` stands for: both of an overlap unless ``dst`` picks; a gap is
    shifted (or, under ``skip``, refused)."""
    policy = dst or DstPolicy()
    if classify(wall, tz) is WallKind.OVERLAP and dst is None:
        early = datetime_to_ms(wall.replace(tzinfo=tz, fold=0))
        late = datetime_to_ms(wall.replace(tzinfo=tz, fold=1))
        return sorted({early, late})
    instants = list(resolve(wall, tz, policy))
    if not instants:
        assert policy.gap is Gap.SKIP
        raise NonexistentLocalTime(
            f"when: {text!r} is {wall.isoformat()}, which does not exist in {tz} (a DST gap) "
            "and dstPolicy.gap is 'skip'", field="when")
    return instants


def _ambiguous(text: str, why: str, candidates: list[int]) -> InvalidRequest:
    return _bad(f"{text!r} is ambiguous: {why}; the candidates are listed",
                candidates=[format_rfc3339_ms(ms) for ms in candidates])


def _refuse_quirks(text: str, norm: str) -> None:
    """What dateparser would read wrongly or half: a zone in the text, a bare number."""
    if norm.replace(" ", "").isdigit():
        raise _bad(f"{text!r} is a bare number; say what it is ('at 9am', 'on the 9th')")
    try:
        _, zone = pop_tz_offset_from_string(norm)
    except Exception:  # a library quirk must be a 400 (or pass), never a 500
        zone = None
    if zone is not None:
        raise _bad(f"{text!r} names a zone or offset; give the zone in timeZone instead")


def _readings(text: str, norm: str, base: datetime,
              month_first_hint: bool | None) -> list[datetime]:
    """dateparser's reading of ``norm`` from ``base``; two when a numeric date reads as two
    different days (month-first, then day-first) and no locale hint picks one."""
    m = _NUMERIC_DATE_RE.search(norm)
    spelled: list[str] = []
    if m is not None:
        a, b, year = int(m.group(1)), int(m.group(2)), m.group(3)
        orders = {None: ((a, b), (b, a)), True: ((a, b),), False: ((b, a),)}[month_first_hint]
        for month, day in orders:
            if 1 <= month <= 12 and _valid_day(month, day, year):
                name = f"{_MONTH_NAMES[month - 1]} {day}" + (f" {_year(year)}" if year else "")
                spelled.append(norm[:m.start()] + name + norm[m.end():])
        if not spelled:
            raise _bad(f"{m.group(0)!r} is not a date " + {
                None: "month-first or day-first", True: "month-first (the locale's order)",
                False: "day-first (the locale's order)"}[month_first_hint])
        spelled = list(dict.fromkeys(spelled)) if a != b else spelled[:1]
    out = []
    for phrase in spelled or [norm]:
        at = _dateparser(phrase, base)
        if at is None:
            raise _bad(f"cannot read {text!r} as a time; e.g. 'tomorrow at 9am', 'next friday "
                       "17:30', 'in 2 hours', 'every weekday at 9am'")
        out.append(at)
    return list(dict.fromkeys(out))


def _year(text: str) -> int:
    return int(text) + 2000 if len(text) == 2 else int(text)


def _valid_day(month: int, day: int, year: str | None) -> bool:
    try:
        datetime(_year(year) if year else 2000, month, day)  # 2000: Feb 29 is a date
    except ValueError:
        return False
    return True


def _checked(text: str, norm: str, wall: datetime) -> datetime:
    """``wall`` truncated to the second, after checking that every clock time written in
    ``norm`` is the one read (dateparser drops a part it cannot read, e.g. ``25:00``)."""
    for written in _CLOCK_IN_TEXT_RE.findall(norm):
        hour, minute = when_rules.clock_time(" ".join(written.split()))
        if (wall.hour, wall.minute) != (hour, minute):
            raise _bad(f"{text!r}: the time {written!r} could not be read with the rest")
    return wall.replace(microsecond=0)


def _dateparser(phrase: str, base: datetime) -> datetime | None:
    """dateparser's reading of ``phrase`` as a naive wall time from ``base`` (naive), or None.
    Whatever it raises is treated as unreadable (its quirks must never become a 500).
    ``DATE_ORDER`` hardly matters: :func:`_readings` spells numeric dates out first."""
    settings = {"RELATIVE_BASE": base, "TIMEZONE": "UTC", "RETURN_AS_TIMEZONE_AWARE": False,
                "PREFER_DATES_FROM": "future", "DATE_ORDER": "MDY",
                "PARSERS": ["relative-time", "absolute-time"]}
    try:
        at: object = dateparser.parse(phrase, languages=["en"], settings=settings)
    except Exception:  # any library failure means "not understood": a 400, never a 500
        return None
    return at if isinstance(at, datetime) and at.tzinfo is None else None


def _recurring(text: str, norm: str, now_ms: int, time_zone: str | None,
               dst: DstPolicy) -> Resolved:
    rule = when_rules.parse_rule(norm)
    if rule.needs_zone and time_zone is None:
        raise _zone_required(text)
    zone = time_zone or UTC_ZONE
    tz = load_zone(zone)
    # The first occurrence is looked for without COUNT/UNTIL: DTSTART below (the search's
    # start) is not an occurrence and must not use up a COUNT.
    rrule = parse_rule(RuleKind.RRULE, rule.rrule, tz, wall_of(now_ms, tz))
    if rule.anchored:
        dtstart, not_before_ms = wall_of(now_ms, tz).replace(microsecond=0), now_ms
    else:  # one period after now: the rule from this minute, its first occurrence after now
        dtstart = wall_of(now_ms - now_ms % 60_000, tz)
        not_before_ms = now_ms + 1
    rec = Recurrence(RuleKind.RRULE, rrule, zone, dtstart, dst)
    occ = first_occurrence(rec, not_before_ms=not_before_ms, horizon_days=_SEARCH_DAYS)
    if occ is None:
        raise _bad(f"{text!r} has no occurrence within {_SEARCH_DAYS} days")
    if rule.count is not None:
        rrule = parse_rule(RuleKind.RRULE, f"{rrule};COUNT={rule.count}", tz, occ.wall)
    if rule.until is not None:
        last = _last_wall(text, rule.until, wall_of(now_ms, tz), zone)
        if occ.wall > last:
            raise _bad(f"{text!r}: the first occurrence ({occ.wall.isoformat()} in {zone}) is "
                       f"after the until date ({last.date().isoformat()})")
        rrule = parse_rule(RuleKind.RRULE, f"{rrule};UNTIL={last:%Y%m%dT%H%M%S}", tz, occ.wall)
    return Resolved(text, occ.at_ms, local_time=occ.wall, time_zone=time_zone, rrule=rrule)


def _last_wall(text: str, until: when_rules.UntilDate, today: datetime, zone: str) -> datetime:
    """The last wall time an ``until`` day lets a rule fire at (inclusive of that day); a day
    without a year is its next one from ``today``. Raises ``InvalidRequest`` (when) for a
    day before ``today``."""
    years = [until.year] if until.year is not None else range(today.year, today.year + 9)
    for year in years:
        try:
            day = datetime(year, until.month, until.day, 23, 59, 59)
        except ValueError:  # february 29 of a common year
            continue
        if day.date() >= today.date():
            return day
    raise _bad(f"{text!r}: until {until.year:04d}-{until.month:02d}-{until.day:02d} is "
               f"before the start (today is {today.date().isoformat()} in {zone})")
