"""Recurring ``when`` phrases → an RFC 5545 RRULE, by a small grammar of our own.

dateparser reads instants, not repetition, so a phrase that starts with ``every`` / ``each``
(or one of the adverbs ``hourly``, ``daily``, ``weekly``, ``monthly``, ``yearly``) is read
here instead. Case and extra white space do not matter; anything outside the grammar is
refused (never guessed). The whole grammar:

=================================================  ==============================================
phrase                                             RRULE
=================================================  ==============================================
``every [N|other] second|minute|hour``             ``FREQ=SECONDLY|MINUTELY|HOURLY[;INTERVAL=N]``
``every [N|other] day|week|month|year``            ``FREQ=DAILY|WEEKLY|MONTHLY|YEARLY[;INTERVAL=N]``
``every [N|other] day|week|… at TIME``             the same ``;BYHOUR=h;BYMINUTE=m;BYSECOND=0``
``every DAYS at TIME``                             ``FREQ=WEEKLY;BYDAY=…;BYHOUR=h;BYMINUTE=m;…``
``every month on the ORD [day] at TIME``           ``FREQ=MONTHLY;BYMONTHDAY=n;BYHOUR=…`` (last: -1)
``every NTH WEEKDAY of the month at TIME``         ``FREQ=MONTHLY;BYDAY=1MO;BYHOUR=…`` (last: -1)
``every year on MONTH DAY at TIME``                ``FREQ=YEARLY;BYMONTH=m;BYMONTHDAY=d;BYHOUR=…``
``hourly`` / ``daily`` / ``weekly`` / …            ``every hour`` / ``every day`` / …
``daily at TIME``, ``weekdays at TIME``            ``every day at TIME``, ``every weekday at TIME``
``… at TIME and TIME``                             ``BYHOUR=9,17;BYMINUTE=0`` (several a day)
``… for N times``                                  ``…;COUNT=N`` (1 to 1,000,000)
``… until DATE``                                   ``…;UNTIL=`` the end of DATE in the zone
=================================================  ==============================================

- ``N`` is 1 to 1000 in digits; ``other`` is 2. ``DAYS`` is ``weekday`` (MO to FR), ``weekend``
  (SA, SU), or weekday names (``monday``/``mon``/``mondays``…) joined by ``,`` / ``and``.
- ``TIME`` is ``9am``, ``9:30 pm``, ``17:30``, ``9`` (24-hour), ``noon`` or ``midnight``.
- ``ORD`` is ``1st``…``31st`` or ``last``; ``NTH`` is ``first``…``fourth`` or ``last``;
  ``MONTH DAY`` is ``march 3`` / ``mar 3rd``.
- ``TIME and TIME`` (or ``TIME, TIME and TIME``): several times a day, one rule; they must
  share their minute or their hour (``9am and 5pm``, ``9:00 and 9:30``): one RRULE's
  the pairs of BYHOUR and BYMINUTE would otherwise add times nobody asked for (``9:30 and 5pm``).
- ``DATE`` is ``2027-03-01``, ``march 1`` / ``mar 1st`` / ``1 march`` with an optional year
  (without one: the next such day from today); ``until`` and ``for N times`` end any rule
  (one of the two: RFC 5545 forbids both). The UNTIL is made by :mod:`core.time.when`, which
  knows the zone and today (:attr:`Rule.until`).
- Weekday sets and month days need ``at TIME`` (no silent midnight). A rule without a time
  of day starts one period after now (``every 15 minutes`` at 12:00:40 → 12:15, 12:30, …;
  ``every day`` → tomorrow at this minute); a rule with one fires at its first match from now.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from datetime import date
from enum import StrEnum

from trigger_service.core.errors import InvalidRequest


class Freq(StrEnum):
    SECONDLY = "SECONDLY"
    MINUTELY = "MINUTELY"
    HOURLY = "HOURLY"
    DAILY = "DAILY"
    WEEKLY = "WEEKLY"
    MONTHLY = "MONTHLY"
    YEARLY = "YEARLY"


@dataclass(frozen=True, slots=True)
class Rule:
    """A recurring phrase, read: ``rrule`` (no DTSTART), and whether it names a time of day
    (then its first occurrence is its first match from now, else one period after now)."""

    rrule: str
    freq: Freq
    interval: int
    anchored: bool  # has BYHOUR/BYMINUTE: the time of day comes from the rule
    count: int | None = None  # "for N times": COUNT (not in ``rrule``: see core.time.when)
    until: UntilDate | None = None  # "until DATE": the last day, in the trigger's zone

    @property
    def needs_zone(self) -> bool:
        """Wall-clock rules need a zone; ``every N seconds|minutes|hours`` does not (unless
        it ends on a date: a day is a zone's)."""
        return self.anchored or self.freq not in _SUB_DAILY or self.until is not None


@dataclass(frozen=True, slots=True)
class UntilDate:
    """The day an ``until`` names: ``year`` None when the phrase gave none."""

    year: int | None
    month: int
    day: int


_SUB_DAILY = (Freq.SECONDLY, Freq.MINUTELY, Freq.HOURLY)
_UNITS = {"second": Freq.SECONDLY, "minute": Freq.MINUTELY, "hour": Freq.HOURLY,
          "day": Freq.DAILY, "week": Freq.WEEKLY, "month": Freq.MONTHLY, "year": Freq.YEARLY}
_ADVERBS = {"hourly": "every hour", "daily": "every day", "weekly": "every week",
            "monthly": "every month", "yearly": "every year", "annually": "every year",
            "weekdays": "every weekday"}
_DAYS = {"monday": "MO", "mon": "MO", "tuesday": "TU", "tue": "TU", "tues": "TU",
         "wednesday": "WE", "wed": "WE", "thursday": "TH", "thu": "TH", "thur": "TH",
         "thurs": "TH", "friday": "FR", "fri": "FR", "saturday": "SA", "sat": "SA",
         "sunday": "SU", "sun": "SU"}
_DAY_ORDER = ["MO", "TU", "WE", "TH", "FR", "SA", "SU"]
_MONTHS = {name: n for n, names in enumerate(
    [("january", "jan"), ("february", "feb"), ("march", "mar"), ("april", "apr"),
     ("may",), ("june", "jun"), ("july", "jul"), ("august", "aug"),
     ("september", "sep", "sept"), ("october", "oct"), ("november", "nov"),
     ("december", "dec")], start=1) for name in names}
_NTH = {"first": 1, "1st": 1, "second": 2, "2nd": 2, "third": 3, "3rd": 3, "fourth": 4,
        "4th": 4, "last": -1}
_MONTH_DAYS = [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
_MAX_INTERVAL = 1000
MAX_COUNT = 1_000_000

_ONE_TIME = r"(?:noon|midnight|\d{1,2}(?::\d{2})?(?:\s*[ap]\.?m\.?)?)"
_TIME = rf"(?P<time>{_ONE_TIME}(?:\s*(?:,\s*and|,|and)\s*{_ONE_TIME})*)"
_TIME_SEP_RE = re.compile(r"\s*(?:,\s*and|,|\band\b)\s*")
_AT = rf"(?:\s+at\s+{_TIME})"
_PERIOD_RE = re.compile(
    rf"(?P<n>other|\d{{1,4}})?\s*(?P<unit>second|minute|hour|day|week|month|year)s?{_AT}?")
_DAYSET_RE = re.compile(rf"(?P<days>[a-z, ]+?){_AT}")
_MONTHDAY_RE = re.compile(rf"month\s+on\s+the\s+(?P<ord>last|\d{{1,2}}(?:st|nd|rd|th)?)"
                          rf"(?:\s+day)?{_AT}")
_NTH_RE = re.compile(rf"(?P<nth>[a-z0-9]+)\s+(?P<day>[a-z]+)\s+of\s+(?:the|every)\s+month{_AT}")
_YEARDAY_RE = re.compile(rf"year\s+on\s+(?P<month>[a-z]+)\s+(?P<day>\d{{1,2}})(?:st|nd|rd|th)?"
                         rf"{_AT}")
_CLOCK_RE = re.compile(r"(\d{1,2})(?::(\d{2}))?\s*(?:([ap])\.?m\.?)?")
_EVERY_RE = re.compile(r"(?:every|each)\s+(?P<body>.+)")
_COUNT_RE = re.compile(r"(?P<rest>.+?)\s+for\s+(?P<n>\S+)\s+times?")
_UNTIL_RE = re.compile(r"(?P<rest>.+?)\s+until\s+(?P<date>.+)")
_ISO_DATE_RE = re.compile(r"(\d{4})-(\d{1,2})-(\d{1,2})")
_NAMED_DATE_RE = re.compile(r"(?:(?P<m1>[a-z]+)\s+(?P<d1>\d{1,2})|(?P<d2>\d{1,2})"
                            r"\s+(?:of\s+)?(?P<m2>[a-z]+))(?:st|nd|rd|th)?(?:,?\s+(?P<y>\d{4}))?")


def is_recurring(text: str) -> bool:
    """Whether ``text`` (lower case, single spaces) is for this grammar rather than dateparser."""
    first = text.split(" ", 1)[0]
    return first in ("every", "each") or first in _ADVERBS


def parse_rule(text: str) -> Rule:
    """The RRULE of a recurring phrase (see the module's table). ``text`` is lower case with
    single spaces. Raises ``InvalidRequest`` naming ``when``."""
    first, _, rest = text.partition(" ")
    if first in _ADVERBS:
        text = f"{_ADVERBS[first]} {rest}".strip()
    m = _EVERY_RE.fullmatch(text)
    body, count, until = _ending(m.group("body") if m else "")
    for reader in (_period, _monthday, _nth_weekday, _yearday, _dayset):
        rule = reader(body)
        if rule is not None:
            return replace(rule, count=count, until=until)
    raise _bad(f"{text!r} is not a recurring phrase this API reads; it takes e.g. "
               "'every weekday at 9am', 'every monday and thursday at 18:00', 'every 15 "
               "minutes', 'every month on the 1st at 9am' (docs/reminders.md, Natural-language "
               "times)")


def _bad(message: str) -> InvalidRequest:
    return InvalidRequest(f"when: {message}", field="when")


def _ending(body: str) -> tuple[str, int | None, UntilDate | None]:
    """``body`` without its ``for N times`` or ``until DATE``, and what that said."""
    m = _COUNT_RE.fullmatch(body)
    if m is not None:
        n = m.group("n")
        if not n.isdigit() or not 1 <= int(n) <= MAX_COUNT:
            raise _bad(f"'for {n} times': a whole number of times from 1 to {MAX_COUNT:,}")
        if _UNTIL_RE.fullmatch(m.group("rest")):
            raise _bad("give 'until DATE' or 'for N times', not both")
        return m.group("rest"), int(n), None
    m = _UNTIL_RE.fullmatch(body)
    if m is not None:
        if _COUNT_RE.fullmatch(m.group("rest")):
            raise _bad("give 'until DATE' or 'for N times', not both")
        return m.group("rest"), None, until_date(m.group("date"))
    return body, None, None


def until_date(text: str) -> UntilDate:
    """``2027-03-01``, ``march 1``, ``mar 1st, 2027``, ``1 march 2027`` → the day (its year
    None when not given). Raises ``InvalidRequest`` naming ``when``."""
    year: int | None
    m = _ISO_DATE_RE.fullmatch(text)
    if m is not None:
        year, month, day = int(m.group(1)), int(m.group(2)), int(m.group(3))
    else:
        m = _NAMED_DATE_RE.fullmatch(text)
        name = (m.group("m1") or m.group("m2")) if m else None
        if m is None or name is None or name not in _MONTHS:
            raise _bad(f"until {text!r}: a date such as '2027-03-01' or 'march 1' "
                       "(optionally with the year)")
        year = int(m.group("y")) if m.group("y") else None
        month, day = _MONTHS[name], int(m.group("d1") or m.group("d2"))
    try:
        date(year or 2000, month, day)  # 2000: february 29 is a date
    except ValueError as e:
        raise _bad(f"until {text!r} is not a date") from e
    if year is not None and year < 1:
        raise _bad(f"until {text!r} is not a date")
    return UntilDate(year, month, day)


def _rule(freq: Freq, parts: list[str], time: str | None, interval: int = 1) -> Rule:
    head = [f"FREQ={freq.value}"] + ([f"INTERVAL={interval}"] if interval != 1 else [])
    if time is not None:
        hours, minutes = _times_of_day(time)
        parts = [*parts, f"BYHOUR={hours}", f"BYMINUTE={minutes}", "BYSECOND=0"]
    return Rule(";".join(head + parts), freq, interval, time is not None)


def _times_of_day(text: str) -> tuple[str, str]:
    """``9am`` or ``9am and 5pm`` → BYHOUR and BYMINUTE values. Several times must share
    their minute or their hour: the rule fires at every pair of an hour and a minute."""
    times = sorted({clock_time(t) for t in _TIME_SEP_RE.split(text) if t})
    hours = sorted({h for h, _ in times})
    minutes = sorted({m for _, m in times})
    if len(hours) * len(minutes) != len(times):
        raise _bad(f"{text!r}: several times a day must share their minute ('9am and 5pm') "
                   "or their hour ('9:00 and 9:30'); one rule would also fire at "
                   + ", ".join(f"{h}:{m:02d}" for h in hours for m in minutes
                               if (h, m) not in times)
                   + " (create one reminder per time instead)")
    return ",".join(map(str, hours)), ",".join(map(str, minutes))


def _period(body: str) -> Rule | None:
    m = _PERIOD_RE.fullmatch(body)
    if m is None:
        return None
    n = m.group("n")
    interval = 2 if n == "other" else int(n) if n else 1
    if not 1 <= interval <= _MAX_INTERVAL:
        raise _bad(f"an interval from 1 to {_MAX_INTERVAL}")
    freq = _UNITS[m.group("unit")]
    if m.group("time") and freq in _SUB_DAILY:
        raise _bad("'at' goes with days, weeks, months or years, not with "
                   f"{m.group('unit')}s")
    return _rule(freq, [], m.group("time"), interval)


def _dayset(body: str) -> Rule | None:
    m = _DAYSET_RE.fullmatch(body)
    if m is None:
        if _day_words(body) is not None:
            raise _bad(f"'every {body}' needs a time of day, e.g. 'every {body} at 9am'")
        return None
    days = _day_words(m.group("days"))
    if days is None:
        return None
    return _rule(Freq.WEEKLY, [f"BYDAY={','.join(days)}"], m.group("time"))


def _day_words(text: str) -> list[str] | None:
    """``weekday``, ``weekend`` or weekday names joined by ``,``/``and`` → BYDAY codes."""
    words = [w for w in re.split(r"\s*,\s*|\s+and\s+|\s+", text.strip()) if w]
    if words in (["weekday"], ["weekdays"]):
        return _DAY_ORDER[:5]
    if words in (["weekend"], ["weekend", "day"], ["weekends"]):
        return _DAY_ORDER[5:]
    codes = [_DAYS.get(w.removesuffix("s")) or _DAYS.get(w) for w in words]
    if not codes or None in codes:
        return None
    return sorted({c for c in codes if c}, key=_DAY_ORDER.index)


def _monthday(body: str) -> Rule | None:
    m = _MONTHDAY_RE.fullmatch(body)
    if m is None:
        return None
    ordinal = m.group("ord")
    day = -1 if ordinal == "last" else int(re.sub(r"\D", "", ordinal))
    if day == 0 or day > 31:
        raise _bad(f"no month has a day {day}")
    return _rule(Freq.MONTHLY, [f"BYMONTHDAY={day}"], m.group("time"))


def _nth_weekday(body: str) -> Rule | None:
    m = _NTH_RE.fullmatch(body)
    if m is None or m.group("nth") not in _NTH or m.group("day") not in _DAYS:
        return None
    return _rule(Freq.MONTHLY, [f"BYDAY={_NTH[m.group('nth')]}{_DAYS[m.group('day')]}"],
                 m.group("time"))


def _yearday(body: str) -> Rule | None:
    m = _YEARDAY_RE.fullmatch(body)
    if m is None or m.group("month") not in _MONTHS:
        return None
    month, day = _MONTHS[m.group("month")], int(m.group("day"))
    if not 1 <= day <= _MONTH_DAYS[month - 1]:
        raise _bad(f"{m.group('month')} has no day {day}")
    return _rule(Freq.YEARLY, [f"BYMONTH={month}", f"BYMONTHDAY={day}"], m.group("time"))


def clock_time(text: str) -> tuple[int, int]:
    """``9am``, ``9:30 pm``, ``17:30``, ``9`` (24-hour), ``noon``, ``midnight`` → (hour,
    minute). Raises ``InvalidRequest`` naming ``when`` for a time that is not on a clock."""
    if text == "noon":
        return 12, 0
    if text == "midnight":
        return 0, 0
    m = _CLOCK_RE.fullmatch(text)
    if m is None:
        raise _bad(f"{text!r} is not a time of day")
    hour, minute, half = int(m.group(1)), int(m.group(2) or 0), m.group(3)
    if half is not None:
        if not 1 <= hour <= 12:
            raise _bad(f"{text!r}: with am/pm the hour is 1 to 12")
        hour = hour % 12 + (12 if half == "p" else 0)
    if hour > 23 or minute > 59:
        raise _bad(f"{text!r} is not a time of day")
    return hour, minute
