"""The envelope cipher over local key files and a counting fake source: round trips, key ids,
tampering, rotation, and one data key per process."""

from __future__ import annotations

import asyncio
import base64
import os
import stat
from pathlib import Path

import pytest

from trigger_service.adapters.crypto.envelope import EnvelopeCipher
from trigger_service.adapters.crypto.keyfile import KeyFile, add_key
from trigger_service.adapters.crypto.keyring import file_cipher
from trigger_service.core.errors import CipherError, ConfigError
from trigger_service.core.ports.crypto import SEALED_PREFIX, is_sealed

SECRET = "whsec_" + base64.b64encode(b"s" * 32).decode()


class CountingSource:
    """A ``KeySource`` over one key file that counts its calls."""

    def __init__(self, inner: KeyFile) -> None:
        self.inner = inner
        self.wraps = 0
        self.unwraps = 0

    @property
    def current_key_id(self) -> str:
        return self.inner.current_key_id

    def knows(self, key_id: str) -> bool:
        return self.inner.knows(key_id)

    async def wrap(self, data_key: bytes) -> bytes:
        self.wraps += 1
        return await self.inner.wrap(data_key)

    async def unwrap(self, key_id: str, wrapped: bytes) -> bytes:
        self.unwraps += 1
        return await self.inner.unwrap(key_id, wrapped)


def keys(tmp_path: Path, *ids: str) -> Path:
    """A key file with ``ids``, the first current."""
    path = tmp_path / "keys"
    for key_id in reversed(ids):
        add_key(path, key_id, current=True)
    return path


async def test_a_sealed_value_opens_to_itself_and_hides_the_plaintext(tmp_path: Path) -> None:
    cipher = file_cipher(keys(tmp_path, "k1"))
    sealed = cipher.seal('{"email": "ann@example.com"}', "triggers/t1/plan")
    assert is_sealed(sealed) and "ann@example.com" not in sealed
    assert await cipher.open(sealed, "triggers/t1/plan") == '{"email": "ann@example.com"}'
    # Random nonces: the same value seals differently each time.
    assert cipher.seal("x", "c") != cipher.seal("x", "c")


async def test_an_unsealed_value_reads_as_itself(tmp_path: Path) -> None:
    cipher = file_cipher(keys(tmp_path, "k1"))
    assert await cipher.open('{"a": 1}', "triggers/t1/payload") == '{"a": 1}'
    assert await cipher.open(SECRET, "signing_secrets/c/1") == SECRET
    assert not cipher.is_current(SECRET)


async def test_another_process_with_the_key_file_opens_it(tmp_path: Path) -> None:
    path = keys(tmp_path, "k1")
    sealed = file_cipher(path).seal("payload", "ctx")
    assert await file_cipher(path).open(sealed, "ctx") == "payload"


async def test_a_value_sealed_under_an_unknown_key_id_fails(tmp_path: Path) -> None:
    sealed = file_cipher(keys(tmp_path / "a", "k1")).seal("payload", "ctx")
    (tmp_path / "b").mkdir()
    other = file_cipher(keys(tmp_path / "b", "k2"))
    with pytest.raises(CipherError, match="not known"):
        await other.open(sealed, "ctx")


async def test_a_key_file_whose_key_changed_under_the_same_id_fails(tmp_path: Path) -> None:
    sealed = file_cipher(keys(tmp_path / "a", "k1")).seal("payload", "ctx")
    (tmp_path / "b").mkdir()
    other = file_cipher(keys(tmp_path / "b", "k1"))  # same id, another key
    with pytest.raises(CipherError, match="does not unwrap"):
        await other.open(sealed, "ctx")


@pytest.mark.parametrize("position", [8, 40, -3])
async def test_tampering_is_detected(tmp_path: Path, position: int) -> None:
    cipher = file_cipher(keys(tmp_path, "k1"))
    sealed = cipher.seal("payload", "ctx")
    flipped = "B" if sealed[position] != "B" else "C"
    tampered = sealed[:position] + flipped + sealed[position + 1:]
    with pytest.raises(CipherError):
        await cipher.open(tampered, "ctx")


async def test_a_value_moved_to_another_context_does_not_open(tmp_path: Path) -> None:
    cipher = file_cipher(keys(tmp_path, "k1"))
    sealed = cipher.seal("payload", "triggers/t1/payload")
    with pytest.raises(CipherError, match="moved"):
        await cipher.open(sealed, "triggers/t2/payload")


