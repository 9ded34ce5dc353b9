"""Signed acknowledgement links: a person acknowledges a reminder from the email or
SMS itself. The link names one occurrence (trigger id and occurrence number) and an expiry,
signed with HMAC-SHA256; nothing else is needed to use it. Pure: no I/O, the time is passed in.

Keys rotate without breaking the links already sent: a link is
``<key id>.<body>.<signature>``, signed under ``TRIGGER_API_ACK_SECRET`` (the current key) and
verified under the key its id names, the current one or one of
``TRIGGER_API_ACK_PREVIOUS_SECRETS`` (kept as long as the links made under them should work: at
most the occurrence's fire time + ``TRIGGER_API_ACK_LINK_TTL_S``). The key id is derived from the
key (an HMAC of a constant, not the key's own hash), so a key keeps its id when it moves from
current to previous. A link made before key ids (``<body>.<signature>``) verifies under the
current key only, as it always did.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
from collections.abc import Sequence

from trigger_service.core.errors import InvalidRequest

_SIG_BYTES = 20
_KEY_ID_BYTES = 6
_MAX_TOKEN_CHARS = 512
# What make_token writes: base64url without padding, and the dots between its parts.
_TOKEN_CHARS = re.compile(r"[A-Za-z0-9_.-]*")


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _sign(secret: str, body: str) -> str:
    return _b64(hmac.new(secret.encode(), body.encode(), hashlib.sha256).digest()[:_SIG_BYTES])


def key_id(secret: str) -> str:
    """The short public name of ``secret`` carried by its links (8 characters)."""
    return _b64(hmac.new(secret.encode(), b"ack-link-key-id", hashlib.sha256)
                .digest()[:_KEY_ID_BYTES])


def make_token(secret: str, trigger_id: str, occurrence_seq: int, expires_at_ms: int) -> str:
    """A link for one occurrence, signed under ``secret`` (the current key) and naming it."""
    body = _b64(f"{trigger_id}.{occurrence_seq}.{expires_at_ms // 1000}".encode())
    kid = key_id(secret)
    return f"{kid}.{body}.{_sign(secret, f'{kid}.{body}')}"


def read_token(secret: str, token: str, now_ms: int,
               previous: Sequence[str] = ()) -> tuple[str, int]:
    """(trigger id, occurrence seq) of a valid, unexpired link signed under ``secret`` (the
    current key) or one of ``previous``; ``InvalidRequest`` otherwise (the same answer for a
    forged, a malformed and a retired key's link). A link is base64url and dots: a token
    with any other character (non-ASCII above all, which ``compare_digest`` refuses on
    ``str``) is malformed, checked before anything compares it."""
    bad = InvalidRequest("token: not a valid acknowledgement link", field="token")
    if len(token) > _MAX_TOKEN_CHARS or not _TOKEN_CHARS.fullmatch(token):
        raise bad
    parts = token.split(".")
    if len(parts) == 3:
        kid, body, sig = parts
        key = next((k for k in (secret, *previous)
                    if hmac.compare_digest(key_id(k).encode(), kid.encode())), None)
        signed = f"{kid}.{body}"
    elif len(parts) == 2:
        (body, sig), key, signed = parts, secret, parts[0]  # a link from before key ids
    else:
        raise bad
    if key is None or not hmac.compare_digest(sig.encode(), _sign(key, signed).encode()):
        raise bad
    try:
        trigger_id, seq, exp_s = _unb64(body).decode().split(".")
        occurrence_seq, expires_s = int(seq), int(exp_s)
    except (binascii.Error, UnicodeDecodeError, ValueError) as e:
        raise bad from e
    if expires_s * 1000 < now_ms:
        raise InvalidRequest("token: this acknowledgement link has expired", field="token")
    return trigger_id, occurrence_seq
