"""Settings of the notification providers: SMTP or Amazon SES for email,
Twilio's REST API for SMS, FCM HTTP v1 for push, the Telegram Bot API. Part of
``settings.Settings`` (sections ``smtp``, ``email``, ``sms``, ``push``, ``telegram``);
``PROVIDER_VARIABLES`` are their rows of ``settings.VARIABLES``.

Every setting has a development default, so pointing ``TRIGGER_SMTP_HOST``/``_PORT``,
``TRIGGER_SMS_BASE_URL``, ``TRIGGER_PUSH_BASE_URL`` and ``TRIGGER_TELEGRAM_BASE_URL`` at local
simulators (or ``TRIGGER_EMAIL_SES_ENDPOINT_URL`` at LocalStack, the default) is enough to deliver.
Secrets (SMTP password, SES secret key, Twilio auth token, FCM bearer, the bot token) are left
out of ``repr`` so a logged ``Settings`` never shows them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from email.utils import parseaddr
from pathlib import Path
from typing import Any

from trigger_service.config.parsers import at_least_one, flag
from trigger_service.core.errors import ConfigError

# Twilio's documented test values: an account SID of the right shape and the magic sender
# number its test credentials accept.
DEV_SMS_ACCOUNT_SID = "AC" + "0" * 32
DEV_SMS_FROM = "+15005550006"
# A bot token of the Bot API's shape (<bot id>:<secret>): the one the simulator of
# tests/providers.py accepts (the make-up sandbox sets it).
DEV_TELEGRAM_TOKEN = "123456789:dev-telegram-token"
EMAIL_TRANSPORTS = ("smtp", "ses")


@dataclass(frozen=True)
class SmtpSettings:
    host: str = "127.0.0.1"
    port: int = 1025
    user: str = ""  # empty: no AUTH
    password: str = field(default="", repr=False)
    starttls: bool = False
    from_address: str = "reminders@localhost"  # may carry a display name: "Name <a@b>"
    timeout_s: float = 10.0
    # Connections open at once: mail servers limit concurrent sessions per client.
    max_connections: int = 10


@dataclass(frozen=True)
class EmailSettings:
    """Which transport sends email channels, and Amazon SES's connection (the From address
    is ``TRIGGER_SMTP_FROM_ADDRESS`` for both transports). SES defaults to LocalStack like SQS."""

    transport: str = "smtp"  # one of EMAIL_TRANSPORTS
    ses_endpoint_url: str = "http://127.0.0.1:4566"  # "": the region's AWS endpoint
    ses_region: str = "us-east-1"
    ses_access_key_id: str = "test"
    ses_secret_access_key: str = field(default="test", repr=False)
    ses_configuration_set: str = ""  # "": none (event publishing off)
    ses_timeout_s: float = 10.0
    ses_max_connections: int = 10


@dataclass(frozen=True)
class TelegramSettings:
    base_url: str = "https://api.telegram.org"
    # One bot for the deployment: its token is part of every request's URL. Empty: Telegram
    # is not configured (a telegram channel fails for good, "telegram not configured").
    bot_token: str = field(default="", repr=False)
    timeout_s: float = 10.0


@dataclass(frozen=True)
class SmsSettings:
    base_url: str = "https://api.twilio.com"
    account_sid: str = DEV_SMS_ACCOUNT_SID
    auth_token: str = field(default="dev-sms-token", repr=False)
    from_number: str = DEV_SMS_FROM
    timeout_s: float = 10.0


@dataclass(frozen=True)
class PushSettings:
    base_url: str = "https://fcm.googleapis.com"
    project: str = "trigger-dev"
    bearer: str = field(default="dev-push-token", repr=False)
    credentials_file: str = ""
    timeout_s: float = 10.0

    def validate(self) -> None:
        """The service-account file, when set, must exist (it is read when the dispatcher
        starts; a typo should stop every process at once, not the first push)."""
        if self.credentials_file and not Path(self.credentials_file).is_file():
            raise ConfigError(f"TRIGGER_PUSH_CREDENTIALS_FILE={self.credentials_file}: "
                              "no such file")


def _port(raw: str) -> int:
    value = int(raw)
    if not 0 < value < 65536:
        raise ValueError("a port in 1..65535")
    return value


def _seconds(raw: str) -> float:
    value = float(raw)
    if value <= 0:
        raise ValueError("must be > 0")
    return value


def _address(raw: str) -> str:
    if "@" not in parseaddr(raw)[1]:
        raise ValueError("an address such as reminders@example.com or 'Name <a@b.example>'")
    return raw


def _base_url(raw: str) -> str:
    if not raw.startswith(("http://", "https://")):
        raise ValueError("an http:// or https:// URL")
    return raw.rstrip("/")


def _transport(raw: str) -> str:
    if raw not in EMAIL_TRANSPORTS:
        raise ValueError("one of " + ", ".join(EMAIL_TRANSPORTS))
    return raw


def _endpoint(raw: str) -> str:
    return raw if not raw else _base_url(raw)


Row = tuple[str, tuple[str, str], Callable[[str], Any], str]

PROVIDER_VARIABLES: tuple[Row, ...] = (
    ("TRIGGER_SMTP_HOST", ("smtp", "host"), str, "SMTP server for email channels"),
    ("TRIGGER_SMTP_PORT", ("smtp", "port"), _port, "SMTP port (587 for submission)"),
    ("TRIGGER_SMTP_USER", ("smtp", "user"), str, "SMTP AUTH user; empty: no AUTH"),
    ("TRIGGER_SMTP_PASSWORD", ("smtp", "password"), str, "SMTP AUTH password (never logged)"),
    ("TRIGGER_SMTP_STARTTLS", ("smtp", "starttls"), flag,
     "true: STARTTLS is required before AUTH (the server must offer it); false: used "
     "whenever the server offers it"),
    ("TRIGGER_SMTP_FROM_ADDRESS", ("smtp", "from_address"), _address,
     "From of every email; its domain ends each Message-ID"),
    ("TRIGGER_SMTP_TIMEOUT_S", ("smtp", "timeout_s"), _seconds,
     "per SMTP command (connect, each reply)"),
    ("TRIGGER_SMTP_MAX_CONNECTIONS", ("smtp", "max_connections"), at_least_one,
     "SMTP sessions open at once per dispatcher"),
    ("TRIGGER_SMS_BASE_URL", ("sms", "base_url"), _base_url,
     "Twilio-format REST API for SMS channels"),
    ("TRIGGER_SMS_ACCOUNT_SID", ("sms", "account_sid"), str,
     "Twilio account SID (the URL's account and the basic-auth user)"),
    ("TRIGGER_SMS_AUTH_TOKEN", ("sms", "auth_token"), str,
     "Twilio auth token (basic-auth password; never logged)"),
    ("TRIGGER_SMS_FROM_NUMBER", ("sms", "from_number"), str,
     "sender: an E.164 number of the account"),
    ("TRIGGER_SMS_TIMEOUT_S", ("sms", "timeout_s"), _seconds, "per SMS request"),
    ("TRIGGER_PUSH_BASE_URL", ("push", "base_url"), _base_url,
     "FCM HTTP v1 API for push channels"),
    ("TRIGGER_PUSH_PROJECT", ("push", "project"), str, "Firebase project id"),
    ("TRIGGER_PUSH_BEARER", ("push", "bearer"), str,
     "OAuth2 access token sent as the bearer (never logged)"),
    ("TRIGGER_PUSH_CREDENTIALS_FILE", ("push", "credentials_file"), str,
     "a Google service-account JSON file: when set, its OAuth2 access tokens (refreshed "
     "before they expire) are the bearer instead of TRIGGER_PUSH_BEARER"),
    ("TRIGGER_PUSH_TIMEOUT_S", ("push", "timeout_s"), _seconds, "per push request"),
    ("TRIGGER_EMAIL_TRANSPORT", ("email", "transport"), _transport,
     "how email channels are sent: smtp (TRIGGER_SMTP_*) or ses (Amazon SES, TRIGGER_EMAIL_SES_*)"),
    ("TRIGGER_EMAIL_SES_ENDPOINT_URL", ("email", "ses_endpoint_url"), _endpoint,
     "SES endpoint (LocalStack locally); empty: the region's AWS endpoint"),
    ("TRIGGER_EMAIL_SES_REGION", ("email", "ses_region"), str, "SES region"),
    ("TRIGGER_EMAIL_SES_ACCESS_KEY_ID", ("email", "ses_access_key_id"), str, "SES key id"),
    ("TRIGGER_EMAIL_SES_SECRET_ACCESS_KEY", ("email", "ses_secret_access_key"), str,
     "SES secret (never logged)"),
    ("TRIGGER_EMAIL_SES_CONFIGURATION_SET", ("email", "ses_configuration_set"), str,
     "SES configuration set of every email; empty: none"),
    ("TRIGGER_EMAIL_SES_TIMEOUT_S", ("email", "ses_timeout_s"), _seconds, "per SES request"),
    ("TRIGGER_EMAIL_SES_MAX_CONNECTIONS", ("email", "ses_max_connections"), at_least_one,
     "SES requests in flight at once per dispatcher"),
    ("TRIGGER_TELEGRAM_BASE_URL", ("telegram", "base_url"), _base_url,
     "Telegram Bot API for telegram channels"),
    ("TRIGGER_TELEGRAM_BOT_TOKEN", ("telegram", "bot_token"), str,
     "the bot's token from @BotFather (part of each request's URL; never logged); empty: "
     "telegram channels fail (not configured)"),
    ("TRIGGER_TELEGRAM_TIMEOUT_S", ("telegram", "timeout_s"), _seconds,
     "per Telegram request"),
)