@pytest.mark.parametrize("value", [SEALED_PREFIX, SEALED_PREFIX + "!!!", SEALED_PREFIX + "AAAA"])
async def test_a_malformed_sealed_value_fails(tmp_path: Path, value: str) -> None:
    with pytest.raises(CipherError):
        await file_cipher(keys(tmp_path, "k1")).open(value, "ctx")


async def test_rotation_keeps_old_values_readable(tmp_path: Path) -> None:
    path = keys(tmp_path, "k1")
    before = file_cipher(path)
    old = before.seal("payload", "ctx")
    add_key(path, "k2", current=False)  # step 1: everyone can unwrap k2
    assert file_cipher(path).current_key_id == "file:k1"
    add_key(path, "k3", current=True)  # step 2: the new key wraps
    after = file_cipher(path)
    assert after.current_key_id == "file:k3"
    assert await after.open(old, "ctx") == "payload"
    assert not after.is_current(old)
    new = after.seal("payload", "ctx")
    assert after.is_current(new)
    # A process not restarted yet opens the new values too once it knows the key: here it
    # does not, which is why a new key is added last first.
    with pytest.raises(CipherError, match="not known"):
        await before.open(new, "ctx")


async def test_one_data_key_per_process_and_each_other_unwrapped_once(tmp_path: Path) -> None:
    path = keys(tmp_path, "k1")
    writer = await EnvelopeCipher.create([CountingSource(KeyFile.load(path))])
    values = [writer.seal(f"payload {i}", "ctx") for i in range(100)]
    source = CountingSource(KeyFile.load(path))
    reader = await EnvelopeCipher.create([source])
    assert source.wraps == 1
    assert [await reader.open(v, "ctx") for v in values] == [f"payload {i}"
                                                             for i in range(100)]
    assert source.unwraps == 1  # the writer's data key, once
    assert await reader.open(reader.seal("own", "ctx"), "ctx") == "own"
    assert source.unwraps == 1  # its own data key needs no unwrapping


async def test_a_data_key_is_renewed_after_its_share_of_seals(tmp_path: Path) -> None:
    path = keys(tmp_path, "k1")
    source = CountingSource(KeyFile.load(path))
    data_key = os.urandom(32)
    cipher = EnvelopeCipher([source], data_key, await source.wrap(data_key),
                            renew_after_seals=3)
    first = [cipher.seal(f"v{i}", "ctx") for i in range(3)]  # the third starts a renewal
    for _ in range(3):
        await asyncio.sleep(0)  # the renewal's wrap runs
    later = cipher.seal("v3", "ctx")
    assert source.wraps == 2
    wrapped_of = {v[: len(SEALED_PREFIX) + 60] for v in first}
    assert len(wrapped_of) == 1 and later[: len(SEALED_PREFIX) + 60] not in wrapped_of
    reader = file_cipher(path)
    assert [await reader.open(v, "ctx") for v in [*first, later]] == ["v0", "v1", "v2", "v3"]


def test_the_key_file_is_private_and_its_first_key_is_current(tmp_path: Path) -> None:
    path = tmp_path / "var" / "keys"
    add_key(path, "a", current=True)
    add_key(path, "b", current=False)
    add_key(path, "c", current=True)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert [line.split()[0] for line in path.read_text().splitlines()] == ["c", "a", "b"]
    assert KeyFile.load(path).current_key_id == "file:c"
    with pytest.raises(ConfigError, match="there already"):
        add_key(path, "a", current=True)


@pytest.mark.parametrize(("text", "error"), [
    ("", "no key"),
    ("# only a comment\n", "no key"),
    ("k1\n", "expected"),
    ("k1 not-base64!\n", "line 1"),
    ("k1 " + base64.b64encode(b"short").decode() + "\n", "32 bytes"),
    ("k1 " + base64.b64encode(b"k" * 32).decode() + "\nk1 "
     + base64.b64encode(b"j" * 32).decode() + "\n", "twice"),
])
def test_a_bad_key_file_is_refused_naming_the_setting(tmp_path: Path, text: str,
                                                     error: str) -> None:
    path = tmp_path / "keys"
    path.write_text(text)
    with pytest.raises(ConfigError, match=error) as e:
        KeyFile.load(path)
    assert "TRIGGER_ENCRYPTION_KEY_FILE" in str(e.value)


def test_a_missing_key_file_says_how_to_make_one(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"trigger_service\.platform\.keys add"):
        KeyFile.load(tmp_path / "none")
