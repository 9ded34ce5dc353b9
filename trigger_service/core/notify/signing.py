"""Which of a caller's secrets sign its callbacks (pure).

A caller's secrets, newest first, are the ones made by rotation (stored), then the callers
file's ``signing_secrets``. The newest always signs; each older one keeps signing until
``TRIGGER_DISPATCH_SECRET_ROTATION_OVERLAP_S`` after the one made next, so a receiver moves to the
new secret at its own pace (it verifies with either meanwhile).
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
                   now_ms: int, overlap_ms: int) -> list[str]:
    """The secrets that sign now, the current one first. ``stored``: (created_at_ms, secret),
    newest first; the file's secrets are older than all of them."""
    out: list[str] = []
    newer_created_ms: int | None = None  # when the next newer secret was made
    for created_ms, secret in stored:
        if newer_created_ms is None or now_ms < newer_created_ms + overlap_ms:
            out.append(secret)
        newer_created_ms = created_ms
    if newer_created_ms is None or now_ms < newer_created_ms + overlap_ms:
        out += list(file_secrets)
    return out


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
