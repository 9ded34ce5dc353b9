"""Which of a caller's secrets sign its callbacks (pure).

A caller's secrets, newest first, are the ones made by rotation (stored), then the callers
file's ``signing_secrets``. The newest always signs; each older one keeps signing until
``TRIGGER_DISPATCH_SECRET_ROTATION_OVERLAP_S`` after the one made next, so a receiver moves to the
new secret at its own pace (it verifies with either meanwhile).

At most ``max_live`` secrets sign at once (``TRIGGER_DISPATCH_SECRET_MAX_LIVE``), the newest:
each costs one signature per delivery, and a caller rotating in a loop must not make every
delivery slower for everyone. A rotation past that cap ends the oldest one's overlap early;
the stored secrets that no longer sign are deleted at the next rotation (``retire_before``).
"""

from __future__ import annotations

import base64
import secrets as random
from collections.abc import Sequence
from datetime import datetime
from typing import Protocol


def new_secret() -> str:
    return "whsec_" + base64.b64encode(random.token_bytes(32)).decode()


def active_secrets(stored: Sequence[tuple[int, str]], file_secrets: Sequence[str],
                   now_ms: int, overlap_ms: int, max_live: int) -> list[str]:
    """The secrets that sign now, the current one first, at most ``max_live`` of them.
    ``stored``: (created_at_ms, secret), newest first; the file's secrets are older than all
    of them."""
    out = [secret for _, secret in stored[:_signing_count(stored, now_ms, overlap_ms)]]
    if not stored or now_ms < stored[-1][0] + overlap_ms:
        out += list(file_secrets)
    return out[:max(1, max_live)]


def retire_before(stored: Sequence[tuple[int, str]], now_ms: int, overlap_ms: int,
                  max_live: int) -> int | None:
    """The ``created_at_ms`` under which ``stored`` (newest first) secrets no longer sign
    (past their overlap, or beyond the ``max_live`` newest): the oldest signing one's; None
    when every one given still signs."""
    keep = min(_signing_count(stored, now_ms, overlap_ms), max(1, max_live))
    return stored[keep - 1][0] if keep < len(stored) else None


def _signing_count(stored: Sequence[tuple[int, str]], now_ms: int, overlap_ms: int) -> int:
    """How many of ``stored`` (newest first) sign: the newest, and each older one until
    ``overlap_ms`` after the one made next (a prefix: older ones stopped earlier)."""
    n = min(1, len(stored))
    while n < len(stored) and now_ms < stored[n - 1][0] + overlap_ms:
        n += 1
    return n


class Signer(Protocol):
    """A Standard Webhooks signer (``standardwebhooks.webhooks.Webhook``)."""

    def sign(self, msg_id: str, timestamp: datetime, data: str) -> str: ...


def webhook_headers(signers: Sequence[Signer], msg_id: str, now: datetime, body: str
                    ) -> dict[str, str]:
    """The Standard Webhooks headers of ``body`` sent as ``msg_id`` at ``now`` (whole
    seconds, as the header carries them), one signature per signer: what a callback and an
    operators' event are signed with."""
    now = now.replace(microsecond=0)
    return {"webhook-id": msg_id, "webhook-timestamp": str(int(now.timestamp())),
            "webhook-signature": " ".join(s.sign(msg_id, now, body) for s in signers)}
