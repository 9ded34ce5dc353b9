"""Smoke test of the Kubernetes manifests with podman: ``podman kube play`` of the development
overlay (deploy/kubernetes/overlays/dev, rendered by ``kubectl kustomize``) on the host's
network against the stores ``make up`` runs (Cassandra 9042, LocalStack 4566, Redis 6379),
then a trigger registered through the containerised API (port 8088) reaches a receiver on the
host, then ``podman kube down``.

Skipped unless podman, kubectl, the image ``localhost/trigger-service:latest`` (``make image``)
and the three stores are there. Not part of ``make test``.

podman 4.3 plays Pods and Deployments (and ConfigMaps given in the same file), not Jobs,
Services, autoscalers or disruption budgets, and takes secret references from its own secret
store; so the rendered objects are adapted first (``adapt``): the Secret of variables becomes
a ConfigMap of the same name and data, the files Secret and /tmp host folders, the Job
``trigger-migrate`` a Pod played (and waited for) before the rest, without the Deployments'
init containers (podman 4.3 mishandles one that runs for seconds); the other objects are left
out. On the host's network podman refuses port mappings, so container ports (and the probes
that name them) are dropped: the test polls /readyz itself. The machines here need runc,
cgroupfs and explicit limits (/work/shared/INFRA-NOTES.md "Containers here"), given through a
containers.conf of the test's own; pods need an infra container, which podman builds locally
from Debian's catatonit (there is no registry to pull a pause image from).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
OVERLAY = ROOT / "deploy" / "kubernetes" / "overlays" / "dev"
IMAGE = "localhost/trigger-service:latest"
API = "http://127.0.0.1:8088"
STORES = {"cassandra": 9042, "sqs": 4566, "redis": 6379}
TOKEN = "dev-token"  # config/callers.dev.toml's caller `dev` (public, development only)
# A prefix the development callers file allows for `dev`; the test swaps its port for its own.
DEV_PREFIX = "http://127.0.0.1:9100/"
PODMAN = ["podman", "--runtime", "runc", "--cgroup-manager", "cgroupfs"]
CONTAINERS_CONF = """\
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=4096:4096"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
"""

Obj = dict[str, Any]


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _skip_reason() -> str | None:
    for tool in ("podman", "kubectl"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    # A pod's infra container: podman builds its pause image around catatonit (no registry).
    if shutil.which("catatonit") is None and not Path("/usr/libexec/podman/catatonit").exists():
        return "catatonit is not installed (apt-get install catatonit): podman kube play needs it"
    if subprocess.run(["podman", "image", "exists", IMAGE], check=False).returncode != 0:
        return f"no image {IMAGE} (make image)"
    down = [name for name, port in STORES.items() if not _listening(port)]
    if down:
        return f"stores not running ({', '.join(down)}): make up"
    if _listening(8088):
        return "port 8088 (the dev overlay's API) is taken"
    return None


# A deploy test (``make test-deploy``, which builds the image first): ``make test`` skips it.
pytestmark = [pytest.mark.deploy,
              pytest.mark.skipif(_skip_reason() is not None, reason=str(_skip_reason()))]


class Receiver:
    """An HTTP server on the host's loopback that records each POST body."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        received = self.bodies

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                received.append(self.rfile.read(n))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Receiver:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def render() -> list[Obj]:
    out = subprocess.run(["kubectl", "kustomize", str(OVERLAY)], check=True,
                         capture_output=True, text=True, timeout=60).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def adapt(objs: list[Obj], receiver_port: int, work: Path) -> tuple[list[Obj], list[Obj]]:
    """(the migration's objects, the processes' objects) as podman 4.3 plays them.

    Volumes become host folders under ``work``: podman makes an emptyDir a named volume owned
    by root, shared by every pod, without fsGroup (the non-root user could not write its
    /tmp), and a ConfigMap volume a named volume it rewrites as each pod starts (a process of
    an earlier pod may read an empty callers file). Each Secret's files are written once to
    ``work/files/<name>/``."""
    tmp = work / "pod-tmp"
    tmp.mkdir(mode=0o1777)
    tmp.chmod(0o1777)
    maps: list[Obj] = []
    for o in objs:
        if o["kind"] not in ("Secret", "ConfigMap"):
            continue
        data = dict(o.get("data", {}))
        if o["kind"] == "Secret":
            data = {k: base64.b64decode(v).decode() for k, v in data.items()}
        if "callers.toml" in data:
            data["callers.toml"] = data["callers.toml"].replace(
                DEV_PREFIX, f"http://127.0.0.1:{receiver_port}/")
        if o["kind"] == "Secret" and o["metadata"]["name"].startswith("trigger-files"):
            folder = work / "files" / o["metadata"]["name"]
            folder.mkdir(parents=True)
            for key, text in data.items():
                (folder / key).write_text(text)
                (folder / key).chmod(0o444)
            continue
        maps.append({"apiVersion": "v1", "kind": "ConfigMap",
                     "metadata": {"name": o["metadata"]["name"]}, "data": data})

    def pod_spec(spec: Obj) -> Obj:
        spec = json.loads(json.dumps(spec))
        for c in [*spec.get("initContainers", []), *spec["containers"]]:
            # On the host's network podman refuses port mappings, and it turns probes into its
            # own health checks by port number: the test waits for /readyz itself instead.
            for key in ("ports", "livenessProbe", "readinessProbe", "startupProbe"):
                c.pop(key, None)
            for ref in c.get("envFrom", []):
                if "secretRef" in ref:
                    ref["configMapRef"] = ref.pop("secretRef")
        for v in spec.get("volumes", []):
            if "emptyDir" in v:
                del v["emptyDir"]
                v["hostPath"] = {"path": str(tmp), "type": "Directory"}
            if "secret" in v:
                folder = work / "files" / v.pop("secret")["secretName"]
                v["hostPath"] = {"path": str(folder), "type": "Directory"}
        return spec

    migrate: list[Obj] = []
    processes: list[Obj] = []
    for o in objs:
        if o["kind"] == "Job":
            spec = pod_spec(o["spec"]["template"]["spec"])
            spec["restartPolicy"] = "Never"
            migrate.append({"apiVersion": "v1", "kind": "Pod",
                            "metadata": {"name": o["metadata"]["name"],
                                         "labels": o["spec"]["template"]["metadata"]["labels"]},
                            "spec": spec})
        elif o["kind"] == "Deployment":
            o = json.loads(json.dumps(o))
            o["spec"]["template"]["spec"] = pod_spec(o["spec"]["template"]["spec"])
            # podman 4.3 removes a finished init container while it still runs ("failed to
            # remove once init container"): the migration Pod has run already, so leave the
            # init containers (the same migration, a no-op by then) out.
            o["spec"]["template"]["spec"].pop("initContainers", None)
            processes.append(o)
    return maps + migrate, maps + processes


