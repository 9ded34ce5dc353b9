"""triggerctl against the real stack: through typer's CliRunner (in a worker thread: the
API shares this test's event loop) and once as a real subprocess (the installed console
script, ``.venv/bin/triggerctl``)."""

from __future__ import annotations

import asyncio
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.integration.conftest import Stack, api_url
from trigger_client.cli.main import app

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
# The API runs in this process and logs (structlog) to the stdout CliRunner captures: its lines
# are taken out of the command's output.
API_LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \[")


base_url = api_url


async def cli(stack: Stack, *args: str, token: str | None = None) -> tuple[int, str]:
    """Run ``triggerctl --api-url ... --token ... args`` in-process; (exit code, stdout)."""
    argv = ["--api-url", base_url(stack), "--token", token or stack.token, *args]
    result = await asyncio.to_thread(CliRunner().invoke, app, argv)
    lines = result.stdout.splitlines(keepends=True)
    return result.exit_code, "".join(x for x in lines if not API_LOG_LINE.match(x))


async def cli_json(stack: Stack, *args: str) -> Any:
    code, out = await cli(stack, *args, "--output", "json")
    assert code == 0, out
    return json.loads(out)


async def test_create_get_list_snooze_cancel_preview(stack: Stack) -> None:
    url = stack.receiver.base_url + "cb"
    created = await cli_json(stack, "create", "--in", "1h", "--url", url, "--payload",
                             '{"via": "cli"}')
    tid = created["triggerId"]
    assert created["status"] == "PENDING"
    got = await cli_json(stack, "get", tid)
    assert got["payload"] == {"via": "cli"} and got["callbackUrl"] == url
    at = await cli_json(stack, "create", "--at", "2027-03-14 09:00", "--tz", "Europe/Berlin",
                        "--url", url)
    assert at["fireAt"] == "2027-03-14T08:00:00.000Z"
    page = await cli_json(stack, "list", "--status", "PENDING", "--limit", "1")
    assert [t["triggerId"] for t in page["items"]] == [tid] and page["nextCursor"]
    code, table = await cli(stack, "list", "--status", "pending")
    assert code == 0 and tid[:10] in table
    snoozed = await cli_json(stack, "snooze", tid, "--in", "10m")
    assert snoozed["snoozedFrom"] == tid
    assert (await cli_json(stack, "cancel", tid))["status"] == "CANCELLED"
    code, out = await cli(stack, "cancel", "trg_00000000000000000000000000", "-o", "json")
    assert code == 1 and json.loads(out)["error"] == "not_found"
    code, out = await cli(stack, "preview", "--at", "2027-03-13 02:30", "--tz",
                          "America/New_York", "--rrule", "FREQ=DAILY", "--count", "3")
    assert code == 0 and "shifted to 03:30" in out and "2027-03-15T06:30:00Z" in out


async def test_import_is_resumable_and_export_writes_jsonl(stack: Stack,
                                                           tmp_path: Path) -> None:
    rows = tmp_path / "triggers.jsonl"
    url = stack.receiver.base_url + "cb"
    rows.write_text("\n".join(json.dumps(r) for r in [
        {"callbackUrl": url, "delaySeconds": 3600, "payload": {"row": 1}},
        {"callbackUrl": url, "delaySeconds": -5},
        {"callbackUrl": url, "delaySeconds": 7200, "payload": {"row": 3}}]) + "\n")
    code, out = await cli(stack, "import", str(rows), "-o", "json")
    first = [json.loads(line) for line in out.splitlines()]
    assert code == 1 and [r["outcome"] for r in first] == ["created", "rejected", "created"]
    assert first[1]["answer"]["field"] == "delaySeconds"
    code, out = await cli(stack, "import", str(rows))  # again: nothing created twice
    assert code == 1 and "0 created, 2 replayed (created before), 1 rejected" in out
    exported = tmp_path / "out.jsonl"
    assert (await cli(stack, "export", "--file", str(exported)))[0] == 0
    lines = [json.loads(line) for line in exported.read_text().splitlines()]
    assert sorted(t["triggerId"] for t in lines) == sorted(
        r["answer"]["triggerId"] for r in first if r["outcome"] == "created")


async def test_dlq_list_show_and_replay_all(stack: Stack) -> None:
    await stack.start_dispatcher(max_attempts=1)
    url = stack.receiver.base_url + "cb"
    tids = [(await cli_json(stack, "create", "--in", "1s", "--url", url))["triggerId"]
            for _ in range(2)]
    stack.receiver.default_status = 500
    for _ in range(300):
        page = await cli_json(stack, "dlq", "list", "--reason", "max_attempts")
        if len(page["items"]) == 2:
            break
        await asyncio.sleep(0.2)
    assert sorted(i["triggerId"] for i in page["items"]) == sorted(tids)
    shown = await cli_json(stack, "dlq", "show", f"{tids[0]}.1")
    assert shown["attempts"][0]["statusCode"] == 500
    stack.receiver.default_status = 200
    job = await cli_json(stack, "dlq", "replay", "--all", "--reason", "max_attempts",
                         "--poll", "0.1")
    assert (job["status"], job["total"], job["done"], job["failed"]) == ("done", 2, 2, 0)
    for tid in tids:
        assert (await stack.wait_status(tid, "FIRED", 20))["status"] == "FIRED"


async def test_the_installed_console_script_as_a_subprocess(stack: Stack) -> None:
    exe = Path(sys.executable).parent / "triggerctl"
    assert exe.is_file(), "pip install -e ./clients/python (make install) gives triggerctl"

    async def run(*args: str) -> tuple[int, bytes]:
        proc = await asyncio.create_subprocess_exec(
            str(exe), *args, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            env={"TRIGGER_API_URL": base_url(stack), "TRIGGER_TOKEN": stack.token,
                 "PATH": "/usr/bin:/bin", "HOME": str(ROOT / "var")})
        out, _ = await proc.communicate()
        assert proc.returncode is not None
        return proc.returncode, out

    code, out = await run("create", "--in", "2h", "--url", stack.receiver.base_url + "cb",
                          "--payload", '{"p": 1}', "--output", "json")
    assert code == 0, out
    created = json.loads(out)
    code, out = await run("get", created["triggerId"], "--output", "json")
    assert code == 0 and json.loads(out)["payload"] == {"p": 1}
    code, out = await run("get", "trg_00000000000000000000000000", "--output", "json")
    assert code == 1 and json.loads(out)["error"] == "not_found"
