"""The Kubernetes manifests (deploy/kubernetes/): each kustomization renders (``kubectl
kustomize``, local, no cluster), every object is valid against the Kubernetes API's schemas
(kubernetes-validate, strict: an unknown field fails), and the objects agree with the service:
each ``TRIGGER_*`` name is a setting, each probe path a route, each command a console script,
each port the one its setting names, and the development overlay's settings load and pass
``Settings.validate``.
"""

from __future__ import annotations

import ast
import base64
import functools
import re
import shutil
import subprocess
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from trigger_service.config.production import production_reason
from trigger_service.config.settings import VARIABLES, Settings

ROOT = Path(__file__).resolve().parents[2]
KUBE = ROOT / "deploy" / "kubernetes"
KUSTOMIZATIONS = ("base", "overlays/dev", "overlays/production")
KUBERNETES_VERSION = "1.32.0"  # the kubectl installed here; the oldest API the objects use
IMAGE_REPO = "localhost/trigger-service"
SETTING_NAMES = frozenset(v.name for v in VARIABLES)
SCRIPTS = frozenset(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"])

Obj = dict[str, Any]

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None,
                                reason="kubectl (its built-in kustomize renders the manifests)")


@functools.cache
def render(name: str) -> tuple[Obj, ...]:
    out = subprocess.run(["kubectl", "kustomize", str(KUBE / name)], check=True,
                         capture_output=True, text=True, timeout=60).stdout
    return tuple(d for d in yaml.safe_load_all(out) if d)


def one(objs: tuple[Obj, ...], kind: str, name: str) -> Obj:
    found = [o for o in objs if o["kind"] == kind and o["metadata"]["name"].startswith(name)]
    assert len(found) == 1, f"{kind} {name}: {len(found)} found"
    return found[0]


def pod_specs(objs: tuple[Obj, ...]) -> Iterator[tuple[Obj, Obj]]:
    """(the object, its pod spec) of every workload."""
    for o in objs:
        if o["kind"] in ("Deployment", "Job"):
            yield o, o["spec"]["template"]["spec"]


def containers(spec: Obj) -> list[Obj]:
    return [*spec.get("initContainers", []), *spec["containers"]]


def config(objs: tuple[Obj, ...]) -> dict[str, str]:
    data: dict[str, str] = one(objs, "ConfigMap", "trigger-config")["data"]
    return data


def secret_data(objs: tuple[Obj, ...], name: str) -> dict[str, str]:
    s = one(objs, "Secret", name)
    return {k: base64.b64decode(v).decode() for k, v in s.get("data", {}).items()}


