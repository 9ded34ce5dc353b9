"""The production check's half about what the service connects to (``production`` runs it):
development defaults that work on a laptop and are wrong, or unsafe, anywhere else.

- Cassandra: a replication factor under 3 (one node lost is data lost, and LOCAL_QUORUM
  needs 2 of 3), no PasswordAuthenticator user or password, no TLS (``_TLS_CA_FILE``);
- SQS: LocalStack's endpoint (loopback, or port 4566) or a plaintext one, its ``test``
  credentials;
- Redis: a URL without a password, or ``redis://`` (plaintext; ``rediss://`` is TLS);
- SMTP AUTH without required STARTTLS: opportunistic TLS (what the email channel uses then)
  sends the password in clear to a server, or a man in the middle, that does not offer it;
- the SMS and push providers' development tokens, Twilio's test account and number, the
  development Firebase project, and ``http://`` provider URLs; Telegram's development bot
  token and an ``http://`` Bot API when a token is set;
- SES (``TRIGGER_EMAIL_TRANSPORT=ses``): LocalStack's endpoint or a plaintext one, its
  ``test`` credentials;
- encryption at rest under the development key file (``var/encryption.keys``, which ``make
  up`` makes in the checkout) or a key file that does not exist, when no KMS key is set; with a
  KMS key, LocalStack's KMS endpoint or a plaintext one (data keys cross it).

A CA file that is set must exist (a typo would otherwise surface at the first connection).
No message ever shows a secret: a URL that may hold a password is named, not printed.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from urllib.parse import urlsplit

from trigger_service.config.encryption import EncryptionSettings
from trigger_service.config.providers import (
    DEV_SMS_ACCOUNT_SID,
    DEV_SMS_FROM,
    DEV_TELEGRAM_TOKEN,
    PushSettings,
    SmsSettings,
)
from trigger_service.config.settings import Settings
from trigger_service.config.stores import CassandraSettings, RedisSettings

MIN_REPLICATION_FACTOR = 3
LOCALSTACK_PORT = 4566
LOCALSTACK_CREDENTIAL = "test"


def is_loopback(host: str) -> bool:
    """Is ``host`` reachable from this machine only? A name other than ``localhost``, and a
    wildcard (``""``, ``0.0.0.0``, ``::``), may be reachable from outside: not loopback."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _ca_file(var: str, path: str) -> list[str]:
    if not path:
        return [f"{var} is empty (connections are plaintext): set the CA file that signed "
                "the server's certificate"]
    if not Path(path).is_file():
        return [f"{var}={path}: no such file"]
    return []


def _cassandra(c: CassandraSettings) -> list[str]:
    problems: list[str] = []
    if c.replication_factor < MIN_REPLICATION_FACTOR:
        problems.append(f"TRIGGER_CASSANDRA_REPLICATION_FACTOR={c.replication_factor}: at "
                        f"least {MIN_REPLICATION_FACTOR} (a quorum that survives a node)")
    if not c.username:
        problems.append("TRIGGER_CASSANDRA_USERNAME is empty: connect with "
                        "PasswordAuthenticator credentials")
    elif not c.password:
        problems.append("TRIGGER_CASSANDRA_PASSWORD is empty")
    problems += _ca_file("TRIGGER_CASSANDRA_TLS_CA_FILE", c.tls_ca_file)
    return problems


def _aws_endpoint(var: str, endpoint_url: str, fix: str, empty_ok: bool = True) -> list[str]:
    """LocalStack's endpoint (loopback, or its port) or a plaintext one. Empty, where
    ``empty_ok``: the region's https:// endpoint (SES) or another checked one (KMS: SQS's)."""
    if not endpoint_url and empty_ok:
        return []
    url = urlsplit(endpoint_url)
    try:
        port = url.port
    except ValueError:
        port = None  # a bad port fails at connect; here only LocalStack's matters
    if is_loopback(url.hostname or "") or port == LOCALSTACK_PORT:
        return [f"{var}={endpoint_url} is LocalStack's: {fix}"]
    if url.scheme != "https":
        return [f"{var}={endpoint_url} must be https://"]
    return []


def _sqs(settings: Settings) -> list[str]:
    s = settings.sqs
    problems = _aws_endpoint("TRIGGER_SQS_ENDPOINT_URL", s.endpoint_url,
                             "set the region's SQS endpoint (https://sqs.<region>.amazonaws.com)",
                             empty_ok=False)
    if s.access_key_id == LOCALSTACK_CREDENTIAL:
        problems.append("TRIGGER_SQS_ACCESS_KEY_ID is LocalStack's 'test'")
    if s.secret_access_key == LOCALSTACK_CREDENTIAL:
        problems.append("TRIGGER_SQS_SECRET_ACCESS_KEY is LocalStack's 'test'")
    return problems