def podman(*args: str, env: dict[str, str], timeout: float = 300,
           check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([*PODMAN, *args], env=env, check=False, capture_output=True,
                          text=True, timeout=timeout)
    assert not check or done.returncode == 0, \
        f"podman {' '.join(args)}: exit {done.returncode}\n{done.stdout}{done.stderr}"
    return done


def logs(env: dict[str, str]) -> str:
    names = podman("ps", "-a", "--filter", "label=app.kubernetes.io/part-of=trigger-service",
                   "--format", "{{.Names}}", env=env, check=False).stdout.split()
    out = []
    for name in names:
        tail = podman("logs", "--tail", "30", name, env=env, check=False)
        out.append(f"--- {name}\n{tail.stdout}{tail.stderr}")
    return "\n".join(out)


@pytest.fixture
def podman_env(tmp_path: Path) -> dict[str, str]:
    conf = tmp_path / "containers.conf"
    conf.write_text(CONTAINERS_CONF)
    return {**os.environ, "CONTAINERS_CONF": str(conf)}


@pytest.fixture
def played(tmp_path: Path, podman_env: dict[str, str]) -> Iterator[Receiver]:
    with Receiver() as receiver:
        migrate, processes = adapt(render(), receiver.port, tmp_path)
        migrate_file, processes_file = tmp_path / "migrate.yaml", tmp_path / "processes.yaml"
        migrate_file.write_text(yaml.safe_dump_all(migrate))
        processes_file.write_text(yaml.safe_dump_all(processes))
        try:
            # The order of a rollout: the migration to its end, then the processes.
            podman("kube", "play", "--replace", str(migrate_file), env=podman_env)
            deadline = time.monotonic() + 180
            while True:
                state = podman("inspect", "--format", "{{.State.Status}} {{.State.ExitCode}}",
                               "trigger-migrate-migrate", env=podman_env, check=False).stdout
                if state.startswith(("exited", "stopped")):
                    break
                assert time.monotonic() < deadline, f"migration still running\n{logs(podman_env)}"
                time.sleep(1)
            assert state.split()[1] == "0", f"migration failed: {state}\n{logs(podman_env)}"
            podman("kube", "down", str(migrate_file), env=podman_env, check=False)
            podman("kube", "play", "--replace", str(processes_file), env=podman_env)
            yield receiver
        except BaseException:
            print(logs(podman_env))
            raise
        finally:
            podman("kube", "down", str(processes_file), env=podman_env, check=False)
            podman("kube", "down", str(migrate_file), env=podman_env, check=False)
            # kube down stops at the first pod it does not find (one that failed to start):
            # remove what this test played by name, and the volumes of its ConfigMaps.
            pods = [f"{o['metadata']['name']}-pod-0" for o in processes
                    if o["kind"] == "Deployment"]
            podman("pod", "rm", "-f", "--ignore", "trigger-migrate", *pods, env=podman_env,
                   check=False)
            maps = [o["metadata"]["name"] for o in migrate if o["kind"] == "ConfigMap"]
            podman("volume", "rm", "-f", *maps, env=podman_env, check=False)


def http(method: str, url: str, body: Obj | None = None) -> tuple[int, Obj]:
    req = urllib.request.Request(url, method=method,
                                 data=None if body is None else json.dumps(body).encode(),
                                 headers={"Authorization": f"Bearer {TOKEN}",
                                          "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            status, raw = r.status, r.read()
    except urllib.error.HTTPError as e:
        status, raw = e.code, e.read()
    return status, json.loads(raw or b"{}")


def test_a_trigger_goes_through_the_played_pods(played: Receiver,
                                                podman_env: dict[str, str]) -> None:
    deadline = time.monotonic() + 180
    while True:
        try:
            if http("GET", f"{API}/readyz")[0] == 200:
                break
        except OSError:
            pass
        assert time.monotonic() < deadline, f"API never ready\n{logs(podman_env)}"
        time.sleep(2)
    marker = f"kube-play-{time.time_ns()}"
    status, created = http("POST", f"{API}/v1/triggers", {
        "callbackUrl": f"http://127.0.0.1:{played.port}/hook",
        "payload": {"marker": marker}, "delaySeconds": 2})
    assert status in (200, 201, 202), created
    deadline = time.monotonic() + 90
    while not any(marker.encode() in b for b in played.bodies):
        assert time.monotonic() < deadline, \
            f"no callback for {created}\n{logs(podman_env)}"
        time.sleep(0.5)
