"""Which trigger columns, inbox texts and secrets are sealed, and what ``reencrypt`` finds
stale; and a rotation in a taken millisecond (the in-memory store, as the real one)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from cassandra.query import UNSET_VALUE

from trigger_service.adapters import schema
from trigger_service.adapters.cassandra.inbox import CassandraInbox
from trigger_service.adapters.cassandra.sealing import RowSealer, inbox_context
from trigger_service.adapters.cassandra.statements import creation_values
from trigger_service.adapters.crypto.keyfile import add_key
from trigger_service.adapters.crypto.keyring import file_cipher
from trigger_service.adapters.memory.limits import MemoryRateLimiter
from trigger_service.adapters.memory.store import MemoryStore
from trigger_service.app.signing import RotationPolicy, SigningSecrets
from trigger_service.core.errors import CipherError
from trigger_service.core.model import Route, Trigger
from trigger_service.core.notify.signing import active_secrets
from trigger_service.core.ports.crypto import Cipher, is_sealed
from trigger_service.core.time.clock import ManualClock

PAYLOAD = schema.TRIGGER_COLUMNS.index("payload")
PLAN = schema.TRIGGER_COLUMNS.index("plan")
PLAN_JSON = '{"channels":[{"type":"email","to":"ann@example.com"}]}'


def trigger() -> Trigger:
    return Trigger("trg_01", "c", "http://x/", '{"secret": 1}', 5_000, 1_000, 3, Route.DIRECT)


def sealer(tmp_path: Path, *, seal_payloads: bool) -> RowSealer:
    path = tmp_path / "keys"
    if not path.exists():
        add_key(path, "k1", current=True)
    return RowSealer(file_cipher(path), seal_payloads=seal_payloads)


async def test_payload_and_plan_are_sealed_when_payloads_are(tmp_path: Path) -> None:
    s = sealer(tmp_path, seal_payloads=True)
    values = creation_values(trigger())
    values[PLAN] = PLAN_JSON
    sealed = s.values("trg_01", values)
    assert is_sealed(sealed[PAYLOAD]) and is_sealed(sealed[PLAN])
    assert [v for i, v in enumerate(sealed) if i not in (PAYLOAD, PLAN)] == [
        v for i, v in enumerate(values) if i not in (PAYLOAD, PLAN)]
    row = dict(zip(schema.TRIGGER_COLUMNS, sealed, strict=True))
    opened = await s.open_row("trg_01", row)
    assert opened["payload"] == '{"secret": 1}' and opened["plan"] == PLAN_JSON


async def test_unset_columns_stay_unset_and_a_claim_writes_no_payload(tmp_path: Path) -> None:
    s = sealer(tmp_path, seal_payloads=True)
    values = creation_values(trigger())  # no plan: unset, not sealed
    assert s.values("trg_01", values)[PLAN] is UNSET_VALUE


async def test_with_payload_sealing_off_only_reads_open(tmp_path: Path) -> None:
    on, off = sealer(tmp_path, seal_payloads=True), sealer(tmp_path, seal_payloads=False)
    values = creation_values(trigger())
    assert off.values("trg_01", values) == values
    row = dict(zip(schema.TRIGGER_COLUMNS, on.values("trg_01", values), strict=True))
    assert (await off.open_row("trg_01", row))["payload"] == '{"secret": 1}'


async def test_stale_is_clear_text_when_sealing_and_an_older_key(tmp_path: Path) -> None:
    on = sealer(tmp_path, seal_payloads=True)
    current = on.cipher.seal("x", "c")
    assert on.stale('{"a": 1}') and not on.stale(current)
    assert not sealer(tmp_path, seal_payloads=False).stale('{"a": 1}')
    add_key(tmp_path / "keys", "k2", current=True)
    assert sealer(tmp_path, seal_payloads=False).stale(current)


async def test_secrets_are_sealed_whatever_the_payload_setting(tmp_path: Path) -> None:
    s = sealer(tmp_path, seal_payloads=False)
    sealed = s.seal_secret("c", 7, "whsec_abc")
    assert is_sealed(sealed) and "whsec_abc" not in sealed
    assert await s.open_secret("c", 7, sealed) == "whsec_abc"


async def test_two_rotations_in_one_millisecond_keep_both_secrets() -> None:
    store, clock = MemoryStore(), ManualClock(1_000_000)
    policy = RotationPolicy(60)
    signing = SigningSecrets(store, clock, MemoryRateLimiter(clock), policy)
    first = await signing.rotate("c")
    second = await signing.rotate("c")  # the clock has not moved
    assert (first.created_at_ms, second.created_at_ms) == (1_000_000, 1_000_001)
    assert await store.secrets("c", 3) == [(1_000_001, second.secret), (1_000_000, first.secret)]
    signing_now = active_secrets(await store.secrets("c", policy.max_live), [], clock.now_ms(),
                                 policy.overlap_s * 1000, policy.max_live)
    assert signing_now == [second.secret, first.secret]  # both sign


async def test_inbox_text_is_sealed_with_payloads_and_a_look_alike_always(
        tmp_path: Path) -> None:
    on, off = sealer(tmp_path, seal_payloads=True), sealer(tmp_path, seal_payloads=False)
    context = inbox_context("c", "ada", "msg_1", "title")
    sealed = on.seal_text("Standup", context)
    assert sealed is not None and is_sealed(sealed) and "Standup" not in sealed
    assert await off.open_text(sealed, context) == "Standup"  # reads open, whatever the setting
    assert off.seal_text("Standup", context) == "Standup"
    assert on.seal_text(None, context) is None and await on.open_text(None, context) is None
    assert await on.open_text("written in clear", context) == "written in clear"
    # A caller's clear text that reads as sealed is sealed anyway, so it reads back as itself.
    look_alike = off.seal_text("enc1:not really", context)
    assert look_alike is not None and look_alike != "enc1:not really"
    assert await off.open_text(look_alike, context) == "enc1:not really"
    with pytest.raises(CipherError):  # bound to its message and column
        await on.open_text(sealed, inbox_context("c", "ada", "msg_1", "body"))


class _CountingCipher:
    """A real cipher that counts what it opens."""

    def __init__(self, inner: Cipher) -> None:
        self._inner = inner
        self.opened = 0

    def seal(self, plaintext: str, context: str) -> str:
        return self._inner.seal(plaintext, context)

    async def open(self, value: str, context: str) -> str:
        self.opened += 1
        return await self._inner.open(value, context)

    def is_current(self, value: str) -> bool:
        return self._inner.is_current(value)


class _InboxRows:
    """The inbox's statements over rows in hand (newest first, as ``inbox_before`` reads)."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self._rows = rows

    async def run(self, name: str, params: Sequence[Any]) -> list[dict[str, Any]]:
        assert name == "inbox_before"
        return [r for r in self._rows if r[schema.COL_MESSAGE_ID] < params[2]]

    def pages(self, name: str, params: Sequence[Any], page_size: int | None = None
              ) -> AsyncIterator[list[dict[str, Any]]]:
        raise AssertionError("the inbox lists by run")

    async def run_unlogged(self, writes: Sequence[tuple[str, Sequence[Any]]]) -> None:
        raise AssertionError("a listing writes nothing")

    async def run_conditional(self, writes: Sequence[tuple[str, Sequence[Any]]]
                              ) -> list[dict[str, Any]]:
        raise AssertionError("a listing writes nothing")