def route_paths() -> set[str]:
    """Every literal path given to ``router.add_*`` under trigger_service/http."""
    paths: set[str] = set()
    for f in (ROOT / "trigger_service" / "http").rglob("*.py"):
        for node in ast.walk(ast.parse(f.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr.startswith("add_") and node.args
                    and isinstance(node.args[0], ast.Constant)
                    and isinstance(node.args[0].value, str)):
                paths.add(node.args[0].value)
    return paths


@pytest.mark.parametrize("name", KUSTOMIZATIONS)
def test_every_object_is_valid_against_the_kubernetes_schemas(name: str) -> None:
    objs = render(name)
    assert objs
    for o in objs:
        kubernetes_validate.validate(o, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize("name", KUSTOMIZATIONS)
def test_the_objects_are_all_there(name: str) -> None:
    objs = render(name)
    api = one(objs, "Deployment", "trigger-api")
    assert one(objs, "Service", "trigger-api")["spec"]["selector"] == \
        api["spec"]["selector"]["matchLabels"]
    hpa = one(objs, "HorizontalPodAutoscaler", "trigger-api")
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"]["scaleTargetRef"]["name"] == "trigger-api"
    assert one(objs, "PodDisruptionBudget", "trigger-api")["spec"]["selector"] == \
        api["spec"]["selector"]
    one(objs, "Deployment", "trigger-dispatcher")
    assert one(objs, "Deployment", "trigger-reconciler")["spec"]["replicas"] == 1
    sweepers = one(objs, "Deployment", "trigger-sweeper")["spec"]["replicas"]
    assert sweepers == (1 if name == "overlays/dev" else 2)
    job = one(objs, "Job", "trigger-migrate")
    assert job["spec"]["template"]["spec"]["containers"][0]["command"] == ["trigger-migrate"]


@pytest.mark.parametrize("name", KUSTOMIZATIONS)
def test_every_trigger_variable_is_a_setting(name: str) -> None:
    objs = render(name)
    names = set(config(objs))
    for o in objs:
        if o["kind"] == "Secret" and o["metadata"]["name"].startswith("trigger-secrets"):
            names |= set(o.get("data", {}))
    for _, spec in pod_specs(objs):
        for c in containers(spec):
            names |= {e["name"] for e in c.get("env", [])}
    named = {n for n in names if n.startswith("TRIGGER_")}
    assert named and named <= SETTING_NAMES, sorted(named - SETTING_NAMES)
    assert names == named  # nothing else is passed in


@pytest.mark.parametrize("name", KUSTOMIZATIONS)
def test_workloads_run_the_image_as_a_non_root_user(name: str) -> None:
    objs = render(name)
    wanted = IMAGE_REPO
    if name == "overlays/production":  # pinned and pushed by the overlay's `images:`
        image = yaml.safe_load((KUBE / name / "kustomization.yaml").read_text())["images"][0]
        wanted = image["newName"]
    for o, spec in pod_specs(objs):
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["runAsUser"] > 0
        assert spec["automountServiceAccountToken"] is False
        mounted = {v["name"] for v in spec["volumes"]}
        for c in containers(spec):
            repo, _, tag = c["image"].rpartition(":")
            assert repo == wanted and tag, (o["metadata"]["name"], c["image"])
            assert c["command"][0] in SCRIPTS, c["command"]
            sc = c["securityContext"]
            assert sc["readOnlyRootFilesystem"] and not sc["allowPrivilegeEscalation"]
            assert sc["capabilities"]["drop"] == ["ALL"]
            assert c["resources"]["requests"] and c["resources"]["limits"]
            assert {m["name"] for m in c["volumeMounts"]} <= mounted
            assert any(m["mountPath"] == "/tmp" for m in c["volumeMounts"])
            refs = [r for e in c["envFrom"] for r in e.values()]
            # (a generated Secret's name ends with a hash of its data)
            assert {re.sub(r"-[a-z0-9]{10}$", "", r["name"]) for r in refs} == \
                {"trigger-config", "trigger-secrets"}
        # Every process (not the Job) applies the schema first, in its init container.
        if o["kind"] == "Deployment":
            assert [c["command"] for c in spec["initContainers"]] == [["trigger-migrate"]]


@pytest.mark.parametrize("name", KUSTOMIZATIONS)
def test_probes_and_ports_match_the_routes_and_settings(name: str) -> None:
    objs = render(name)
    cfg = config(objs)
    routes = route_paths()
    api = one(objs, "Deployment", "trigger-api")["spec"]["template"]
    c = api["spec"]["containers"][0]
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        assert c[probe]["httpGet"]["path"] in routes
        assert c[probe]["httpGet"]["port"] == "http"
    assert c["ports"] == [{"name": "http", "containerPort": int(cfg["TRIGGER_API_PORT"])}]
    assert api["metadata"]["annotations"]["prometheus.io/port"] == cfg["TRIGGER_API_PORT"]
    assert api["metadata"]["annotations"]["prometheus.io/path"] in routes
    for deployment, var in (("trigger-dispatcher", "TRIGGER_DISPATCH_METRICS_PORT"),
                            ("trigger-sweeper", "TRIGGER_SWEEP_METRICS_PORT")):
        tpl = one(objs, "Deployment", deployment)["spec"]["template"]
        port = int(cfg[var])
        assert port > 0
        assert tpl["spec"]["containers"][0]["ports"] == [{"name": "metrics",
                                                          "containerPort": port}]
        assert tpl["metadata"]["annotations"] == {"prometheus.io/scrape": "true",
                                                  "prometheus.io/port": str(port),
                                                  "prometheus.io/path": "/metrics"}
        assert tpl["spec"]["containers"][0]["livenessProbe"]["tcpSocket"]["port"] == "metrics"
    # The mounted files: each path the config names is under the mount of the files Secret.
    mount = {m["mountPath"] for m in c["volumeMounts"] if m["name"] == "files"}.pop()
    for var in ("TRIGGER_API_CALLERS_FILE", "TRIGGER_ENCRYPTION_KEY_FILE",
                "TRIGGER_CASSANDRA_TLS_CA_FILE", "TRIGGER_REDIS_TLS_CA_FILE"):
        assert cfg[var] == "" or cfg[var].startswith(mount + "/"), var


def dev_env() -> dict[str, str]:
    objs = render("overlays/dev")
    env = {**config(objs), **secret_data(objs, "trigger-secrets")}
    assert not any(o["kind"] == "Secret" and o.get("stringData") for o in objs)
    return env


def test_the_dev_overlay_loads_as_development_settings() -> None:
    """The development overlay's values load as settings (each one parses) that pass the
    cross-checks, on loopback, with development asked for, against `make up`'s stores."""
    env = dev_env()
    files = secret_data(render("overlays/dev"), "trigger-files")
    assert set(files) == {"callers.toml", "encryption.keys"}
    mount = "/etc/trigger-service/"
    assert env["TRIGGER_API_CALLERS_FILE"] == mount + "callers.toml"
    assert env["TRIGGER_ENCRYPTION_KEY_FILE"] == mount + "encryption.keys"
    s = Settings.from_env(env)
    s.validate()
    assert production_reason(s) is None
    assert s.cassandra.hosts == ("127.0.0.1",) or list(s.cassandra.hosts) == ["127.0.0.1"]
    assert s.cassandra.keyspace != "triggers" and s.sqs.queue != "triggers"  # not make up's
    assert s.api.port != 8080  # make up's API has it
    # The callers file is the development one, copied (kustomize reads inside its folder only).
    assert files["callers.toml"] == (ROOT / "config" / "callers.dev.toml").read_text()
    key_id, key = files["encryption.keys"].split()
    assert len(base64.b64decode(key)) == 32 and re.fullmatch(r"[\w-]+", key_id)


def test_the_production_example_is_production() -> None:
    """The production example's values parse, and the production check applies to them
    (the Secrets it needs are created out of band: their names and keys are the dev ones)."""
    objs = render("overlays/production")
    assert not any(o["kind"] == "Secret" for o in objs)
    env = config(objs)
    placeholders = {k: "x" * 40 for k in secret_data(render("overlays/dev"), "trigger-secrets")}
    s = Settings.from_env({**env, **placeholders})
    assert production_reason(s) is not None
    assert s.cassandra.replication_factor >= 3
    assert s.sqs.endpoint_url.startswith("https://") and s.api.public_url.startswith("https://")
    assert all(o["metadata"].get("namespace") == "triggers" for o in objs)
