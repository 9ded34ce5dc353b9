"""Jitter: an occurrence fires at its scheduled instant plus an offset in ``[0, jitter_s]``
seconds, so that many reminders scheduled for the same instant (the top of the hour) reach
the callbacks and providers spread out, on purpose.

The offset is a function of the occurrence id (``trg_….N``) and the window alone: the same
in every process and release, for every attempt of one occurrence, and different (uniform
over the window) from one occurrence to the next. It is never negative: a jittered
occurrence never fires before its scheduled time. Whole milliseconds. Pure.
"""

from __future__ import annotations

import hashlib

# Domain separation: another derivation (a v2) gets other offsets.
_PERSON = b"trg-jitter-v1"


def jitter_offset_ms(occurrence_id: str, jitter_s: int) -> int:
    """The offset of occurrence ``occurrence_id`` in a window of ``jitter_s`` seconds: an
    integer in ``[0, jitter_s * 1000]`` (0 when ``jitter_s`` is 0 or less). BLAKE2b's 64 bits
    reduced modulo the window: the bias is below 2**-40 for any window this API allows."""
    if jitter_s <= 0:
        return 0
    digest = hashlib.blake2b(occurrence_id.encode(), digest_size=8, person=_PERSON).digest()
    return int.from_bytes(digest, "big") % (jitter_s * 1000 + 1)
