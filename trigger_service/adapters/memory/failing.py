"""What every in-memory fake shares: calls are counted by method, and a fake can be told to
fail (``fake.failures["get"] = StoreError("down")`` makes each next ``get`` raise it until the
entry is removed)."""

from __future__ import annotations


class Failing:
    def __init__(self) -> None:
        self.failures: dict[str, Exception] = {}
        self.calls: dict[str, int] = {}

    def _enter(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1
        if name in self.failures:
            raise self.failures[name]
