"""The processes are installed commands: each ``[project.scripts]`` entry of pyproject.toml
names a function that exists, and the installed package declares the same entries."""

from __future__ import annotations

import importlib
import tomllib
from importlib.metadata import entry_points
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
EXPECTED = {"trigger-api", "trigger-dispatcher", "trigger-sweeper", "trigger-reconciler",
            "trigger-migrate"}


def declared() -> dict[str, str]:
    with (ROOT / "pyproject.toml").open("rb") as f:
        scripts: dict[str, str] = tomllib.load(f)["project"]["scripts"]
    return scripts


def test_every_process_has_a_command_naming_its_main() -> None:
    scripts = declared()
    assert set(scripts) == EXPECTED
    for target in scripts.values():
        module, _, name = target.partition(":")
        assert callable(getattr(importlib.import_module(module), name)), target


def test_the_installed_package_declares_the_same_commands() -> None:
    installed = {e.name: e.value for e in entry_points(group="console_scripts")
                 if e.name in EXPECTED}
    assert installed == declared()
