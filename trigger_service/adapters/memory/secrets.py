"""``SecretStore`` in memory, mixed into ``MemoryStore`` (its ``_enter`` fails a call when
told to); the same contract as ``adapters.cassandra.secrets``."""

from __future__ import annotations

from trigger_service.core.ports.crypto import ResealReport


class MemorySecrets:
    signing_secrets: dict[str, list[tuple[int, str]]]
    secret_reads: int  # secrets opened by reads (the real store decrypts each)

    def _init_secrets(self) -> None:
        self.signing_secrets = {}
        self.secret_reads = 0

    def _enter(self, name: str) -> None:
        raise NotImplementedError  # provided by Failing

    async def add_secret(self, caller: str, created_at_ms: int, secret: str) -> int:
        self._enter("add_secret")
        mine = self.signing_secrets.setdefault(caller, [])
        taken = {ms for ms, _ in mine}
        while created_at_ms in taken:  # as the real store: the next free millisecond
            created_at_ms += 1
        mine.append((created_at_ms, secret))
        return created_at_ms

    async def secrets(self, caller: str, limit: int) -> list[tuple[int, str]]:
        self._enter("secrets")
        newest = sorted(self.signing_secrets.get(caller, []), reverse=True)[:limit]
        self.secret_reads += len(newest)
        return newest

    async def retire_secrets(self, caller: str, before_ms: int) -> None:
        self._enter("retire_secrets")
        if caller in self.signing_secrets:
            self.signing_secrets[caller] = [
                (ms, v) for ms, v in self.signing_secrets[caller] if ms >= before_ms]

    async def reseal_secrets(self) -> ResealReport:
        self._enter("reseal_secrets")  # a fake keeps values in clear: nothing to move
        return ResealReport(scanned=sum(len(v) for v in self.signing_secrets.values()))
