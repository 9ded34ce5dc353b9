"""Request bodies as JSON (RFC 8259, UTF-8), bounded before and while parsing. Pure.

Every limit answers ``400 invalid_request`` naming the field (``body`` when the problem is
not one field's), never a 500; the body's size is aiohttp's ``client_max_size`` (``413``):

- nesting: at most ``MAX_DEPTH`` arrays and objects deep, counted on the raw bytes before
  the parser recurses (Python's parser would raise ``RecursionError`` near 1,000, and a
  payload that deep would fail again wherever it is serialised);
- objects: at most ``MAX_KEYS`` members each. A key given twice keeps its last value, as
  in most parsers: what is validated is what is stored and sent, serialised again without
  the duplicate, so no later parser can read another value than the one checked;
- numbers: floats finite (``1e400`` would become ``Infinity``, which is not JSON); ``NaN``
  and ``Infinity`` are not JSON either. Integers parse at any size up to Python's 4,300
  digits; each numeric field has its own range, and a payload's integers are sent as given;
- strings: no lone UTF-16 surrogate (``"\\ud800"`` parses but can be neither stored nor
  sent as UTF-8); every other string is bounded by the body's size and by its field's limit.

Cost: the checks are byte counts and searches in C that a normal body passes at once (at
most ``MAX_DEPTH`` brackets, ``MAX_KEYS`` colons, no surrogate escape but in pairs); the
parser runs without a Python hook per object or integer, and one decoder is reused (where
``json.loads`` builds one per call): a normal body parses faster than before the limits.
"""

from __future__ import annotations

import enum
import json
import math
from typing import Any

from trigger_service.core.errors import InvalidRequest

MAX_DEPTH = 32
MAX_KEYS = 1000
_NOT_SHAPE = bytes(b for b in range(256) if b not in b'[]{}"')
_AS_SQUARE = bytes.maketrans(b"{}", b"[]")
_HIGH, _LOW = frozenset("89abAB"), frozenset("cdefCDEF")  # \uD800-\uDBFF, \uDC00-\uDFFF


def _too_deep(raw: bytes) -> bool:
    """Whether the brackets outside strings nest deeper than ``MAX_DEPTH``, or leave more
    than that open (the parser recurses into ``[[[[`` before finding that it never ends).
    Byte operations only, no Python loop over characters: linear and cheap on any input."""
    if raw.count(b"[") + raw.count(b"{") <= MAX_DEPTH:
        return False
    # Without escaped backslashes, then escaped quotes, every quote left opens or closes a
    # string (outside strings a backslash is malformed anyway).
    if b"\\" in raw:
        raw = raw.replace(b"\\\\", b"").replace(b'\\"', b"")
    # Only brackets and quotes are kept; then two quotes in a row go (an empty string, or
    # two strings with no bracket between them made one: no bracket changes side, and the
    # quotes after keep their parity); the even pieces left are outside strings.
    shape = raw.translate(_AS_SQUARE, _NOT_SHAPE).replace(b'""', b"")
    brackets = b"".join(shape.split(b'"')[::2]) if b'"' in shape else shape
    for _ in range(MAX_DEPTH):  # each round removes the innermost level
        inner = brackets.replace(b"[]", b"")
        if inner == brackets:
            break
        brackets = inner
    return b"[" in brackets  # deeper still, or never closed (malformed: a 400 either way)


def _may_hold_lone_surrogate(text: str) -> bool:
    """False when every escape in U+D800-U+DFFF is a high surrogate followed at once by a
    low one (a pair: an emoji from an ``ensure_ascii`` client); True when one may stand
    alone (the exact check decides: after an escaped backslash, "ud800" is only text)."""
    i = _next_surrogate_escape(text, 0)
    while i >= 0:
        if _escaped(text, i):  # "\\ud800": an escaped backslash, then the text "ud800"
            i = _next_surrogate_escape(text, i + 1)
            continue
        kind = text[i + 3:i + 4]
        if kind in _LOW:
            return True
        if kind in _HIGH:
            if not (text[i + 6:i + 8] == "\\u" and text[i + 8:i + 9] in ("d", "D")
                    and text[i + 9:i + 10] in _LOW):
                return True
            i += 12  # past the pair
        else:
            i += 3  # \uD000-\uD7FF: not a surrogate
        i = _next_surrogate_escape(text, i)
    return False


