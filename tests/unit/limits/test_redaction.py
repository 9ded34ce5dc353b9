"""Tokens and secrets never reach the log: the ``redact`` processor on real log output."""

from __future__ import annotations

import io
import json
import logging
import sys
from collections.abc import Iterator

import pytest
import structlog

from trigger_service.platform.logs import REDACTED, configure_logging, redact


@pytest.fixture
def json_logs(monkeypatch: pytest.MonkeyPatch) -> Iterator[io.StringIO]:
    out = io.StringIO()
    monkeypatch.setattr(sys, "stderr", out)
    configure_logging("INFO", "json")
    yield out
    structlog.reset_defaults()
    root = logging.getLogger()
    for handler in [h for h in root.handlers if getattr(h, "stream", None) is out]:
        root.removeHandler(handler)


def test_secret_keys_are_redacted_at_any_depth(json_logs: io.StringIO) -> None:
    structlog.get_logger("t").info(
        "event", token="tok-123", ack_secret="s3cret", smtp_password="pw",
        headers={"Authorization": "Bearer abc.def", "Accept": "json"},
        items=[{"api_key": "k1"}], caller="orders")
    line = json.loads(json_logs.getvalue().strip().splitlines()[-1])
    assert line["token"] == line["ack_secret"] == line["smtp_password"] == REDACTED
    assert line["headers"] == {"Authorization": REDACTED, "Accept": "json"}
    assert line["items"] == [{"api_key": REDACTED}]
    assert line["caller"] == "orders"
    text = json.dumps(line)
    for secret in ("tok-123", "s3cret", "abc.def", "k1"):
        assert secret not in text


def test_bearer_credentials_inside_text_are_redacted() -> None:
    event = redact(None, "info", {"event": "x",
                                  "error": "401 for 'Authorization: Bearer eyJhbGci.x-y_z'",
                                  "other": "basic dXNlcjpwYXNz then"})
    assert event["error"] == f"401 for 'Authorization: Bearer {REDACTED}'"
    assert event["other"] == f"basic {REDACTED} then"


def test_exceptions_are_redacted_after_formatting(
        json_logs: io.StringIO) -> None:
    try:
        raise RuntimeError("upstream said: bearer tok-999")
    except RuntimeError:
        structlog.get_logger("t").exception("failed")
    out = json_logs.getvalue()
    assert "tok-999" not in out and REDACTED in out
