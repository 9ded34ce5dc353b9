"""Settings of encryption at rest (section ``encryption`` of ``settings.Settings``);
``ENCRYPTION_VARIABLES`` are their rows of ``settings.VARIABLES``.
docs/operations/security.md ("Encryption at rest") says how to rotate."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trigger_service.config.parsers import flag

Row = tuple[str, tuple[str, str], Callable[[str], Any], str]

_REPO_ROOT = Path(__file__).resolve().parent.parent.parent


@dataclass(frozen=True)
class EncryptionSettings:
    # Key-encryption keys, one "<key-id> <base64 of 32 bytes>" a line, the first current
    # (make up creates one under var/). With a KMS key the file's keys still unwrap what
    # they wrapped (a move from the file to KMS), and the file may be absent.
    key_file: Path = _REPO_ROOT / "var" / "encryption.keys"
    kms_key_id: str = ""
    # Empty: the SQS endpoint (LocalStack serves both); region and credentials are SQS's.
    kms_endpoint_url: str = ""
    payloads: bool = False


ENCRYPTION_VARIABLES: tuple[Row, ...] = (
    ("TRIGGER_ENCRYPTION_KEY_FILE", ("encryption", "key_file"), Path,
     "key-encryption keys (`<id> <base64 32 bytes>` a line, the first wraps); signing "
     "secrets are always sealed with it unless TRIGGER_ENCRYPTION_KMS_KEY_ID is set"),
    ("TRIGGER_ENCRYPTION_KMS_KEY_ID", ("encryption", "kms_key_id"), str,
     "AWS KMS key (id, ARN or alias) that wraps the data keys instead of the key file "
     "(the file's keys still unwrap older values)"),
    ("TRIGGER_ENCRYPTION_KMS_ENDPOINT_URL", ("encryption", "kms_endpoint_url"), str,
     "KMS endpoint (empty: TRIGGER_SQS_ENDPOINT_URL; region and credentials are SQS's)"),
    ("TRIGGER_ENCRYPTION_PAYLOADS", ("encryption", "payloads"), flag,
     "also seal triggers' payloads and channel addresses (plans), recipient profiles and "
     "inbox messages' title, body and data; rows written before stay readable, `python -m "
     "reconciler --reencrypt` seals the triggers' ones"),
)