async def test_an_unread_listing_opens_no_read_message(tmp_path: Path) -> None:
    cipher = _CountingCipher(sealer(tmp_path, seal_payloads=True).cipher)
    rows = RowSealer(cipher, seal_payloads=True)

    def row(i: int, read_at_ms: int | None) -> dict[str, Any]:
        mid = f"msg_{i:02}"
        return {schema.COL_CALLER: "c", schema.COL_RECIPIENT: "ada", schema.COL_MESSAGE_ID: mid,
                schema.COL_TRIGGER_ID: "trg_1", schema.COL_OCCURRENCE_ID: "o",
                **{c: rows.seal_text(f"{c} {i}", inbox_context("c", "ada", mid, c))
                   for c in schema.INBOX_SEALED_COLUMNS},
                schema.COL_CREATED_AT_MS: i, schema.COL_READ_AT_MS: read_at_ms,
                schema.COL_DELETED_AT_MS: None}

    inbox = CassandraInbox(_InboxRows([row(i, None if i < 2 else 5)
                                       for i in reversed(range(12))]), rows)
    page = await inbox.list_inbox("c", "ada", before=None, limit=10, unread_only=True)
    assert [(m.message_id, m.title) for m in page.items] == [
        ("msg_01", "title 1"), ("msg_00", "title 0")]
    assert cipher.opened == 2 * len(schema.INBOX_SEALED_COLUMNS)  # the two unread ones'
