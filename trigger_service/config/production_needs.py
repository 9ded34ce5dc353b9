"""What a production deployment must set: every variable the production check
(``config.production``, ``config.production_deps``) reads, with what it needs there. The
docs/operations/production.md's table is generated from this list (``production_table()``), and unit
tests keep that page, this list, ``settings.VARIABLES`` and the check's messages in step.
"""

from __future__ import annotations

from trigger_service.config.settings import VARIABLES

PRODUCTION_NEEDS: tuple[tuple[str, str], ...] = (
    ("TRIGGER_API_CALLERS_FILE", "your callers file, not the development one; no development "
                                 "token (`dev-token`, `ops-token`, `viewer-token`) in it"),
    ("TRIGGER_API_ACK_SECRET", "a secret of at least 32 characters"),
    ("TRIGGER_METRICS_TOKEN", "set: the API's `/metrics` is as reachable as its routes (a "
                              "reverse proxy's upstream on loopback included)"),
    ("TRIGGER_API_PUBLIC_URL", "an `https://` address people reach, not loopback"),
    ("TRIGGER_CASSANDRA_REPLICATION_FACTOR", "at least 3"),
    ("TRIGGER_CASSANDRA_USERNAME", "a PasswordAuthenticator user"),
    ("TRIGGER_CASSANDRA_PASSWORD", "its password"),
    ("TRIGGER_CASSANDRA_TLS_CA_FILE", "an existing CA file: TLS to every node"),
    ("TRIGGER_SQS_ENDPOINT_URL", "the region's `https://` SQS endpoint, not LocalStack's "
                                 "(loopback or port 4566)"),
    ("TRIGGER_SQS_ACCESS_KEY_ID", "a real key id, not `test`"),
    ("TRIGGER_SQS_SECRET_ACCESS_KEY", "a real secret, not `test`"),
    ("TRIGGER_REDIS_URL", "`rediss://user:password@host:port/db`: a password and TLS"),
    ("TRIGGER_REDIS_TLS_CA_FILE", "when set, an existing file"),
    ("TRIGGER_SMTP_STARTTLS", "`true` whenever `TRIGGER_SMTP_USER` is set"),
    ("TRIGGER_SMS_ACCOUNT_SID", "your account, not Twilio's test one"),
    ("TRIGGER_SMS_AUTH_TOKEN", "your token, not the development one"),
    ("TRIGGER_SMS_FROM_NUMBER", "your number, not Twilio's test one"),
    ("TRIGGER_SMS_BASE_URL", "`https://`"),
    ("TRIGGER_PUSH_PROJECT", "your Firebase project, not the development one"),
    ("TRIGGER_PUSH_BEARER", "your access token, not the development one"),
    ("TRIGGER_PUSH_BASE_URL", "`https://`"),
    ("TRIGGER_EMAIL_SES_ENDPOINT_URL", "with `TRIGGER_EMAIL_TRANSPORT=ses`: empty (the region's) "
                                       "or `https://`, not LocalStack's"),
    ("TRIGGER_EMAIL_SES_ACCESS_KEY_ID", "with `TRIGGER_EMAIL_TRANSPORT=ses`: a real key id, not "
                                        "`test`"),
    ("TRIGGER_EMAIL_SES_SECRET_ACCESS_KEY", "with `TRIGGER_EMAIL_TRANSPORT=ses`: a real secret, "
                                            "not `test`"),
    ("TRIGGER_TELEGRAM_BASE_URL", "`https://` when a bot token is set"),
    ("TRIGGER_TELEGRAM_BOT_TOKEN", "empty (no Telegram) or your bot's, not the development "
                                   "one"),
    ("TRIGGER_ENCRYPTION_KEY_FILE", "a key file of your own (not the one `make up` makes "
                                    "under `var/`), unless `TRIGGER_ENCRYPTION_KMS_KEY_ID` is set"),
    ("TRIGGER_ENCRYPTION_KMS_ENDPOINT_URL", "with `TRIGGER_ENCRYPTION_KMS_KEY_ID`: empty (SQS's "
                                            "endpoint) or `https://`, not LocalStack's"),
)


def production_table() -> str:
    """The table of ``docs/operations/production.md`` (``infra/dev/settings_table.py``
    writes it there), in ``settings.VARIABLES`` order."""
    needs = dict(PRODUCTION_NEEDS)
    rows = ["| variable | default | production needs |", "|---|---|---|"]
    rows += [f"| `{v.name}` | {v.default_cell} | {needs[v.name]} |"
             for v in VARIABLES if v.name in needs]
    return "\n".join(rows)