def _ses(settings: Settings) -> list[str]:
    e = settings.email
    if e.transport != "ses":
        return []
    problems = _aws_endpoint("TRIGGER_EMAIL_SES_ENDPOINT_URL", e.ses_endpoint_url,
                             "set it empty (the region's SES endpoint) or to an https:// one")
    if e.ses_access_key_id == LOCALSTACK_CREDENTIAL:
        problems.append("TRIGGER_EMAIL_SES_ACCESS_KEY_ID is LocalStack's 'test'")
    if e.ses_secret_access_key == LOCALSTACK_CREDENTIAL:
        problems.append("TRIGGER_EMAIL_SES_SECRET_ACCESS_KEY is LocalStack's 'test'")
    return problems


def _redis(r: RedisSettings) -> list[str]:
    url = urlsplit(r.url)  # never printed: it may hold the password
    problems: list[str] = []
    if not url.password:
        problems.append("TRIGGER_REDIS_URL has no password "
                        "(redis[s]://user:password@host:port/db)")
    if url.scheme == "redis":
        problems.append("TRIGGER_REDIS_URL is redis:// (plaintext): use rediss:// (TLS)")
    if url.scheme == "rediss" and r.tls_ca_file:
        problems += _ca_file("TRIGGER_REDIS_TLS_CA_FILE", r.tls_ca_file)
    return problems


def _providers(settings: Settings) -> list[str]:
    sms, push = settings.sms, settings.push
    dev = [
        ("TRIGGER_SMS_AUTH_TOKEN", sms.auth_token == SmsSettings.auth_token,
         "the development token"),
        ("TRIGGER_SMS_ACCOUNT_SID", sms.account_sid == DEV_SMS_ACCOUNT_SID,
         "Twilio's test account"),
        ("TRIGGER_SMS_FROM_NUMBER", sms.from_number == DEV_SMS_FROM, "Twilio's test number"),
        # A service-account file replaces the bearer: the bearer is then unused.
        ("TRIGGER_PUSH_BEARER", push.bearer == PushSettings.bearer and not push.credentials_file,
         "the development token"),
        ("TRIGGER_PUSH_PROJECT", push.project == PushSettings.project,
         "the development project"),
    ]
    problems = [f"{var} is {what}" for var, bad, what in dev if bad]
    for var, url in (("TRIGGER_SMS_BASE_URL", sms.base_url),
                     ("TRIGGER_PUSH_BASE_URL", push.base_url)):
        if not url.startswith("https://"):
            problems.append(f"{var}={url} must be https:// (it carries the credentials)")
    telegram = settings.telegram
    if telegram.bot_token == DEV_TELEGRAM_TOKEN:
        problems.append("TRIGGER_TELEGRAM_BOT_TOKEN is the development token")
    if telegram.bot_token and not telegram.base_url.startswith("https://"):
        problems.append(f"TRIGGER_TELEGRAM_BASE_URL={telegram.base_url} must be https:// (it "
                        "carries the bot token)")
    smtp = settings.smtp
    if smtp.user and not smtp.starttls:
        problems.append("TRIGGER_SMTP_USER is set without TRIGGER_SMTP_STARTTLS=true: the "
                        "AUTH password would cross the network in clear")
    return problems


def _encryption(e: EncryptionSettings) -> list[str]:
    if e.kms_key_id:
        # Empty: SQS's endpoint, checked with SQS. Over http:// the data keys would cross
        # the network in clear.
        return _aws_endpoint("TRIGGER_ENCRYPTION_KMS_ENDPOINT_URL", e.kms_endpoint_url,
                             "set it empty (SQS's endpoint) or to the region's KMS endpoint "
                             "(https://kms.<region>.amazonaws.com)")
    if e.key_file.resolve() == EncryptionSettings.key_file.resolve():
        return [f"TRIGGER_ENCRYPTION_KEY_FILE={e.key_file} is the development key file (made "
                "by make up, beside the code): set TRIGGER_ENCRYPTION_KMS_KEY_ID, or a key file "
                "of your own (python -m trigger_service.platform.keys add)"]
    if not e.key_file.is_file():
        return [f"TRIGGER_ENCRYPTION_KEY_FILE={e.key_file}: no such file (and no "
                "TRIGGER_ENCRYPTION_KMS_KEY_ID)"]
    return []


def dependency_problems(settings: Settings) -> list[str]:
    """What makes the connections of ``settings`` unfit for production (empty: fit)."""
    return [*_cassandra(settings.cassandra), *_sqs(settings), *_redis(settings.redis),
            *_providers(settings), *_ses(settings), *_encryption(settings.encryption)]
