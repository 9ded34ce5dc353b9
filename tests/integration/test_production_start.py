"""Fail closed, on real processes: a service without ``TRIGGER_ENV`` (production is the
default), or bound off loopback, with the development defaults exits at start-up naming
every problem, and a running API reloads its callers file on SIGHUP
(a revoked token gets 401; a bad file is logged and the old callers kept)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
import pytest

from tests.integration.conftest import Stack
from tests.integration.helpers import free_port, wait_ready
from trigger_service.config.callers import hash_token
from trigger_service.config.settings import REPO_ROOT

pytestmark = pytest.mark.integration

EVERY_PROBLEM = ("TRIGGER_API_CALLERS_FILE is the development file", "development token hash",
                 "TRIGGER_API_ACK_SECRET", "TRIGGER_METRICS_TOKEN", "TRIGGER_API_PUBLIC_URL",
                 "TRIGGER_CASSANDRA_REPLICATION_FACTOR", "TRIGGER_CASSANDRA_USERNAME",
                 "TRIGGER_CASSANDRA_TLS_CA_FILE", "TRIGGER_SQS_ENDPOINT_URL",
                 "TRIGGER_SQS_ACCESS_KEY_ID", "TRIGGER_SQS_SECRET_ACCESS_KEY",
                 "TRIGGER_REDIS_URL", "TRIGGER_SMS_ACCOUNT_SID", "TRIGGER_SMS_AUTH_TOKEN",
                 "TRIGGER_SMS_FROM_NUMBER", "TRIGGER_PUSH_PROJECT", "TRIGGER_PUSH_BEARER",
                 "TRIGGER_ENCRYPTION_KEY_FILE")


async def refused_start(module: str, env: dict[str, str]) -> tuple[str, str]:
    """Start ``python -m module`` with ``env`` on top of the environment without its TRIGGER_*
    variables (only the development defaults, the dev callers file among them); assert it
    exits 2. Its stdout and stderr."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRIGGER_")} | env
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", module, env=env, cwd=REPO_ROOT,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 2, err.decode()
    return out.decode(), err.decode()


@pytest.mark.parametrize(("module", "listener"), [
    ("trigger_service", "TRIGGER_API_HOST"), ("dispatcher", "TRIGGER_METRICS_HOST")])
async def test_a_process_off_loopback_with_the_development_defaults_refuses_to_start(
        module: str, listener: str) -> None:
    # One listener off loopback: development asked for does not matter then.
    # One name of the previous release, TRIGGER_DISPATCHERS: still read, with one warning.
    out, text = await refused_start(module, {
        "TRIGGER_ENV": "development", listener: "0.0.0.0", "TRIGGER_API_PORT": str(free_port()),
        "TRIGGER_DISPATCHERS": "2"})
    warnings = [json.loads(line) for line in (out + text).splitlines()
                if "setting_deprecated" in line]
    assert [(w["level"], "TRIGGER_DISPATCH_PROCESSES" in w["detail"]) for w in warnings] == [
        ("warning", True)]
    assert f"{listener}=0.0.0.0 off loopback" in text
    missing = [p for p in EVERY_PROBLEM if p not in text]
    assert not missing, text


async def test_without_trigger_env_an_api_on_loopback_refuses_the_development_defaults() -> None:
    # Behind a reverse proxy of the same host: production is the default, so the development
    # tokens and an open /metrics never start there by omission.
    _, text = await refused_start("trigger_service", {
        "TRIGGER_API_HOST": "127.0.0.1", "TRIGGER_API_PORT": str(free_port())})
    assert "TRIGGER_ENV=production (the default" in text, text
    assert "off loopback" not in text
    assert "the API serves /metrics to whoever reaches it" in text
    missing = [p for p in EVERY_PROBLEM if p not in text]
    assert not missing, text


def callers_toml(path: Path, tag: str, *tokens: str) -> None:
    path.write_text("".join(
        f'[callers.{tag}_{i}]\ntoken_sha256 = "{hash_token(t)}"\n'
        'callback_prefixes = ["https://hooks.example.com/"]\n' for i, t in enumerate(tokens)))


class Api:
    """An API process and the event names of the log lines it has written."""

    def __init__(self, proc: asyncio.subprocess.Process, url: str) -> None:
        self.proc, self.url = proc, url
        self.events: list[str] = []
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        async for line in self.proc.stdout:
            try:
                self.events.append(str(json.loads(line)["event"]))
            except (ValueError, KeyError, TypeError):
                pass  # not a JSON log line (a warning printed by a library)

    async def hup_until(self, event: str, timeout_s: float = 15) -> None:
        """Send SIGHUP; wait until the process logs ``event`` (its reload's outcome)."""
        seen = self.events.count(event)
        self.proc.send_signal(signal.SIGHUP)
        for _ in range(int(timeout_s / 0.05)):
            if self.events.count(event) > seen:
                return
            assert self.proc.returncode is None, "the API exited on SIGHUP"
            await asyncio.sleep(0.05)
        raise AssertionError(f"no {event} within {timeout_s} s: {self.events[-20:]}")

    async def status(self, token: str) -> int:
        async with aiohttp.ClientSession() as http, http.get(
                self.url + "/v1/dead-letters",
                headers={"Authorization": f"Bearer {token}"}) as resp:
            return resp.status


@asynccontextmanager
async def api_process(stack: Stack, callers: Path) -> AsyncIterator[Api]:
    port = free_port()
    env = {**os.environ, **stack.env, "TRIGGER_API_PORT": str(port),
           "TRIGGER_API_CALLERS_FILE": str(callers), "TRIGGER_LOG_LEVEL": "INFO",
           "TRIGGER_LOG_FORMAT": "json"}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "trigger_service", env=env, cwd=REPO_ROOT,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    api = Api(proc, url)
    try:
        await wait_ready(url, proc)
        yield api
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), timeout=30)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        await api._reader


async def test_sighup_reloads_the_callers_file_of_a_running_api(stack: Stack,
                                                                tmp_path: Path) -> None:
    callers = tmp_path / "hup-callers.toml"
    revoked, kept = f"revoked-{stack.caller}", f"kept-{stack.caller}"
    callers_toml(callers, stack.caller, revoked, kept)
    async with api_process(stack, callers) as api:
        assert await api.status(revoked) == 200
        assert await api.status(kept) == 200

        callers.write_text("[callers.broken\n")  # a bad file: logged, the old callers kept
        await api.hup_until("callers_reload_failed")
        assert await api.status(revoked) == 200

        callers_toml(callers, stack.caller, kept)  # the token revoked
        await api.hup_until("callers_reloaded")
        assert await api.status(revoked) == 401
        assert await api.status(kept) == 200
        assert api.proc.returncode is None
