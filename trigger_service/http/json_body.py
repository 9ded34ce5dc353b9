"""Request bodies as JSON (RFC 8259, UTF-8), bounded before and while parsing. Pure.

Every limit answers ``400 invalid_request`` naming the field (``body`` when the problem is
not one field's), never a 500; the body's size is aiohttp's ``client_max_size`` (``413``):

- nesting: at most ``MAX_DEPTH`` arrays and objects deep, counted on the raw bytes before
  the parser recurses (Python's parser would raise ``RecursionError`` near 1,000);
- objects: at most ``MAX_KEYS`` members, keys at most ``MAX_KEY_CHARS`` characters, and no
  key twice (parsers disagree on which duplicate wins, so neither does);
- numbers: integers within 64 bits, floats finite (``1e400`` would become ``Infinity``, which
  is not JSON); ``NaN`` and ``Infinity`` are not JSON either;
- strings: no lone UTF-16 surrogate (``"\\ud800"`` parses but can be neither stored nor sent
  as UTF-8); every other string is bounded by the body's size and by its field's own limit.

Cost: a normal body (a few brackets, no ``\\u`` escape) takes the fast path of each check;
the hooks run in the C scanner's loop, and reusing one decoder saves what ``json.loads``
spends building one per call, so parsing costs about what it did before the limits.
"""

from __future__ import annotations

import json
import math
import re
from itertools import accumulate
from typing import Any

from trigger_service.core.errors import InvalidRequest

MAX_DEPTH = 32
MAX_KEYS = 1000
MAX_KEY_CHARS = 256
_INT_MIN, _INT_MAX = -(2**63), 2**63 - 1
_INT_FAST_DIGITS = 18  # up to 18 digits, an integer is within 64 bits without a check
# A string literal, to its closing quote or, unterminated, to the end (so the search never
# fails and restarts: linear on any input; an unterminated string is malformed anyway).
_STRING_RE = re.compile(rb'"(?:[^"\\]|\\.)*+(?:"|\Z)', re.DOTALL)
_NON_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_STEP = [1 if b in b"[{" else -1 if b in b"]}" else 0 for b in range(256)]


def _too_deep(raw: bytes) -> bool:
    """Whether the brackets outside strings nest deeper than ``MAX_DEPTH`` (unbalanced
    ones count too: the parser recurses into ``[[[[`` before it finds that it never ends)."""
    if raw.count(b"[") + raw.count(b"{") <= MAX_DEPTH:
        return False
    brackets = _STRING_RE.sub(b"", raw).translate(None, _NON_BRACKETS)
    return max(accumulate(map(_STEP.__getitem__, brackets)), default=0) > MAX_DEPTH


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    if len(pairs) > MAX_KEYS:
        raise InvalidRequest(f"body: an object has more than {MAX_KEYS} keys", field="body")
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise InvalidRequest(f"body: key {_shown(key)} appears twice in one object",
                                     field="body")
            seen.add(key)
    if pairs and max(map(len, obj)) > MAX_KEY_CHARS:
        raise InvalidRequest(f"body: a key is longer than {MAX_KEY_CHARS} characters",
                             field="body")
    return obj


def _int(text: str) -> int:
    if len(text) <= _INT_FAST_DIGITS:
        return int(text)
    # Longer than 20 characters ("-" and 19 digits) cannot fit: refused before int() spends
    # time on it (Python's own limit is 4,300 digits).
    value = int(text) if len(text) <= 20 else _INT_MAX + 1
    if not _INT_MIN <= value <= _INT_MAX:
        raise InvalidRequest("body: an integer outside 64 bits (-2^63 to 2^63-1)",
                             field="body")
    return value


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise InvalidRequest(f"body: the number {text[:32]} is too large", field="body")
    return value


def _constant(name: str) -> Any:
    raise InvalidRequest(f"body: {name} is not JSON", field="body")


_DECODER = json.JSONDecoder(object_pairs_hook=_object, parse_int=_int, parse_float=_float,
                            parse_constant=_constant)


def _shown(key: str) -> str:
    """A key as an error message may show it: quoted, bounded, any surrogate escaped."""
    return json.dumps(key[:64])


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
                raise InvalidRequest(f"{_shown(key)[1:-1]}: holds a lone UTF-16 surrogate "
                                     "(\\ud800-\\udfff), which is not text", field=key)
    raise InvalidRequest("body: holds a lone UTF-16 surrogate (\\ud800-\\udfff), which is not "
                         "text", field="body")


def parse_json_body(raw: bytes) -> Any:
    """The JSON value of a request body, within the limits above; ``InvalidRequest``
    otherwise (``field`` names the top-level field, or ``body``)."""
    if _too_deep(raw):
        raise InvalidRequest(f"body: nested more than {MAX_DEPTH} levels deep", field="body")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InvalidRequest(f"body: not UTF-8 (byte {e.start})", field="body") from e
    try:
        body = _DECODER.decode(text)
    except ValueError as e:  # JSONDecodeError; int() past Python's 4,300-digit limit
        raise InvalidRequest(f"body: malformed JSON ({str(e)[:200]})", field="body") from e
    except RecursionError as e:  # unreachable within MAX_DEPTH; a 400 all the same
        raise InvalidRequest("body: nested too deeply", field="body") from e
    if "\\u" in text:  # a surrogate can only arrive escaped: raw UTF-8 cannot encode one
        _check_surrogates(body)
    return body
