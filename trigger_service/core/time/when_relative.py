"""Relative ``when`` phrases ("in 2 hours", "in 1 hour and 30 minutes", "90 minutes from now",
"now"): which phrases are read as elapsed time from now, decided by a scanner that reads each
character at most a fixed number of times.

The language, in regular-expression terms (``\\s`` white space)::

    relative  = "in" \\s+ durations | durations \\s+ "from" \\s+ "now" | "now"
    durations = duration (separator duration)*
    duration  = amount \\s+ unit
    amount    = \\d{1,6} ("." \\d{1,3})? | "a" | "an" | "one"
    unit      = second(s) | sec(s) | minute(s) | min(s) | hour(s) | hr(s) | day(s) | week(s)
    separator = \\s* ("," \\s*)? ("and" \\s*)?

Written as one backtracking pattern, white space on both sides of an optional separator
inside a repeated group lets the engine split the same spaces in exponentially many ways; a
200-character phrase then costs about a minute of CPU. Here every choice is made by looking
at what comes next: an amount never starts with white space, ``,`` or ``and`` (``a``/``an``
must be followed by white space), and after a unit nothing valid starts with the letters a
shorter unit would leave (``s``, ``ond``, ``ute``), so the longest unit is always the right
one and one pass decides.

Pure: no I/O, no clock.
"""

from __future__ import annotations

# Longest first: the scanner takes the first unit that fits (see the module docstring).
_UNITS = tuple(sorted(
    {u + s for u in ("second", "sec", "minute", "min", "hour", "hr", "day", "week")
     for s in ("", "s")}, key=len, reverse=True))
_WORD_AMOUNTS = ("one", "an", "a")


def is_relative(text: str) -> bool:
    """Whether ``text`` (lower case) is a relative phrase of the grammar above. Linear in
    ``len(text)``."""
    if text == "now":
        return True
    if text.startswith("in"):
        start = _spaces(text, 2)
        if start > 2 and _durations(text, start) == len(text):
            return True
    end = _durations(text, 0)
    if end is None:
        return False
    after_from = _word_after_spaces(text, end, "from")
    return after_from is not None and _word_after_spaces(text, after_from, "now") == len(text)


def _spaces(text: str, i: int) -> int:
    while i < len(text) and text[i].isspace():
        i += 1
    return i


def _word_after_spaces(text: str, i: int, word: str) -> int | None:
    """The end of ``word`` after at least one white space at ``i``, or None."""
    j = _spaces(text, i)
    return j + len(word) if j > i and text.startswith(word, j) else None


def _durations(text: str, i: int) -> int | None:
    """The end of the longest ``durations`` at ``i`` (None: none there)."""
    end = _duration(text, i)
    if end is None:
        return None
    while True:
        j = _spaces(text, end)
        if text.startswith(",", j):
            j = _spaces(text, j + 1)
        if text.startswith("and", j):
            j = _spaces(text, j + 3)
        nxt = _duration(text, j)
        if nxt is None:
            return end
        end = nxt


def _duration(text: str, i: int) -> int | None:
    """The end of ``amount \\s+ unit`` at ``i``, or None."""
    j = _amount(text, i)
    if j is None:
        return None
    k = _spaces(text, j)
    if k == j:
        return None
    return next((k + len(u) for u in _UNITS if text.startswith(u, k)), None)


def _amount(text: str, i: int) -> int | None:
    j = _digits(text, i)
    if j == i:
        return next((i + len(w) for w in _WORD_AMOUNTS if text.startswith(w, i)), None)
    if j - i > 6:
        return None
    if text.startswith(".", j):
        k = _digits(text, j + 1)
        if not 1 <= k - j - 1 <= 3:
            return None  # "1." or "1.2345": the amount cannot end there either
        j = k
    return j


def _digits(text: str, i: int) -> int:
    while i < len(text) and text[i].isdecimal():  # what ``\d`` matches
        i += 1
    return i
