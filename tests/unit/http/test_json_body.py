"""``parse_json_body``'s byte-level checks against plain references, on generated input: the
depth scan never lets a body deeper than ``MAX_DEPTH`` through and is exact on balanced
ones; the surrogate scan never misses a lone surrogate."""

from __future__ import annotations

import json

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from trigger_service.core.errors import InvalidRequest
from trigger_service.http.json_body import (
    MAX_DEPTH,
    _may_hold_lone_surrogate,
    _too_deep,
    parse_json_body,
)


def reference_depth(raw: bytes) -> tuple[int, bool]:
    """(deepest nesting outside strings, whether the brackets balance), one byte at a time."""
    depth = deepest = 0
    balanced = True
    in_string = escaped = False
    for byte in raw:
        char = chr(byte)
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
            balanced = balanced and depth >= 0
    return deepest, balanced and depth == 0 and not in_string


# Pieces of a body: brackets, and strings whose text is full of brackets, quotes and
# backslashes (json.dumps escapes them as a client would).
PIECE = st.one_of(st.sampled_from(["[", "]", "{", "}", ",", "1", ":"]),
                  st.text(alphabet='[]{}"\\ab', max_size=6).map(json.dumps))


@settings(max_examples=500, deadline=None)
@given(st.integers(0, 40), st.lists(PIECE, max_size=120))
def test_the_depth_scan_is_sound_and_exact_when_balanced(around: int,
                                                         pieces: list[str]) -> None:
    raw = ("[" * around + "".join(pieces) + "]" * around).encode()
    deepest, balanced = reference_depth(raw)
    if deepest > MAX_DEPTH:
        assert _too_deep(raw)
    if balanced:
        assert _too_deep(raw) == (deepest > MAX_DEPTH)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 60), st.integers(0, 60), st.text(alphabet="[]{}", max_size=40))
def test_nesting_with_brackets_in_strings(opens: int, closes: int, noise: str) -> None:
    raw = ("[" * opens + json.dumps(noise) + "]" * closes).encode()
    # Left open is refused too, once past the fast path (which counts every bracket).
    left_open = opens > closes and opens + noise.count("[") + noise.count("{") > MAX_DEPTH
    assert _too_deep(raw) == (opens > MAX_DEPTH or left_open)


ESCAPES = st.sampled_from(["\\ud83d", "\\ude00", "\\ud800", "\\udfff", "\\uD83D", "\\uDE00",
                           "\\ud7ff", "\\ue000", "\\u00e9", "\\\\", "\\\\u", "a", "u", "d8"])


@settings(max_examples=500, deadline=None)
@given(st.lists(ESCAPES, max_size=12))
# Found by this test: an escaped backslash, the text "ud8d8", then a lone low surrogate (the
# scan took "\\ud8d8\\ude00" for a pair and skipped past the lone one).
@example(["\\\\", "u", "d8", "d8", "\\ude00"])
def test_the_surrogate_scan_never_misses_a_lone_one(parts: list[str]) -> None:
    text = '"' + "".join(parts) + '"'
    value = json.loads(text)
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        assert _may_hold_lone_surrogate(text)
        with pytest.raises(InvalidRequest):
            parse_json_body(text.encode())
    else:
        assert parse_json_body(text.encode()) == value
