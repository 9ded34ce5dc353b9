"""The production check fails closed: it runs unless ``TRIGGER_ENV=development`` is asked for
on loopback, and each development default a first production day meets is refused, named in
the message."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.limits.production_env import prod_env
from trigger_service.config.callers import CallerRegistry
from trigger_service.config.encryption import EncryptionSettings
from trigger_service.config.production import (
    DEV_CALLERS_FILE,
    check_production,
    production_problems,
    production_reason,
)
from trigger_service.config.production_needs import PRODUCTION_NEEDS
from trigger_service.config.settings import VARIABLES, Settings
from trigger_service.core.errors import ConfigError

DEV_KEY_FILE = EncryptionSettings.key_file
# Email through SES with AWS's own endpoint and real credentials (the problems below change one).
SES_FIT = {"TRIGGER_EMAIL_TRANSPORT": "ses", "TRIGGER_EMAIL_SES_ENDPOINT_URL": "",
           "TRIGGER_EMAIL_SES_ACCESS_KEY_ID": "AKIAEXAMPLEEXAMPLE",
           "TRIGGER_EMAIL_SES_SECRET_ACCESS_KEY": "x" * 40}
# (the variables changed from a fit production configuration, the variable every problem
# found must name)
PROBLEMS: list[tuple[dict[str, str], str]] = [
    ({"TRIGGER_API_CALLERS_FILE": str(DEV_CALLERS_FILE)}, "TRIGGER_API_CALLERS_FILE"),
    ({"TRIGGER_API_ACK_SECRET": "short"}, "TRIGGER_API_ACK_SECRET"),
    ({"TRIGGER_API_HOST": "0.0.0.0", "TRIGGER_METRICS_TOKEN": ""}, "TRIGGER_METRICS_TOKEN"),
    # on loopback: the API's /metrics is what a reverse proxy in front of it serves
    ({"TRIGGER_METRICS_TOKEN": ""}, "TRIGGER_METRICS_TOKEN"),
    ({"TRIGGER_API_PUBLIC_URL": "https://localhost:8080"}, "TRIGGER_API_PUBLIC_URL"),
    ({"TRIGGER_API_PUBLIC_URL": "https://127.0.0.1"}, "TRIGGER_API_PUBLIC_URL"),
    ({"TRIGGER_API_PUBLIC_URL": "http://reminders.example.com"}, "TRIGGER_API_PUBLIC_URL"),
    ({"TRIGGER_CASSANDRA_REPLICATION_FACTOR": "1"}, "TRIGGER_CASSANDRA_REPLICATION_FACTOR"),
    ({"TRIGGER_CASSANDRA_REPLICATION_FACTOR": "2"}, "TRIGGER_CASSANDRA_REPLICATION_FACTOR"),
    ({"TRIGGER_CASSANDRA_USERNAME": ""}, "TRIGGER_CASSANDRA_USERNAME"),
    ({"TRIGGER_CASSANDRA_PASSWORD": ""}, "TRIGGER_CASSANDRA_PASSWORD"),
    ({"TRIGGER_CASSANDRA_TLS_CA_FILE": ""}, "TRIGGER_CASSANDRA_TLS_CA_FILE"),
    ({"TRIGGER_CASSANDRA_TLS_CA_FILE": "/nonexistent/ca.pem"}, "TRIGGER_CASSANDRA_TLS_CA_FILE"),
    ({"TRIGGER_SQS_ENDPOINT_URL": "http://127.0.0.1:4566"}, "TRIGGER_SQS_ENDPOINT_URL"),
    ({"TRIGGER_SQS_ENDPOINT_URL": "https://localhost:9324"}, "TRIGGER_SQS_ENDPOINT_URL"),
    ({"TRIGGER_SQS_ENDPOINT_URL": "https://localstack.internal:4566"}, "TRIGGER_SQS_ENDPOINT_URL"),
    ({"TRIGGER_SQS_ENDPOINT_URL": "http://sqs.eu-west-1.amazonaws.com"},
     "TRIGGER_SQS_ENDPOINT_URL"),
    ({"TRIGGER_SQS_ACCESS_KEY_ID": "test"}, "TRIGGER_SQS_ACCESS_KEY_ID"),
    ({"TRIGGER_SQS_SECRET_ACCESS_KEY": "test"}, "TRIGGER_SQS_SECRET_ACCESS_KEY"),
    ({"TRIGGER_REDIS_URL": "rediss://redis.internal:6380/0"}, "TRIGGER_REDIS_URL"),
    ({"TRIGGER_REDIS_URL": "rediss://trigger@redis.internal:6380/0"}, "TRIGGER_REDIS_URL"),
    ({"TRIGGER_REDIS_URL": "redis://trigger:pw@redis.internal:6379/0"}, "TRIGGER_REDIS_URL"),
    ({"TRIGGER_REDIS_TLS_CA_FILE": "/nonexistent/redis-ca.pem"}, "TRIGGER_REDIS_TLS_CA_FILE"),
    ({"TRIGGER_SMTP_USER": "mailer", "TRIGGER_SMTP_PASSWORD": "pw"}, "TRIGGER_SMTP_STARTTLS"),
    ({"TRIGGER_SMS_ACCOUNT_SID": "AC" + "0" * 32}, "TRIGGER_SMS_ACCOUNT_SID"),
    ({"TRIGGER_SMS_AUTH_TOKEN": "dev-sms-token"}, "TRIGGER_SMS_AUTH_TOKEN"),
    ({"TRIGGER_SMS_FROM_NUMBER": "+15005550006"}, "TRIGGER_SMS_FROM_NUMBER"),
    ({"TRIGGER_SMS_BASE_URL": "http://sms.internal"}, "TRIGGER_SMS_BASE_URL"),
    ({"TRIGGER_PUSH_PROJECT": "trigger-dev"}, "TRIGGER_PUSH_PROJECT"),
    ({"TRIGGER_PUSH_BEARER": "dev-push-token"}, "TRIGGER_PUSH_BEARER"),
    ({"TRIGGER_PUSH_BASE_URL": "http://fcm.internal"}, "TRIGGER_PUSH_BASE_URL"),
    ({**SES_FIT, "TRIGGER_EMAIL_SES_ENDPOINT_URL": "http://127.0.0.1:4566"},
     "TRIGGER_EMAIL_SES_ENDPOINT_URL"),
    ({**SES_FIT, "TRIGGER_EMAIL_SES_ENDPOINT_URL": "http://ses.internal"},
     "TRIGGER_EMAIL_SES_ENDPOINT_URL"),
    ({**SES_FIT, "TRIGGER_EMAIL_SES_ACCESS_KEY_ID": "test"}, "TRIGGER_EMAIL_SES_ACCESS_KEY_ID"),
    ({**SES_FIT, "TRIGGER_EMAIL_SES_SECRET_ACCESS_KEY": "test"},
     "TRIGGER_EMAIL_SES_SECRET_ACCESS_KEY"),
    ({"TRIGGER_TELEGRAM_BOT_TOKEN": "123456789:dev-telegram-token"},
     "TRIGGER_TELEGRAM_BOT_TOKEN"),
    ({"TRIGGER_TELEGRAM_BOT_TOKEN": "42:" + "b" * 35,
      "TRIGGER_TELEGRAM_BASE_URL": "http://tg.internal"}, "TRIGGER_TELEGRAM_BASE_URL"),
    ({"TRIGGER_ENCRYPTION_KMS_KEY_ID": "", "TRIGGER_ENCRYPTION_KEY_FILE": str(DEV_KEY_FILE)},
     "TRIGGER_ENCRYPTION_KEY_FILE"),
    ({"TRIGGER_ENCRYPTION_KMS_KEY_ID": "", "TRIGGER_ENCRYPTION_KEY_FILE": "/nonexistent/keys"},
     "TRIGGER_ENCRYPTION_KEY_FILE"),
    ({"TRIGGER_ENCRYPTION_KMS_ENDPOINT_URL": "http://127.0.0.1:4566"},
     "TRIGGER_ENCRYPTION_KMS_ENDPOINT_URL"),
    ({"TRIGGER_ENCRYPTION_KMS_ENDPOINT_URL": "https://localstack.internal:4566"},
     "TRIGGER_ENCRYPTION_KMS_ENDPOINT_URL"),
    ({"TRIGGER_ENCRYPTION_KMS_ENDPOINT_URL": "http://kms.eu-west-1.amazonaws.com"},
     "TRIGGER_ENCRYPTION_KMS_ENDPOINT_URL"),
]


@pytest.mark.parametrize(("change", "variable"), PROBLEMS,
                         ids=[f"{v}={next(iter(c.values()))}" for c, v in PROBLEMS])
def test_each_problem_is_refused_and_named(tmp_path: Path, change: dict[str, str],
                                           variable: str) -> None:
    settings = Settings.from_env(prod_env(tmp_path, **change))
    problems = production_problems(settings, CallerRegistry.load(settings.api.callers_file))
    assert problems and all(variable in p for p in problems), problems
    with pytest.raises(ConfigError, match=variable):
        check_production(settings)


def test_every_production_need_is_checked_and_every_check_is_a_listed_need() -> None:
    needs = {name for name, _ in PRODUCTION_NEEDS}
    assert needs == {variable for _, variable in PROBLEMS}
    assert needs <= {v.name for v in VARIABLES}


@pytest.mark.parametrize("change", [
    {"TRIGGER_SMTP_USER": "mailer", "TRIGGER_SMTP_STARTTLS": "true"},
    {"TRIGGER_REDIS_URL": "rediss://:only-a-password@redis.internal:6380/0"},
    {"TRIGGER_CASSANDRA_REPLICATION_FACTOR": "5"},
    # SES is checked only when it sends (LocalStack's defaults are unused under SMTP), and
    # with AWS's own endpoint; a Telegram bot of one's own; a service account for FCM.
    SES_FIT,
    {"TRIGGER_TELEGRAM_BOT_TOKEN": "42:" + "b" * 35},
    {"TRIGGER_PUSH_BEARER": "dev-push-token", "TRIGGER_PUSH_CREDENTIALS_FILE": __file__},
    # a file of one's own
    {"TRIGGER_ENCRYPTION_KMS_KEY_ID": "", "TRIGGER_ENCRYPTION_KEY_FILE": __file__},
    {"TRIGGER_API_HOST": "10.0.0.4", "TRIGGER_METRICS_TOKEN": "m" * 32},
    # KMS at the region's endpoint; an endpoint nothing uses (no KMS key) is not checked.
    {"TRIGGER_ENCRYPTION_KMS_ENDPOINT_URL": "https://kms.eu-west-1.amazonaws.com"},
    {"TRIGGER_ENCRYPTION_KMS_KEY_ID": "", "TRIGGER_ENCRYPTION_KEY_FILE": __file__,
     "TRIGGER_ENCRYPTION_KMS_ENDPOINT_URL": "http://127.0.0.1:4566"},
])
def test_what_production_accepts(tmp_path: Path, change: dict[str, str]) -> None:
    check_production(Settings.from_env(prod_env(tmp_path, **change)))


def test_a_message_never_shows_the_redis_password(tmp_path: Path) -> None:
    env = prod_env(tmp_path, TRIGGER_REDIS_URL="redis://trigger:hunter2@redis.internal:6379/0")
    with pytest.raises(ConfigError) as e:
        check_production(Settings.from_env(env))
    assert "TRIGGER_REDIS_URL" in str(e.value) and "hunter2" not in str(e.value)


@pytest.mark.parametrize(("env", "named"), [
    ({"TRIGGER_API_HOST": "0.0.0.0"}, "TRIGGER_API_HOST=0.0.0.0"),
    ({"TRIGGER_API_HOST": ""}, "TRIGGER_API_HOST="),
    ({"TRIGGER_API_HOST": "::"}, "TRIGGER_API_HOST=::"),
    ({"TRIGGER_API_HOST": "api.internal"}, "TRIGGER_API_HOST=api.internal"),
    ({"TRIGGER_METRICS_HOST": "10.0.0.5"}, "TRIGGER_METRICS_HOST=10.0.0.5"),
])
def test_a_listener_off_loopback_runs_the_check_even_in_development(
        env: dict[str, str], named: str) -> None:
    settings = Settings.from_env({"TRIGGER_ENV": "development", **env})
    assert not settings.production
    assert named in (production_reason(settings) or "")
    with pytest.raises(ConfigError) as e:
        check_production(settings)
    text = str(e.value)
    assert text.startswith(named) and "off loopback" in text
    for variable in ("TRIGGER_API_CALLERS_FILE", "TRIGGER_API_ACK_SECRET", "TRIGGER_API_PUBLIC_URL",
                     "TRIGGER_CASSANDRA_REPLICATION_FACTOR", "TRIGGER_SQS_ENDPOINT_URL",
                     "TRIGGER_REDIS_URL", "TRIGGER_SMS_AUTH_TOKEN", "TRIGGER_PUSH_BEARER",
                     "TRIGGER_METRICS_TOKEN"):
        assert variable in text


@pytest.mark.parametrize("env", [
    {}, {"TRIGGER_API_HOST": "127.0.0.1", "TRIGGER_METRICS_HOST": "127.0.0.1"},
    {"TRIGGER_API_HOST": "::1"}, {"TRIGGER_API_HOST": "localhost"},
    {"TRIGGER_API_HOST": "127.0.0.2", "TRIGGER_METRICS_HOST": "localhost"},
])
def test_development_on_loopback_keeps_its_defaults(env: dict[str, str]) -> None:
    settings = Settings.from_env({"TRIGGER_ENV": "development", **env})
    assert production_reason(settings) is None
    check_production(settings)  # the dev callers file, dev secrets, LocalStack: fine here


@pytest.mark.parametrize("trigger_env", [None, "development"])
def test_off_loopback_with_everything_set_starts(tmp_path: Path, trigger_env: str | None) -> None:
    env = prod_env(tmp_path, TRIGGER_API_HOST="0.0.0.0", TRIGGER_METRICS_TOKEN="m" * 32)
    del env["TRIGGER_ENV"]
    if trigger_env is not None:
        env["TRIGGER_ENV"] = trigger_env
    check_production(Settings.from_env(env))
