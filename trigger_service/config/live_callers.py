"""The callers a process reads per request or per delivery, reloadable without a restart.

``Callers`` is what the API's authentication, the quota gate and the dispatcher ask of the
callers file; an immutable ``CallerRegistry`` (tests, one-shot tools) and ``LiveCallers``
(every long-running process, ``platform.wiring``) both answer it. ``LiveCallers.reload``
reads the file again and swaps the registry in one assignment, so a request sees the old
callers or the new ones, never a mix; a revoked token fails from the next request on. A file
that does not load (or that ``vet`` refuses) raises ``ConfigError`` and the old registry
stays: a typo in the file must not lock everyone out.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from trigger_service.config.callers import Caller, CallerRegistry, Principal
from trigger_service.core.errors import ConfigError
from trigger_service.core.urls import CallbackUrl

# Problems a registry has (empty: fine), e.g. the production check's public token hashes.
Vet = Callable[[CallerRegistry], list[str]]


class Callers(Protocol):
    """Who may use the API and how their triggers are delivered (``CallerRegistry``)."""

    def by_token(self, token: str) -> Caller | None: ...

    def principal(self, token: str) -> Principal | None: ...

    def token_hashes(self) -> set[str]: ...

    def by_name(self, name: str) -> Caller | None: ...

    def names_callback_host(self, name: str, url: CallbackUrl) -> bool: ...

    def signing_secrets(self, name: str) -> tuple[str, ...]: ...


class LiveCallers:
    """The current ``CallerRegistry`` of a callers file; ``reload`` replaces it."""

    def __init__(self, path: Path, registry: CallerRegistry, vet: Vet | None = None) -> None:
        self.path = path
        self._current = registry
        self._vet = vet

    @classmethod
    def load(cls, path: Path, vet: Vet | None = None) -> LiveCallers:
        """Read ``path`` now; raises ``ConfigError`` as ``reload`` does."""
        return cls(path, _checked(path, vet), vet)

    @property
    def current(self) -> CallerRegistry:
        return self._current

    def reload(self) -> CallerRegistry:
        """Read the file again and use it from now on. Raises ``ConfigError`` (naming the
        file and the problem) and keeps the registry in use when the file does not load or
        ``vet`` finds a problem. Safe to call at any time, from the event loop's thread."""
        self._current = _checked(self.path, self._vet)
        return self._current

    def by_token(self, token: str) -> Caller | None:
        return self._current.by_token(token)

    def principal(self, token: str) -> Principal | None:
        return self._current.principal(token)

    def token_hashes(self) -> set[str]:
        return self._current.token_hashes()

    def by_name(self, name: str) -> Caller | None:
        return self._current.by_name(name)

    def names_callback_host(self, name: str, url: CallbackUrl) -> bool:
        return self._current.names_callback_host(name, url)

    def signing_secrets(self, name: str) -> tuple[str, ...]:
        return self._current.signing_secrets(name)


def _checked(path: Path, vet: Vet | None) -> CallerRegistry:
    registry = CallerRegistry.load(path)
    problems = vet(registry) if vet else []
    if problems:
        raise ConfigError(f"TRIGGER_API_CALLERS_FILE {path}: " + "; ".join(problems))
    return registry
