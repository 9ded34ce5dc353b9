"""Loaded by LocalStack's interpreter at start-up (infra/services/localstack.sh puts this
folder on its PYTHONPATH): Python 3.12's ``uuid.uuid5`` accepts a bytes name, and
localstack-core 4.12's KMS passes one (key material ids), so on 3.11 every CreateKey failed
with "encoding without a string argument". Same digest as 3.12's for both kinds of name."""

import hashlib
import uuid

_uuid5 = uuid.uuid5


def _uuid5_bytes_too(namespace: uuid.UUID, name: str | bytes) -> uuid.UUID:
    if isinstance(name, bytes):
        digest = hashlib.sha1(namespace.bytes + name, usedforsecurity=False).digest()
        return uuid.UUID(bytes=digest[:16], version=5)
    return _uuid5(namespace, name)


uuid.uuid5 = _uuid5_bytes_too
