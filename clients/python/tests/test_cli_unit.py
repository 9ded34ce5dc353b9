"""triggerctl on MockTransport: exit codes, --output json anywhere, the ambiguous `when`
choice, a resumable import; and its pure helpers (durations, --at, DST marks, config)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import httpx
import pytest
from typer.testing import CliRunner

from mock_api import CREATED, Script, error
from trigger_client.cli import main as cli_main
from trigger_client.cli.config import resolve
from trigger_client.cli.main import app
from trigger_client.cli.timeparse import dst_marks, parse_at, parse_duration_s

ARGS = ["--api-url", "http://api", "--token", "tok"]
CANDIDATES = ["2026-11-24T08:00:00.000Z", "2026-11-24T20:00:00.000Z"]


def invoke(script: Script, *args: str, input: str | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(app, [*ARGS, *args], obj=script.transport, input=input)
    return result.exit_code, result.stdout


@pytest.mark.parametrize(("text", "seconds"), [
    ("90", 90), ("30s", 30), ("10m", 600), ("2h", 7200), ("1d", 86400), ("1h30m", 5400),
    ("1.5h", 5400)])
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration_s(text) == seconds


@pytest.mark.parametrize("text", ["", "10x", "m10", "10m5"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration_s(text)


def test_at_is_a_wall_time_in_the_zone_or_an_instant() -> None:
    assert parse_at("2027-03-14 09:00", "Europe/Berlin").local_time == datetime(2027, 3, 14, 9)
    assert parse_at("2027-03-14T09:00Z", None).fire_at == datetime(2027, 3, 14, 9, tzinfo=UTC)
    with pytest.raises(ValueError, match="Mars/Base"):
        parse_at("2027-03-14 09:00", "Mars/Base")


def test_dst_marks_name_the_shifted_and_the_dst_occurrences() -> None:
    ny = ZoneInfo("America/New_York")
    utc = [datetime(2027, 3, 13, 7, 30, tzinfo=UTC), datetime(2027, 3, 14, 7, 30, tzinfo=UTC),
           datetime(2027, 3, 15, 6, 30, tzinfo=UTC)]
    assert dst_marks(utc, ny) == ["", "shifted to 03:30, DST (UTC-04:00)", "DST (UTC-04:00)"]


def test_config_flags_then_env_then_profile(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('[default]\napi_url = "http://p"\ntoken = "pt"\n[b]\napi_url = "http://b"\n')
    env = {"TRIGGERCTL_CONFIG": str(cfg)}
    got = resolve(None, None, None, env)
    assert (got.api_url, got.token) == ("http://p", "pt")
    assert resolve(None, None, None, {**env, "TRIGGER_TOKEN": "et"}).token == "et"
    assert resolve("http://f", None, "b", env).api_url == "http://f"
    assert resolve(None, None, "b", env).api_url == "http://b"
    with pytest.raises(ValueError, match=r"\[c\]"):
        resolve(None, None, "c", env)


def test_json_output_after_the_arguments_prints_the_apis_answer(script: Script) -> None:
    script.answers = [httpx.Response(201, json=CREATED)]
    code, out = invoke(script, "create", "--in", "10m", "--url", "http://x/cb",
                       "--payload", '{"a":1}', "--output", "json")
    assert code == 0 and json.loads(out) == CREATED
    assert json.loads(script.requests[0].content) == {
        "callbackUrl": "http://x/cb", "payload": {"a": 1}, "delaySeconds": 600.0}


def test_payload_from_a_file(script: Script, tmp_path: Path) -> None:
    (tmp_path / "p.json").write_text('{"from": "file"}')
    script.answers = [httpx.Response(201, json=CREATED)]
    code, _ = invoke(script, "create", "--in", "1m", "--url", "http://x/cb", "--payload",
                     f"@{tmp_path / 'p.json'}", "-o", "json")
    assert code == 0 and json.loads(script.requests[0].content)["payload"] == {"from": "file"}


def test_exit_codes(script: Script) -> None:
    script.answers = [error(404, "not_found", "no trigger x")]
    code, out = invoke(script, "get", "x", "-o", "json")
    assert code == 1 and json.loads(out) == {"error": "not_found", "message": "no trigger x"}
    assert invoke(script, "create", "--in", "1m", "--at", "2027-01-01 09:00")[0] == 2
    script.answers = [httpx.ConnectError("refused")]
    assert invoke(script, "get", "x")[0] == 3


def ambiguous_then_created(request: httpx.Request) -> httpx.Response:
    if request.url.path.endswith("/preview"):
        return error(400, "invalid_request", "when: ambiguous", field="when",
                     candidates=CANDIDATES)
    return httpx.Response(201, json=CREATED)


def test_an_ambiguous_when_in_json_mode_never_prompts_and_exits_4(script: Script) -> None:
    script.answers = [ambiguous_then_created]
    code, out = invoke(script, "create", "--when", "at 8", "--url", "http://x/cb", "-o",
                       "json")
    assert code == 4 and json.loads(out)["candidates"] == CANDIDATES
    assert [r.url.path for r in script.requests] == ["/v1/triggers/preview"]  # nothing made


def test_an_ambiguous_when_in_a_terminal_asks_which(script: Script,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli_main, "interactive", lambda fmt: True)  # CliRunner has no tty
    script.answers = [ambiguous_then_created]
    code, out = invoke(script, "create", "--when", "at 8", "--tz", "Europe/Berlin", "--url",
                       "http://x/cb", input="2\n")
    assert code == 0 and "2026-11-24 21:00:00 CET" in out
    body = json.loads(script.requests[-1].content)
    assert body["fireAt"] == "2026-11-24T20:00:00+00:00" and "when" not in body


class Api:
    """``POST /v1/triggers/batch`` remembering idempotency keys like the service: a key
    seen before is replayed."""

    def __init__(self) -> None:
        self.keys: set[str] = set()

    def __call__(self, request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/v1/triggers/batch"
        return httpx.Response(200, json={"items": [
            self.item(i, body) for i, body in enumerate(json.loads(request.content)["items"])]})

    def item(self, index: int, body: dict[str, Any]) -> dict[str, Any]:
        if "delaySeconds" not in body:
            return {"index": index, "status": 400, "error": "invalid_request",
                    "message": "delaySeconds: required", "field": "delaySeconds"}
        seen = body["idempotencyKey"] in self.keys
        self.keys.add(body["idempotencyKey"])
        created = {k: v for k, v in CREATED.items() if k != "status"}
        return {"index": index, "status": 200 if seen else 201, **created,
                **({"replayed": True} if seen else {})}


def test_import_is_resumable_and_summarises(script: Script, tmp_path: Path) -> None:
    f = tmp_path / "triggers.csv"
    f.write_text('callbackUrl,payload,delaySeconds\nhttp://x/cb,"{""n"": 1}",60\n'
                 "http://x/cb,plain,120\nhttp://x/cb,,\n")
    script.answers = [Api()]
    code, out = invoke(script, "import", str(f))
    assert code == 1 and "2 created, 0 replayed (created before), 1 rejected" in out
    assert "row 3: invalid_request" in out
    code, out = invoke(script, "import", str(f), "-o", "json")
    lines = [json.loads(line) for line in out.splitlines()]
    assert [x["outcome"] for x in lines] == ["replayed", "replayed", "rejected"]
    assert len(script.requests) == 2  # one batch per run
    bodies = json.loads(script.requests[0].content)["items"]
    assert bodies[0]["payload"] == {"n": 1} and bodies[1]["payload"] == "plain"


def test_snooze_when_and_create_and_preview_with_jitter() -> None:
    script = Script(answers=[httpx.Response(201, json=CREATED)])
    code, _ = invoke(script, "snooze", "trg_1", "--when", "tomorrow 9am", "-o", "json")
    assert code == 0 and script.bodies() == [{"when": "tomorrow 9am"}]
    script = Script(answers=[httpx.Response(201, json=CREATED)])
    code, _ = invoke(script, "create", "--in", "1h", "--url", "http://x/cb", "--jitter", "10m",
                     "-o", "json")
    assert code == 0 and script.bodies()[0]["jitterSeconds"] == 600
    window = {"scheduledAt": "2026-11-24T08:00:00.000Z", "fireAt": None,
              "latestAt": "2026-11-24T08:05:00.000Z"}
    script = Script(answers=[httpx.Response(200, json={
        "occurrences": ["2026-11-24T08:00:00.000Z"], "jittered": [window]})])
    code, out = invoke(script, "preview", "--when", "every hour", "--jitter", "5m",
                       "--tz", "UTC")
    assert code == 0 and script.bodies()[0]["jitterSeconds"] == 300
    assert "fires by" in out and "08:05:00Z" in out


def test_create_with_an_expiry_and_a_lateness() -> None:
    script = Script(answers=[httpx.Response(201, json=CREATED)])
    code, _ = invoke(script, "create", "--in", "1h", "--url", "http://x/cb", "--max-lateness",
                     "2m", "--expires-at", "2027-03-14 09:00", "--tz", "Europe/Berlin",
                     "-o", "json")
    assert code == 0
    body = script.bodies()[0]
    assert body["maxLatenessSeconds"] == 120
    assert body["expiresAt"] == "2027-03-14T09:00:00+01:00"
    script = Script(answers=[httpx.Response(201, json=CREATED)])
    code, _ = invoke(script, "create", "--in", "1h", "--url", "http://x/cb", "--expires-at",
                     "2027-03-14T09:00:00Z", "-o", "json")
    assert code == 0 and script.bodies()[0]["expiresAt"] == "2027-03-14T09:00:00+00:00"


def test_create_with_flow_control() -> None:
    script = Script(answers=[httpx.Response(201, json=CREATED)])
    code, _ = invoke(script, "create", "--in", "1h", "--url", "http://x/cb", "--flow-key",
                     "partner-a", "--flow-rate", "0.5", "--flow-parallelism", "3", "-o", "json")
    assert code == 0
    assert script.bodies()[0]["flowControl"] == {"key": "partner-a", "ratePerSecond": 0.5,
                                                 "parallelism": 3}
    script = Script(answers=[httpx.Response(201, json=CREATED)])
    code, _ = invoke(script, "create", "--in", "1h", "--url", "http://x/cb",
                     "--flow-rate", "5")
    assert code == 2 and script.requests == []  # a usage error: nothing sent
