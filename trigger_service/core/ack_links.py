"""Signed acknowledgement links (issue 12): a person acknowledges a reminder from the email or
SMS itself. The link names one occurrence (trigger id and occurrence number) and an expiry,
signed with HMAC-SHA256 under ``TRIGGER_ACK_SECRET``; nothing else is needed to use it.
Pure: no I/O, the time is passed in."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac

from trigger_service.core.errors import InvalidRequest

_SIG_BYTES = 20


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _sign(secret: str, body: str) -> str:
    return _b64(hmac.new(secret.encode(), body.encode(), hashlib.sha256).digest()[:_SIG_BYTES])


def make_token(secret: str, trigger_id: str, occurrence_seq: int, expires_at_ms: int) -> str:
    body = _b64(f"{trigger_id}.{occurrence_seq}.{expires_at_ms // 1000}".encode())
    return f"{body}.{_sign(secret, body)}"


def read_token(secret: str, token: str, now_ms: int) -> tuple[str, int]:
    """(trigger id, occurrence seq) of a valid, unexpired link; ``InvalidRequest`` otherwise
    (the same answer for a forged and a malformed link)."""
    body, _, sig = token.partition(".")
    bad = InvalidRequest("token: not a valid acknowledgement link", field="token")
    if len(token) > 512 or not hmac.compare_digest(sig.encode(), _sign(secret, body).encode()):
        raise bad
    try:
        trigger_id, seq, exp_s = _unb64(body).decode().split(".")
        occurrence_seq, expires_s = int(seq), int(exp_s)
    except (binascii.Error, UnicodeDecodeError, ValueError) as e:
        raise bad from e
    if expires_s * 1000 < now_ms:
        raise InvalidRequest("token: this acknowledgement link has expired", field="token")
    return trigger_id, occurrence_seq
