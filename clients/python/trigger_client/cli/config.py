"""Where triggerctl sends its requests: flags, then the environment (``TRIGGER_API_URL``,
``TRIGGER_TOKEN``, ``TRIGGER_PROFILE``), then a profile of the file
``$TRIGGERCTL_CONFIG`` (default ``~/.config/triggerctl/config.toml``)::

    [default]
    api_url = "http://127.0.0.1:8080"
    token = "dev-token"

    [staging]
    api_url = "https://triggers.staging.example"
    token = "..."
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import httpx

DEFAULT_URL = "http://127.0.0.1:8080"


@dataclass(frozen=True, slots=True)
class CliConfig:
    api_url: str
    token: str | None
    profile: str
    # tests hand in an httpx.MockTransport (CliRunner.invoke(..., obj=transport))
    transport: httpx.BaseTransport | None = field(default=None, compare=False)


def config_path(env: Mapping[str, str]) -> Path:
    default = Path(env.get("HOME", "~")) / ".config" / "triggerctl" / "config.toml"
    return Path(env.get("TRIGGERCTL_CONFIG") or default).expanduser()


def resolve(api_url: str | None, token: str | None, profile: str | None,
            env: Mapping[str, str] | None = None,
            transport: httpx.BaseTransport | None = None) -> CliConfig:
    """The settings in force; a profile named explicitly must exist (ValueError naming it)."""
    e = os.environ if env is None else env
    name = profile or e.get("TRIGGER_PROFILE") or "default"
    path = config_path(e)
    section: Mapping[str, object] = {}
    if path.is_file():
        with path.open("rb") as f:
            data = tomllib.load(f)
        section = data.get(name) or {}
        if not isinstance(section, dict):
            raise ValueError(f"{path}: [{name}] is not a table")
    if (profile or e.get("TRIGGER_PROFILE")) and not section:
        raise ValueError(f"no profile [{name}] in {path}")
    url = api_url or e.get("TRIGGER_API_URL") or section.get("api_url") or DEFAULT_URL
    tok = token or e.get("TRIGGER_TOKEN") or section.get("token")
    return CliConfig(str(url), str(tok) if tok else None, name, transport)
