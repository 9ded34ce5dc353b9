"""The service's image, end to end (``make test-deploy``; docs/operations/container.md).

The image is built from this checkout (infra/image/build.sh, as ``make image``). Then its API,
a dispatcher and a sweeper run from it with podman on the host's network against ``make up``'s
Cassandra, SQS and Redis (a keyspace, queues and a Redis database of their own, the schema
applied by the image's ``trigger-migrate``), configured by TRIGGER_* variables and two mounted
files (a callers file naming this test's receiver, a key file). A trigger registered through
the containerised API with delaySeconds 2 reaches a receiver this test runs on the host. The
compose file does the same with podman-compose. Every container started is removed.
"""

from __future__ import annotations

import asyncio
import base64
import os
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from tests.deploy.podman import (
    DEV_TOKEN,
    DEV_TOKEN_SHA256,
    IMAGE,
    PODMAN_COMPOSE,
    ROOT,
    Containers,
    Store,
    free_port,
    has_compose,
    image_info,
    podman_env,
    run,
    version,
    wait_ready,
)

pytestmark = [pytest.mark.deploy, pytest.mark.timeout(900)]

# Ports beside make up's (API 8080, dispatcher metrics 9101, sweeper metrics 9111...).
API_PORT = int(os.environ.get("DEPLOY_API_PORT", "18080"))
COMPOSE_API_PORT = int(os.environ.get("DEPLOY_COMPOSE_API_PORT", "18081"))
# The image stays under this (209 MB when the test was written).
MAX_IMAGE_MB = 250


class Receiver:
    """A callback receiver on the host's loopback: what each trigger id delivered."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.bodies: dict[str, str] = {}

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    async def handle(self, request: web.Request) -> web.Response:
        self.bodies[request.headers.get("X-Trigger-Id", "")] = await request.text()
        return web.Response(status=200)

    async def wait_for(self, trigger_id: str, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if trigger_id in self.bodies:
                return True
            await asyncio.sleep(0.1)
        return False


@asynccontextmanager
async def receiving(port: int) -> AsyncIterator[Receiver]:
    rec = Receiver(port)
    app = web.Application()
    app.router.add_post("/{tail:.*}", rec.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield rec
    finally:
        await runner.cleanup()


async def register_and_receive(api_port: int, rec: Receiver) -> str:
    """POST /v1/triggers (delaySeconds 2) to the API on api_port; the callback's trigger id."""
    marker = uuid.uuid4().hex
    async with aiohttp.ClientSession() as http:
        resp = await http.post(
            f"http://127.0.0.1:{api_port}/v1/triggers",
            headers={"Authorization": f"Bearer {DEV_TOKEN}"},
            json={"callbackUrl": rec.url, "delaySeconds": 2, "payload": {"marker": marker}})
        body: dict[str, Any] = await resp.json()
        assert resp.status == 201, body
    trigger_id = str(body["triggerId"])
    started = time.monotonic()
    assert await rec.wait_for(trigger_id, 60), f"no callback for {trigger_id} within 60 s"
    assert marker in rec.bodies[trigger_id]
    assert time.monotonic() - started >= 1.0  # not before its delay
    return trigger_id


@pytest.fixture(scope="module")
def image() -> str:
    """The image built from this checkout (cached layers make a rebuild quick)."""
    run(["infra/image/build.sh"], timeout=900,
        env={**podman_env(), "PYTHON": os.environ.get("DEPLOY_BUILD_PYTHON", "")
             or str(ROOT / ".venv" / "bin" / "python")})
    return f"{IMAGE}:{version()}"


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, int]:
    """A callers file (the dev caller, callbacks to this test's receiver port), a key file,
    and that port: mounted read-only into the containers."""
    d = tmp_path_factory.mktemp("deploy")
    port = free_port()
    callers = d / "callers.toml"
    callers.write_text(
        f'[callers.dev]\ntoken_sha256 = "{DEV_TOKEN_SHA256}"\n'
        f'callback_prefixes = ["http://127.0.0.1:{port}/"]\n')
    keys = d / "encryption.keys"
    keys.write_text(f"deploy-test {base64.b64encode(os.urandom(32)).decode()}\n")
    for f in (callers, keys):
        f.chmod(0o644)  # the image's user (10001) reads them
    return callers, keys, port


