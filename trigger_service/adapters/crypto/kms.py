"""``KmsKeys``: the key-encryption key is an AWS KMS key (``TRIGGER_ENCRYPTION_KMS_KEY_ID``); a data
key is wrapped with KMS ``Encrypt`` and unwrapped with ``Decrypt``. LocalStack serves KMS
for ``make up`` and the tests.

A process calls KMS once at start (its data key) and once per other data key it opens (the
cipher caches them), never per value; each call opens its own client (they are that rare).
"""

from __future__ import annotations

from typing import Any, Final

import aioboto3
from aiobotocore.config import AioConfig
from botocore.exceptions import BotoCoreError, ClientError

from trigger_service.config.encryption import EncryptionSettings
from trigger_service.config.sqs import SqsSettings
from trigger_service.core.errors import CipherError

KEY_ID_PREFIX: Final = "kms:"


class KmsKeys:
    def __init__(self, key_id: str, client_args: dict[str, Any]) -> None:
        """Use :meth:`from_settings` (``client_args``: aioboto3's ``client("kms", ...)``)."""
        self._key_id = key_id
        self._current = KEY_ID_PREFIX + key_id
        self._client_args = client_args
        self._session = aioboto3.Session()

    @classmethod
    def from_settings(cls, enc: EncryptionSettings, sqs: SqsSettings) -> KmsKeys:
        """The KMS key ``enc.kms_key_id`` at ``enc.kms_endpoint_url`` (else SQS's endpoint),
        with SQS's region and credentials."""
        return cls(enc.kms_key_id, {
            "endpoint_url": enc.kms_endpoint_url or sqs.endpoint_url,
            "region_name": sqs.region,
            "aws_access_key_id": sqs.access_key_id,
            "aws_secret_access_key": sqs.secret_access_key,
            "config": AioConfig(retries={"total_max_attempts": sqs.max_attempts,
                                         "mode": "standard"},
                                connect_timeout=5, read_timeout=10),
        })

    @property
    def current_key_id(self) -> str:
        return self._current

    def knows(self, key_id: str) -> bool:
        # Any KMS key: KMS itself says whether this account may use it.
        return key_id.startswith(KEY_ID_PREFIX)

    async def wrap(self, data_key: bytes) -> bytes:
        try:
            async with self._session.client("kms", **self._client_args) as kms:
                answer = await kms.encrypt(KeyId=self._key_id, Plaintext=data_key)
        except (BotoCoreError, ClientError, OSError) as e:
            raise CipherError(f"kms encrypt with {self._key_id!r} failed: {e}") from e
        return bytes(answer["CiphertextBlob"])

    async def unwrap(self, key_id: str, wrapped: bytes) -> bytes:
        try:
            async with self._session.client("kms", **self._client_args) as kms:
                answer = await kms.decrypt(KeyId=key_id.removeprefix(KEY_ID_PREFIX),
                                           CiphertextBlob=wrapped)
        except (BotoCoreError, ClientError, OSError) as e:
            raise CipherError(f"kms decrypt with {key_id!r} failed: {e}") from e
        return bytes(answer["Plaintext"])
