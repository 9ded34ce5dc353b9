from __future__ import annotations

import pytest

from trigger_service.config.settings import VARIABLES, Settings
from trigger_service.core.errors import ConfigError


def test_provider_defaults_are_the_development_ones() -> None:
    s = Settings.from_env({})
    assert (s.smtp.host, s.smtp.port, s.smtp.user, s.smtp.starttls) == ("127.0.0.1", 1025, "",
                                                                        False)
    assert s.sms.base_url == "https://api.twilio.com" and s.sms.account_sid == "AC" + "0" * 32
    assert s.push.base_url == "https://fcm.googleapis.com" and s.push.bearer


def test_provider_variables_are_read() -> None:
    s = Settings.from_env({
        "TRIGGER_SMTP_HOST": "smtp.example.com", "TRIGGER_SMTP_PORT": "587",
        "TRIGGER_SMTP_USER": "u", "TRIGGER_SMTP_PASSWORD": "p", "TRIGGER_SMTP_STARTTLS": "true",
        "TRIGGER_SMTP_FROM_ADDRESS": "Reminders <r@example.com>",
        "TRIGGER_SMS_BASE_URL": "http://127.0.0.1:9101/", "TRIGGER_SMS_AUTH_TOKEN": "tok",
        "TRIGGER_PUSH_PROJECT": "p1", "TRIGGER_PUSH_BEARER": "ya29.x"})
    assert s.smtp.port == 587 and s.smtp.starttls and s.smtp.from_address.endswith(">")
    assert s.sms.base_url == "http://127.0.0.1:9101" and s.sms.auth_token == "tok"
    assert s.push.project == "p1" and s.push.bearer == "ya29.x"


def test_secrets_never_appear_in_the_settings_repr() -> None:
    s = Settings.from_env({"TRIGGER_SMTP_PASSWORD": "pw-123", "TRIGGER_SMS_AUTH_TOKEN": "tk-456",
                           "TRIGGER_PUSH_BEARER": "br-789"})
    shown = repr(s)
    assert "smtp" in shown and not any(x in shown for x in ("pw-123", "tk-456", "br-789"))


@pytest.mark.parametrize("name, value", [
    ("TRIGGER_SMTP_PORT", "70000"), ("TRIGGER_SMTP_STARTTLS", "maybe"),
    ("TRIGGER_SMTP_FROM_ADDRESS", "nobody"), ("TRIGGER_SMS_BASE_URL", "api.twilio.com"),
    ("TRIGGER_PUSH_TIMEOUT_S", "0"), ("TRIGGER_SMTP_MAX_CONNECTIONS", "0"),
    ("TRIGGER_PUSH_CREDENTIALS_FILE", "/etc/sa.json"),
])
def test_bad_provider_values_fail_naming_the_variable(name: str, value: str) -> None:
    with pytest.raises(ConfigError) as e:
        Settings.from_env({name: value})
    assert name in str(e.value)


def test_provider_defaults_written_out_parse_back_to_themselves() -> None:
    env = {v.name: v.default for v in VARIABLES}
    s = Settings.from_env(env)
    assert (s.smtp, s.sms, s.push) == (Settings().smtp, Settings().sms, Settings().push)