def _escaped(text: str, i: int) -> bool:
    """Whether the backslash at ``i`` is itself escaped (an odd run of backslashes before)."""
    run = 0
    while i - run - 1 >= 0 and text[i - run - 1] == "\\":
        run += 1
    return run % 2 == 1


def _next_surrogate_escape(text: str, start: int) -> int:
    lower, upper = text.find("\\ud", start), text.find("\\uD", start)
    return upper if lower < 0 else lower if upper < 0 else min(lower, upper)


def _bounded_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    if len(pairs) > MAX_KEYS:
        raise InvalidRequest(f"body: an object has more than {MAX_KEYS} keys", field="body")
    return dict(pairs)


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise InvalidRequest(f"body: the number {text[:32]} is too large", field="body")
    return value


def _constant(name: str) -> Any:
    raise InvalidRequest(f"body: {name} is not JSON", field="body")


_DECODER = json.JSONDecoder(parse_float=_float, parse_constant=_constant)
# Counts each object's keys: only for a body with more colons than MAX_KEYS.
_KEY_COUNTING_DECODER = json.JSONDecoder(object_pairs_hook=_bounded_object,
                                         parse_float=_float, parse_constant=_constant)


_LONE = "holds a lone UTF-16 surrogate (\\ud800-\\udfff), which is not text"


def _encodable(value: Any) -> bool:
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _check_surrogates(body: Any) -> None:
    """Refuse a lone surrogate anywhere, naming the top-level field that holds it."""
    if _encodable(body):
        return
    if isinstance(body, dict):
        for key, value in body.items():
            if not _encodable(key):
                break
            if not _encodable(value):
                raise InvalidRequest(f"{key}: {_LONE}", field=key)
    raise InvalidRequest(f"body: {_LONE}", field="body")


def parse_json_body(raw: bytes) -> Any:
    """The JSON value of a request body, within the limits above; ``InvalidRequest``
    otherwise (``field`` names the top-level field, or ``body``)."""
    if _too_deep(raw):
        raise InvalidRequest(f"body: nested more than {MAX_DEPTH} levels deep (or brackets "
                             "left open)", field="body")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InvalidRequest(f"body: not UTF-8 (byte {e.start})", field="body") from e
    decoder = _KEY_COUNTING_DECODER if raw.count(b":") > MAX_KEYS else _DECODER
    try:
        body = decoder.decode(text)
    except ValueError as e:  # JSONDecodeError; an integer past Python's 4,300 digits
        raise InvalidRequest(f"body: malformed JSON ({str(e)[:200]})", field="body") from e
    except RecursionError as e:  # unreachable within MAX_DEPTH; a 400 all the same
        raise InvalidRequest("body: nested too deeply", field="body") from e
    # A surrogate can only arrive escaped: the UTF-8 decoder refuses encoded ones.
    if _may_hold_lone_surrogate(text):
        _check_surrogates(body)
    return body


class NoBody(enum.Enum):
    """No request body at all (zero bytes): not JSON ``null``."""

    NO_BODY = "no_body"


NO_BODY = NoBody.NO_BODY


def parse_optional_json_body(raw: bytes) -> Any:
    """``NO_BODY`` for an empty body (no bytes at all), else as ``parse_json_body`` (so
    ``null`` is ``None``, a value a route may refuse). Whitespace is not empty: a body of
    spaces under ``application/json`` is malformed JSON, as any JSON reader (and the OpenAPI
    checker) sees it."""
    return parse_json_body(raw) if raw else NO_BODY
