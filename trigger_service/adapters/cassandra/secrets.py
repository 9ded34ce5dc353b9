"""``SecretStore`` on Cassandra (``signing_secrets``, infra/cql/007), with the secrets'
part of ``Resealer``: a part of ``CassandraStore``, on its statements and sealer.

A secret is always sealed (``sealing.RowSealer``; rows of releases before are in clear and
read as they are). A rotation takes its millisecond with ``INSERT IF NOT EXISTS``: two
rotations of one caller in the same millisecond would otherwise overwrite each other (the
first one's secret lost though its caller was shown it), so the later takes the next free
millisecond. Reads take the newest few only (``LIMIT``): each secret read is opened
(decrypted), and a caller's old rotations are deleted by a range delete at its next rotation.
"""

from __future__ import annotations

import structlog

from trigger_service.adapters import schema as s
from trigger_service.adapters.cassandra import driver
from trigger_service.adapters.cassandra.sealing import RowSealer
from trigger_service.core.errors import CipherError, StoreError
from trigger_service.core.ports.crypto import ResealReport

log = structlog.get_logger(__name__)

# Milliseconds a rotation tries after its own before giving up (each taken by another
# rotation of the same caller: never in practice).
_ROTATION_TRIES = 64


def secret_queries(keyspace: str) -> dict[str, str]:
    """name → CQL text for the table of this module."""
    t = f"{keyspace}.{s.TABLE_SECRETS}"
    key = f"{s.COL_CALLER} = ? AND {s.COL_CREATED_AT_MS} = ?"
    return {
        "secret_put": f"INSERT INTO {t} ({s.COL_CALLER}, {s.COL_CREATED_AT_MS}, "
        f"{s.COL_SECRET}) VALUES (?, ?, ?) IF NOT EXISTS",
        "secrets": f"SELECT {s.COL_CREATED_AT_MS}, {s.COL_SECRET} FROM {t} "
        f"WHERE {s.COL_CALLER} = ? LIMIT ?",
        "secrets_retire": f"DELETE FROM {t} WHERE {s.COL_CALLER} = ? "
        f"AND {s.COL_CREATED_AT_MS} < ?",
        # Every caller's secrets (a small table): what reencrypt pages through.
        "secrets_all": f"SELECT {s.COL_CALLER}, {s.COL_CREATED_AT_MS}, {s.COL_SECRET} FROM {t}",
        "secret_reseal": f"UPDATE {t} SET {s.COL_SECRET} = ? WHERE {key} IF {s.COL_SECRET} = ?",
    }


class CassandraSecrets:
    def __init__(self, cql: driver.Statements, sealer: RowSealer) -> None:
        """On the store's statements and sealer (``CassandraStore.statements``, ``.sealer``)."""
        self._cql = cql
        self._sealer = sealer

    async def add_secret(self, caller: str, created_at_ms: int, secret: str) -> int:
        for ms in range(created_at_ms, created_at_ms + _ROTATION_TRIES):
            rows = await self._cql.run("secret_put", [
                caller, ms, self._sealer.seal_secret(caller, ms, secret)])
            if rows and rows[0].get(s.LWT_APPLIED):
                return ms
        raise StoreError(f"no free millisecond for {caller}'s rotation near {created_at_ms}")

    async def secrets(self, caller: str, limit: int) -> list[tuple[int, str]]:
        rows = await self._cql.run("secrets", [caller, max(1, limit)])
        return [(r[s.COL_CREATED_AT_MS],
                 await self._sealer.open_secret(caller, r[s.COL_CREATED_AT_MS], r[s.COL_SECRET]))
                for r in rows]

    async def retire_secrets(self, caller: str, before_ms: int) -> None:
        await self._cql.run("secrets_retire", [caller, before_ms])

    async def reseal_secrets(self) -> ResealReport:
        scanned = resealed = failed = raced = 0
        async for page in self._cql.pages("secrets_all", []):
            for r in page:
                scanned += 1
                caller, ms, value = r[s.COL_CALLER], r[s.COL_CREATED_AT_MS], r[s.COL_SECRET]
                if value is None or self._sealer.cipher.is_current(value):
                    continue
                try:
                    secret = await self._sealer.open_secret(caller, ms, value)
                except CipherError as e:
                    log.error("reseal_secret_unreadable", caller=caller, created_at_ms=ms,
                              error=str(e))
                    failed += 1
                    continue
                rows = await self._cql.run("secret_reseal", [
                    self._sealer.seal_secret(caller, ms, secret), caller, ms, value])
                if rows and rows[0].get(s.LWT_APPLIED):
                    resealed += 1
                else:
                    raced += 1
        return ResealReport(scanned, resealed, failed, raced)
