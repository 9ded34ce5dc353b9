"""``LiveCallers``: the callers file reloaded without a restart; a bad file keeps the old."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.limits.production_env import prod_env
from trigger_service.config.callers import hash_token
from trigger_service.config.live_callers import LiveCallers
from trigger_service.config.production import callers_vet
from trigger_service.config.settings import Settings
from trigger_service.core.errors import ConfigError


def write(path: Path, *tokens: str) -> Path:
    path.write_text("".join(
        f'[callers.c{i}]\ntoken_sha256 = "{hash_token(t)}"\n'
        'callback_prefixes = ["https://hooks.example.com/"]\n'
        f'signing_secrets = ["whsec_{"QUJD" * 8}"]\n' for i, t in enumerate(tokens)))
    return path


def test_a_reload_revokes_a_removed_token_and_admits_a_new_one(tmp_path: Path) -> None:
    path = write(tmp_path / "callers.toml", "old-token", "kept-token")
    live = LiveCallers.load(path)
    assert live.principal("old-token") is not None
    write(path, "kept-token", "new-token")
    live.reload()
    assert live.principal("old-token") is None and live.by_token("old-token") is None
    assert live.principal("new-token") is not None
    assert live.token_hashes() == {hash_token("kept-token"), hash_token("new-token")}
    assert live.by_name("c1") is not None and live.signing_secrets("c1")


@pytest.mark.parametrize("bad", ["[callers.c0\n", "", "[callers.c0]\ntoken_sha256 = 'x'\n"])
def test_a_bad_file_on_reload_raises_and_keeps_the_callers_in_use(tmp_path: Path,
                                                                  bad: str) -> None:
    path = write(tmp_path / "callers.toml", "tok")
    live = LiveCallers.load(path)
    before = live.current
    path.write_text(bad)
    with pytest.raises(ConfigError, match=r"callers\.toml"):
        live.reload()
    assert live.current is before and live.principal("tok") is not None


def test_a_missing_file_on_reload_keeps_the_callers_in_use(tmp_path: Path) -> None:
    path = write(tmp_path / "callers.toml", "tok")
    live = LiveCallers.load(path)
    path.unlink()
    with pytest.raises(ConfigError, match="TRIGGER_API_CALLERS_FILE"):
        live.reload()
    assert live.principal("tok") is not None


def test_production_refuses_a_development_token_on_reload(tmp_path: Path) -> None:
    settings = Settings.from_env(prod_env(tmp_path))
    vet = callers_vet(settings)
    assert vet is not None
    path = write(tmp_path / "live.toml", "tok")
    live = LiveCallers.load(path, vet)
    write(path, "tok", "dev-token")
    with pytest.raises(ConfigError, match="development token"):
        live.reload()
    assert live.principal("dev-token") is None and live.principal("tok") is not None
    with pytest.raises(ConfigError, match="development token"):
        LiveCallers.load(path, vet)


def test_development_on_loopback_reloads_anything_that_loads(tmp_path: Path) -> None:
    assert callers_vet(Settings.from_env({"TRIGGER_ENV": "development"})) is None
    path = write(tmp_path / "callers.toml", "dev-token")
    assert LiveCallers.load(path, None).principal("dev-token") is not None
