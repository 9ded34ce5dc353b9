"""What the image's tests run: podman (and podman-compose) with this repository's podman
settings (infra/image/containers.conf: runc, cgroupfs, the ulimits these machines allow),
containers named and labelled per test run so that only what the run started is removed."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONTAINERS_CONF = ROOT / "infra" / "image" / "containers.conf"
IMAGE = "localhost/trigger-service"
# The dev caller's token (config/callers.dev.toml, public: development only) and its hash.
DEV_TOKEN = "dev-token"
DEV_TOKEN_SHA256 = "c91cbbedf8c712e8e2b7517ddeca8fe4fde839ebd8339e0b2001363002b37712"
LABEL = "trigger-service.deploy-test"


def podman_env() -> dict[str, str]:
    return {**os.environ, "CONTAINERS_CONF": str(CONTAINERS_CONF)}


def run(cmd: Sequence[str], *, timeout: float = 120, check: bool = True,
        env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout,
                          env=dict(env) if env is not None else podman_env(), cwd=ROOT)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited {proc.returncode}:\n"
                             f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


def version() -> str:
    for line in (ROOT / "pyproject.toml").read_text().splitlines():
        if line.startswith("version = "):
            return line.split('"')[1]
    raise AssertionError("no version in pyproject.toml")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


# podman-compose >= 1.1 (infra/install.sh containers installs it there; Debian's 1.0.3 cannot
# run compose.yaml's network_mode: host).
PODMAN_COMPOSE = ROOT / ".cache" / "podman-compose-venv" / "bin" / "podman-compose"


def has_compose() -> bool:
    return PODMAN_COMPOSE.exists()


def wait_ready(url: str, timeout_s: float, alive: Callable[[], bool] | None = None) -> None:
    """Until GET url answers 200 (AssertionError after timeout_s, or when alive() is false)."""
    deadline = time.monotonic() + timeout_s
    last = ""
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                if resp.status == 200:
                    return
                last = f"status {resp.status}"
        except (urllib.error.URLError, OSError) as exc:
            last = str(exc)
        if alive is not None and not alive():
            raise AssertionError(f"{url}: the container exited ({last})")
        time.sleep(0.5)
    raise AssertionError(f"{url} not ready after {timeout_s} s: {last}")


@dataclass
class Store:
    """The names of what a run uses in ``make up``'s stores: its own keyspace, queues and
    Redis database, so its processes and ``make up``'s never take each other's work."""

    keyspace: str = "triggers_deploy"
    queue: str = "deploy-test"
    redis_db: int = 9

    def env(self) -> dict[str, str]:
        return {
            "TRIGGER_ENV": "development",
            "TRIGGER_CASSANDRA_HOSTS": os.environ.get("TRIGGER_CASSANDRA_HOSTS", "127.0.0.1"),
            "TRIGGER_CASSANDRA_KEYSPACE": self.keyspace,
            "TRIGGER_SQS_QUEUE": self.queue,
            "TRIGGER_SQS_DLQ": f"{self.queue}-dlq",
            "TRIGGER_SQS_REDRIVE_QUEUE": f"{self.queue}-redrive",
            "TRIGGER_REDIS_URL": f"redis://127.0.0.1:6379/{self.redis_db}",
        }


@dataclass
class Containers:
    """``podman run`` of the image's processes on the host's network, each removed by
    ``remove_all`` (by the names this object gave, never by a pattern)."""

    prefix: str
    image: str
    env: dict[str, str]
    mounts: dict[Path, str]
    names: list[str] = field(default_factory=list)

    def run(self, role: str, command: str, *, detach: bool = True, healthcheck: bool = False,
            extra_env: Mapping[str, str] | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess[str]:
        name = f"{self.prefix}-{role}"
        args = ["podman", "run", "--name", name, "--label", f"{LABEL}={self.prefix}",
                "--network", "host"]
        args += ["-d"] if detach else []
        args += [] if healthcheck else ["--no-healthcheck"]
        for key, value in {**self.env, **(extra_env or {})}.items():
            args += ["-e", f"{key}={value}"]
        for host_path, container_path in self.mounts.items():
            args += ["-v", f"{host_path}:{container_path}:ro"]
        self.names.append(name)
        return run([*args, self.image, command], timeout=timeout)

    def running(self, role: str) -> bool:
        proc = run(["podman", "inspect", "--format", "{{.State.Running}}",
                    f"{self.prefix}-{role}"], check=False)
        return proc.stdout.strip() == "true"

    def logs(self, role: str) -> str:
        proc = run(["podman", "logs", "--tail", "40", f"{self.prefix}-{role}"], check=False)
        return proc.stdout + proc.stderr

    def remove_all(self) -> None:
        for name in reversed(self.names):
            run(["podman", "rm", "-f", "-t", "5", name], check=False, timeout=60)
        self.names.clear()


def image_info(ref: str) -> dict[str, object]:
    info: list[dict[str, object]] = json.loads(run(["podman", "image", "inspect", ref]).stdout)
    return info[0]
