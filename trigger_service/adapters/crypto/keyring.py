"""The cipher a process uses, from its settings (``platform.wiring`` and the scripts)."""

from __future__ import annotations

from pathlib import Path

from trigger_service.adapters.crypto.envelope import EnvelopeCipher, new_data_key
from trigger_service.adapters.crypto.keyfile import KeyFile
from trigger_service.adapters.crypto.kms import KmsKeys
from trigger_service.config.encryption import EncryptionSettings
from trigger_service.config.sqs import SqsSettings
from trigger_service.core.ports.crypto import KeySource


async def open_cipher(enc: EncryptionSettings, sqs: SqsSettings) -> EnvelopeCipher:
    """With ``TRIGGER_ENCRYPTION_KMS_KEY_ID``: KMS wraps, and the key file (if there) unwraps what
    it wrapped before; else the key file alone, which must exist. One KMS call. Raises
    ``ConfigError`` (the key file) or ``CipherError`` (KMS)."""
    sources: list[KeySource] = []
    if enc.kms_key_id:
        sources.append(KmsKeys.from_settings(enc, sqs))
        if enc.key_file.exists():
            sources.append(KeyFile.load(enc.key_file))
    else:
        sources.append(KeyFile.load(enc.key_file))
    return await EnvelopeCipher.create(sources)


def file_cipher(path: Path) -> EnvelopeCipher:
    """A cipher over the key file ``path`` alone, for scripts and test fixtures outside an
    event loop or in one (no I/O but the file's read). Raises ``ConfigError``."""
    keys = KeyFile.load(path)
    data_key = new_data_key()
    return EnvelopeCipher([keys], data_key, keys.wrap_now(data_key))
