"""Which stored values are sealed (``core.ports.crypto.Cipher``) and under which context.

Signing secrets always; a trigger row's ``SEALED_COLUMNS`` (the payload, and the plan that
holds the channels' addresses), a recipient's profile and an inbox message's
``INBOX_SEALED_COLUMNS`` (title, body, data) when ``TRIGGER_ENCRYPTION_PAYLOADS`` is on.
Reads open whatever is sealed, whatever the setting, and take an unsealed value as it is
(rows written before). An inbox text is the caller's free text: one that reads as sealed is
sealed even with the setting off, so that it reads back as itself.
A value's context is its table, row and column, so a sealed value copied to another row
does not open.
"""

from __future__ import annotations

from typing import Any, overload

from trigger_service.adapters import schema as s
from trigger_service.core.ports.crypto import Cipher, is_sealed

Row = dict[str, Any]
# Positions of the sealed columns in the statements' values (TRIGGER_COLUMNS order).
_SEALED_AT = tuple((s.TRIGGER_COLUMNS.index(c), c) for c in s.SEALED_COLUMNS)


def column_context(trigger_id: str, column: str) -> str:
    return f"{s.TABLE_TRIGGERS}/{trigger_id}/{column}"


def inbox_context(caller: str, recipient: str, message_id: str, column: str) -> str:
    return f"{s.TABLE_INBOX}/{caller}/{recipient}/{message_id}/{column}"


def secret_context(caller: str, created_at_ms: int) -> str:
    return f"{s.TABLE_SECRETS}/{caller}/{created_at_ms}"


class RowSealer:
    def __init__(self, cipher: Cipher, *, seal_payloads: bool) -> None:
        self.cipher = cipher
        self.seal_payloads = seal_payloads

    def values(self, trigger_id: str, values: list[Any]) -> list[Any]:
        """A row's values (``TRIGGER_COLUMNS`` order) as written: the sealed columns sealed
        when payloads are (unset and null values stay so)."""
        if not self.seal_payloads:
            return values
        out = list(values)
        for i, column in _SEALED_AT:
            if isinstance(out[i], str):
                out[i] = self.cipher.seal(out[i], column_context(trigger_id, column))
        return out

    async def open_row(self, trigger_id: str, row: Row) -> Row:
        """``row`` with its sealed columns opened (in place). Raises ``CipherError``."""
        for column in s.SEALED_COLUMNS:
            value = row.get(column)
            if isinstance(value, str):
                row[column] = await self.open_text(value, column_context(trigger_id, column))
        return row

    @overload
    def seal_text(self, value: str, context: str) -> str: ...
    @overload
    def seal_text(self, value: str | None, context: str) -> str | None: ...

    def seal_text(self, value: str | None, context: str) -> str | None:
        """A free-text value as written: sealed when payloads are, or when it would read as
        sealed (its clear form starts with the prefix); None stays None."""
        if value is None or not (self.seal_payloads or is_sealed(value)):
            return value
        return self.cipher.seal(value, context)

    @overload
    async def open_text(self, value: str, context: str) -> str: ...
    @overload
    async def open_text(self, value: str | None, context: str) -> str | None: ...

    async def open_text(self, value: str | None, context: str) -> str | None:
        """``value`` opened when sealed, else as it is (written in clear, or before sealing
        was on); None stays None. Raises ``CipherError``."""
        if value is None or not is_sealed(value):
            return value
        return await self.cipher.open(value, context)

    def stale(self, value: str) -> bool:
        """Should ``reencrypt`` seal this column value again: sealed under an older key, or
        in clear while payloads are sealed."""
        if is_sealed(value):
            return not self.cipher.is_current(value)
        return self.seal_payloads

    def seal_secret(self, caller: str, created_at_ms: int, secret: str) -> str:
        return self.cipher.seal(secret, secret_context(caller, created_at_ms))

    async def open_secret(self, caller: str, created_at_ms: int, value: str) -> str:
        return await self.cipher.open(value, secret_context(caller, created_at_ms))
