"""A production configuration that passes every check, for the production tests to break
one variable at a time."""

from __future__ import annotations

from pathlib import Path

from trigger_service.config.callers import hash_token

STRONG = "k" * 43


def callers_file(tmp_path: Path, token: str = STRONG, ops_token: str = STRONG + "o",
                 name: str = "callers.toml") -> Path:
    path = tmp_path / name
    path.write_text(f"""
[callers.orders]
token_sha256 = "{hash_token(token)}"
callback_prefixes = ["https://orders.internal/"]

[ops.alice]
token_sha256 = "{hash_token(ops_token)}"
role = "operator"
""")
    return path


def prod_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """``TRIGGER_ENV=production`` with every production need met, and ``extra`` on top."""
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")  # only its existence is checked
    return {
        "TRIGGER_ENV": "production", "TRIGGER_API_CALLERS_FILE": str(callers_file(tmp_path)),
        "TRIGGER_API_ACK_SECRET": "s" * 40, "TRIGGER_API_PUBLIC_URL": "https://reminders.example.com",
        "TRIGGER_CASSANDRA_REPLICATION_FACTOR": "3", "TRIGGER_CASSANDRA_USERNAME": "trigger",
        "TRIGGER_CASSANDRA_PASSWORD": "p" * 24, "TRIGGER_CASSANDRA_TLS_CA_FILE": str(ca),
        "TRIGGER_SQS_ENDPOINT_URL": "https://sqs.eu-west-1.amazonaws.com",
        "TRIGGER_SQS_ACCESS_KEY_ID": "AKIAEXAMPLEEXAMPLE",
        "TRIGGER_SQS_SECRET_ACCESS_KEY": "x" * 40,
        "TRIGGER_REDIS_URL": "rediss://trigger:redispass@redis.internal:6380/0",
        "TRIGGER_SMS_ACCOUNT_SID": "AC" + "1" * 32, "TRIGGER_SMS_AUTH_TOKEN": "t" * 32,
        "TRIGGER_SMS_FROM_NUMBER": "+447700900123", "TRIGGER_PUSH_PROJECT": "reminders-prod",
        "TRIGGER_PUSH_BEARER": "ya29." + "b" * 40,
        "TRIGGER_ENCRYPTION_KMS_KEY_ID": "alias/reminders", "TRIGGER_METRICS_TOKEN": "m" * 32,
        **extra,
    }
