"""The ``KeySource`` contract, over the local key file and AWS KMS for real (LocalStack serves
KMS; each run creates its own key there): wrap and unwrap, ids, a wrapping altered or under
an unknown key refused, and the envelope cipher over each source across two processes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import aioboto3
import pytest

from tests.keys import service_settings
from trigger_service.adapters.crypto.envelope import EnvelopeCipher, new_data_key
from trigger_service.adapters.crypto.keyfile import KeyFile, add_key
from trigger_service.adapters.crypto.kms import KmsKeys
from trigger_service.core.errors import CipherError
from trigger_service.core.ports.crypto import KeySource


async def kms_key_id() -> str:
    """A new symmetric KMS key at the service's KMS endpoint."""
    s = service_settings()
    async with aioboto3.Session().client(
            "kms", endpoint_url=s.encryption.kms_endpoint_url or s.sqs.endpoint_url,
            region_name=s.sqs.region, aws_access_key_id=s.sqs.access_key_id,
            aws_secret_access_key=s.sqs.secret_access_key) as kms:
        answer = await kms.create_key(Description="trigger-service contract test")
    return str(answer["KeyMetadata"]["KeyId"])


async def kms_source(key_id: str) -> KmsKeys:
    s = service_settings()
    return KmsKeys.from_settings(replace(s.encryption, kms_key_id=key_id), s.sqs)


@pytest.fixture(params=["file", pytest.param("kms", marks=pytest.mark.integration)])
async def source(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[KeySource]:
    if request.param == "file":
        add_key(tmp_path / "keys", "k1", current=True)
        yield KeyFile.load(tmp_path / "keys")
    else:
        yield await kms_source(await kms_key_id())


async def test_a_wrapped_key_unwraps_to_itself(source: KeySource) -> None:
    data_key = new_data_key()
    wrapped = await source.wrap(data_key)
    assert data_key not in wrapped
    assert source.knows(source.current_key_id)
    assert await source.unwrap(source.current_key_id, wrapped) == data_key


async def test_an_altered_wrapping_is_refused(source: KeySource) -> None:
    wrapped = bytearray(await source.wrap(new_data_key()))
    wrapped[len(wrapped) // 2] ^= 0x01
    with pytest.raises(CipherError):
        await source.unwrap(source.current_key_id, bytes(wrapped))


async def test_two_processes_over_one_source_read_each_other(source: KeySource) -> None:
    writer = await EnvelopeCipher.create([source])
    reader = await EnvelopeCipher.create([source])
    sealed = writer.seal('{"to": "+15550100"}', "triggers/trg_1/plan")
    assert "+15550100" not in sealed
    assert await reader.open(sealed, "triggers/trg_1/plan") == '{"to": "+15550100"}'
    assert reader.is_current(sealed)


@pytest.mark.integration
async def test_kms_rotation_keeps_values_of_the_old_key_readable() -> None:
    old, new = await kms_source(await kms_key_id()), await kms_source(await kms_key_id())
    before = (await EnvelopeCipher.create([old])).seal("payload", "ctx")
    after = await EnvelopeCipher.create([new])  # KMS opens the old key's wrapping too
    assert await after.open(before, "ctx") == "payload"
    assert not after.is_current(before)


@pytest.mark.integration
async def test_a_kms_wrapping_under_another_key_id_is_refused() -> None:
    one, other = await kms_source(await kms_key_id()), await kms_source(await kms_key_id())
    wrapped = await one.wrap(new_data_key())
    with pytest.raises(CipherError, match="kms decrypt"):
        await other.unwrap(other.current_key_id, wrapped)


async def test_an_unreachable_kms_is_a_cipher_error() -> None:
    s = service_settings()
    source = KmsKeys.from_settings(
        replace(s.encryption, kms_key_id="alias/none", kms_endpoint_url="http://127.0.0.1:9"),
        replace(s.sqs, max_attempts=1))
    with pytest.raises(CipherError, match="kms encrypt"):
        await source.wrap(new_data_key())
