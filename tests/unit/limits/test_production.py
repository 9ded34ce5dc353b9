"""``TRIGGER_ENV=production``, the default, refuses development credentials and a public
``/metrics``; only ``TRIGGER_ENV=development`` on loopback is not checked."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from tests.unit.limits.production_env import callers_file, prod_env
from trigger_service.config.callers import CallerRegistry
from trigger_service.config.production import (
    DEV_CALLERS_FILE,
    callers_vet,
    check_production,
    dev_token_hashes,
    production_problems,
)
from trigger_service.config.production_deps import is_loopback
from trigger_service.config.settings import Settings
from trigger_service.core.errors import ConfigError


def test_a_proper_production_configuration_starts(tmp_path: Path) -> None:
    check_production(Settings.from_env(prod_env(tmp_path)))
    public = prod_env(tmp_path, TRIGGER_API_HOST="0.0.0.0", TRIGGER_METRICS_TOKEN="m" * 32)
    check_production(Settings.from_env(public))


def test_development_on_loopback_is_never_checked() -> None:
    # the dev file, the dev secret: fine in development asked for
    check_production(Settings.from_env({"TRIGGER_ENV": "development"}))


@pytest.mark.parametrize("env", [
    {}, {"TRIGGER_API_HOST": "127.0.0.1", "TRIGGER_METRICS_HOST": "127.0.0.1"},
    {"TRIGGER_API_HOST": "localhost"}, {"TRIGGER_API_HOST": "::1"},
])
def test_production_is_the_default_on_loopback_too(env: dict[str, str]) -> None:
    # Behind a reverse proxy on the same host: forgetting TRIGGER_ENV opens nothing.
    settings = Settings.from_env(env)
    assert settings.production
    with pytest.raises(ConfigError) as e:
        check_production(settings)
    text = str(e.value)
    assert text.startswith("TRIGGER_ENV=production (the default")
    assert "TRIGGER_ENV=development" in text
    assert "TRIGGER_API_CALLERS_FILE is the development file" in text
    assert "development token hash" in text and "TRIGGER_API_ACK_SECRET" in text
    assert "the API serves /metrics to whoever reaches it" in text


def test_without_trigger_env_a_reload_refuses_the_development_tokens() -> None:
    vet = callers_vet(Settings.from_env({}))
    assert vet is not None
    assert any("development token" in p for p in vet(CallerRegistry.load(DEV_CALLERS_FILE)))


def test_production_lists_every_problem_of_the_development_defaults() -> None:
    env = {"TRIGGER_ENV": "production", "TRIGGER_API_HOST": "0.0.0.0"}
    with pytest.raises(ConfigError) as e:
        check_production(Settings.from_env(env))
    text = str(e.value)
    assert "TRIGGER_API_CALLERS_FILE is the development file" in text
    assert "development token hash" in text
    assert "TRIGGER_API_ACK_SECRET" in text
    assert "TRIGGER_API_HOST=0.0.0.0" in text and "TRIGGER_METRICS_TOKEN" in text


@pytest.mark.parametrize("token", ["dev-token", "ops-token", "viewer-token"])
def test_a_development_token_copied_into_another_file_is_refused(tmp_path: Path,
                                                                 token: str) -> None:
    settings = Settings.from_env(prod_env(tmp_path))
    reg = CallerRegistry.load(callers_file(tmp_path, ops_token=token))
    problems = production_problems(settings, reg)
    assert len(problems) == 1 and "development token" in problems[0]


def test_the_development_files_hashes_are_the_known_ones() -> None:
    reg = CallerRegistry.load(DEV_CALLERS_FILE)
    assert reg.token_hashes() <= dev_token_hashes()


@pytest.mark.parametrize("secret", ["dev-ack-secret-change-me", "short"])
def test_a_default_or_short_ack_secret_is_refused(tmp_path: Path, secret: str) -> None:
    settings = Settings.from_env(prod_env(tmp_path, TRIGGER_API_ACK_SECRET=secret))
    with pytest.raises(ConfigError, match="TRIGGER_API_ACK_SECRET"):
        check_production(settings)


def test_a_short_previous_ack_key_is_refused(tmp_path: Path) -> None:
    good = "p" * 40
    settings = Settings.from_env(prod_env(tmp_path,
                                          TRIGGER_API_ACK_PREVIOUS_SECRETS=f"{good},short"))
    assert settings.api.ack_previous_secrets == (good, "short")
    with pytest.raises(ConfigError, match="TRIGGER_API_ACK_PREVIOUS_SECRETS"):
        check_production(settings)
    check_production(Settings.from_env(prod_env(tmp_path, TRIGGER_API_ACK_PREVIOUS_SECRETS=good)))


def test_a_public_metrics_port_of_the_workers_needs_the_token_too(tmp_path: Path) -> None:
    settings = Settings.from_env(prod_env(tmp_path, TRIGGER_METRICS_HOST="10.0.0.5",
                                          TRIGGER_METRICS_TOKEN=""))
    with pytest.raises(ConfigError, match=r"TRIGGER_METRICS_HOST=10\.0\.0\.5"):
        check_production(settings)
    token = replace(settings, metrics_token="m" * 32)
    check_production(token)


@pytest.mark.parametrize(("host", "loopback"), [
    ("127.0.0.1", True), ("127.8.0.1", True), ("::1", True), ("localhost", True),
    ("0.0.0.0", False), ("", False), ("10.0.0.1", False), ("api.internal", False),
])
def test_loopback_addresses(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_an_unknown_environment_is_refused() -> None:
    with pytest.raises(ConfigError, match="TRIGGER_ENV"):
        Settings.from_env({"TRIGGER_ENV": "prod"})


def test_keepalive_is_capped_at_75_s() -> None:
    with pytest.raises(ConfigError, match="TRIGGER_LIMITS_KEEPALIVE_TIMEOUT_S"):
        Settings.from_env({"TRIGGER_LIMITS_KEEPALIVE_TIMEOUT_S": "3630"})
    settings = Settings.from_env({"TRIGGER_LIMITS_KEEPALIVE_TIMEOUT_S": "75"})
    assert settings.limits.keepalive_timeout_s == 75


def test_no_secret_is_in_the_settings_repr() -> None:
    secrets = {"TRIGGER_METRICS_TOKEN": "hunter2-metrics", "TRIGGER_API_ACK_SECRET": "hunter2-ack",
               "TRIGGER_API_ACK_PREVIOUS_SECRETS": "hunter2-old-ack",
               "TRIGGER_SQS_SECRET_ACCESS_KEY": "hunter2-sqs"}
    settings = Settings.from_env(secrets)
    assert settings.api.ack_secret == "hunter2-ack"
    assert "hunter2" not in repr(settings)