@pytest.fixture(scope="module")
def stack(image: str, files: tuple[Path, Path, int]) -> Iterator[Containers]:
    """migrate (once, to completion), then api, dispatcher and sweeper from the image."""
    callers, keys, _ = files
    c = Containers(prefix=f"deploy-test-{os.getpid()}", image=image, env=Store().env(),
                   mounts={callers: "/etc/trigger-service/callers.toml",
                           keys: "/etc/trigger-service/encryption.keys"})
    try:
        c.run("migrate", "trigger-migrate", detach=False, timeout=300)
        c.run("api", "trigger-api", healthcheck=True, extra_env={
            "TRIGGER_API_PORT": str(API_PORT), "TRIGGER_API_WORKERS": "1"})
        c.run("dispatcher", "trigger-dispatcher", extra_env={
            "TRIGGER_DISPATCH_METRICS_PORT": "19101",
            "TRIGGER_DISPATCH_SLOT_FILE": "/var/lib/trigger-service/dispatcher-1.slot"})
        c.run("sweeper", "trigger-sweeper", extra_env={"TRIGGER_SWEEP_METRICS_PORT": "19111"})
        try:
            wait_ready(f"http://127.0.0.1:{API_PORT}/readyz", 90,
                       alive=lambda: c.running("api"))
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{c.logs('api')}") from exc
        yield c
    finally:
        c.remove_all()


def test_the_image_is_small_and_runs_as_a_user_with_the_commands_on_path(image: str) -> None:
    info = image_info(image)
    size_mb = int(str(info["Size"])) / 1e6
    assert size_mb < MAX_IMAGE_MB, f"{size_mb:.0f} MB"
    out = run(["podman", "run", "--rm", "--network", "host", "--no-healthcheck", image,
               "sh", "-c", "id -u; python3 --version; for c in trigger-api trigger-dispatcher "
               "trigger-sweeper trigger-reconciler trigger-migrate gcc cc pip pip3; do "
               "command -v $c || true; done"]).stdout.split("\n")
    assert out[0] == "10001"
    assert out[1].startswith("Python 3.1") and int(out[1].split(".")[1]) >= 11, out[1]
    assert [Path(p).name for p in out[2:7]] == [
        "trigger-api", "trigger-dispatcher", "trigger-sweeper", "trigger-reconciler",
        "trigger-migrate"]
    assert not [p for p in out[7:] if p], f"a compiler or pip in the image: {out[7:]}"


async def test_a_trigger_registered_through_the_containerised_api_reaches_the_receiver(
        stack: Containers, files: tuple[Path, Path, int]) -> None:
    async with receiving(files[2]) as rec:
        await register_and_receive(API_PORT, rec)
    assert stack.running("api") and stack.running("dispatcher") and stack.running("sweeper")


def test_the_api_container_is_healthy(stack: Containers) -> None:
    proc = run(["podman", "healthcheck", "run", f"{stack.prefix}-api"], check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.skipif(not has_compose(), reason="no podman-compose: infra/install.sh containers")
async def test_compose_runs_the_service(image: str, files: tuple[Path, Path, int]) -> None:
    """compose.yaml: migrate, api, dispatcher, two sweepers and a reconciler; a trigger
    registered through its API reaches the receiver; `down` removes them."""
    callers, keys, port = files
    project = f"deploy-smoke-{os.getpid()}"
    store = Store(keyspace="triggers_deploy_compose", queue="deploy-compose", redis_db=10)
    env = {**podman_env(), **store.env(),
           "SERVICE_IMAGE": image, "CALLERS_FILE_ON_HOST": str(callers),
           "KEY_FILE_ON_HOST": str(keys), "TRIGGER_API_PORT": str(COMPOSE_API_PORT),
           "TRIGGER_DISPATCH_METRICS_PORT": "19102", "SWEEPER_1_METRICS_PORT": "19112",
           "SWEEPER_2_METRICS_PORT": "19113"}
    compose = [str(PODMAN_COMPOSE), "-p", project, "-f", str(ROOT / "compose.yaml")]
    try:
        run([*compose, "up", "-d"], env=env, timeout=300)
        try:
            wait_ready(f"http://127.0.0.1:{COMPOSE_API_PORT}/readyz", 120)
        except AssertionError as exc:
            logs = run([*compose, "logs"], env=env, check=False)
            raise AssertionError(f"{exc}\n{logs.stdout[-4000:]}") from exc
        async with receiving(port) as rec:
            await register_and_receive(COMPOSE_API_PORT, rec)
    finally:
        run([*compose, "down", "-t", "5"], env=env, check=False, timeout=300)
    left = run(["podman", "ps", "-a", "--filter", f"label=io.podman.compose.project={project}",
                "--format", "{{.Names}}"]).stdout.split()
    assert not left, f"left behind: {left}"
