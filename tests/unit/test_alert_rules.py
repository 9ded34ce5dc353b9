"""The on-call alert rules (deploy/prometheus) and the Grafana dashboard (deploy/grafana).

promtool checks the rules and runs their unit tests (alerts_test.yaml: each alert fires on a
synthetic series of its trouble and stays quiet on a healthy one). Every series the rules and
the dashboard's queries name must be one the service exports: the catalogue is
``SERIES`` (trigger_service/platform/metrics.py) plus every name the code passes to
``metrics.inc/observe/set`` (an undeclared name is still exported, as a counter, histogram or
gauge with the labels of its use), each exposed as ``trigger_<name>``.
"""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from trigger_service.platform.metrics import NAMESPACE, SERIES

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "alerts.yaml"
RULE_TESTS = ROOT / "deploy" / "prometheus" / "alerts_test.yaml"
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboard.json"
RUNBOOKS = ROOT / "docs" / "operations" / "runbooks.md"
PACKAGES = ("trigger_service", "dispatcher", "sweeper", "reconciler")
# Series Prometheus itself adds to every scrape, and the labels its scrape jobs add.
SCRAPE_SERIES = {"up"}
SCRAPE_LABELS = {"job", "instance"}
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool is not installed (`infra/install.sh prometheus`; "
    "make test installs it)")


@dataclass
class Exported:
    kind: str
    labels: set[str] = field(default_factory=set)


@cache
def _metric_calls() -> dict[str, Exported]:
    """Every name the code passes to ``<...metrics>.inc/observe/set`` (a literal, or a
    module-level string constant), with the kind that call creates and its labels."""
    kinds = {"inc": "counter", "observe": "histogram", "set": "gauge"}
    found: dict[str, Exported] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            constants = {t.id: n.value.value for n in tree.body if isinstance(n, ast.Assign)
                         and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)
                         for t in n.targets if isinstance(t, ast.Name)}
            for node in ast.walk(tree):
                if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                        and node.func.attr in kinds and node.args):
                    continue
                receiver = ast.unparse(node.func.value)
                if not receiver.split(".")[-1].endswith("metrics"):
                    continue
                first = node.args[0]
                if isinstance(first, ast.Constant) and isinstance(first.value, str):
                    name = first.value
                elif isinstance(first, ast.Name) and first.id in constants:
                    name = constants[first.id]
                else:
                    continue
                e = found.setdefault(name, Exported(kinds[node.func.attr]))
                e.labels |= {k.arg for k in node.keywords if k.arg is not None}
    return found


@cache
def catalogue() -> dict[str, set[str]]:
    """Every sample name the service exposes, with the labels it may carry."""
    series: dict[str, Exported] = {
        name: Exported(s.kind, set(s.labels)) for name, s in SERIES.items()}
    for name, used in _metric_calls().items():
        if name not in series:  # undeclared: created at its first use, with its labels
            series[name] = used
    samples: dict[str, set[str]] = {}
    for name, s in series.items():
        full = f"{NAMESPACE}_{name}"
        if s.kind == "histogram":
            samples[f"{full}_bucket"] = s.labels | {"le"}
            samples[f"{full}_sum"] = set(s.labels)
            samples[f"{full}_count"] = set(s.labels)
        else:
            samples[full] = set(s.labels)
    return samples


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_IDENT = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_SELECTOR = re.compile(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{([^}]*)\}")
_FUNCTIONS_AND_KEYWORDS = {
    "sum", "max", "min", "avg", "count", "by", "without", "and", "or", "unless", "on",
    "ignoring", "group_left", "group_right", "rate", "irate", "increase", "deriv", "delta",
    "histogram_quantile", "vector", "scalar", "absent", "label_replace", "bool", "offset",
    "topk", "bottomk", "clamp_min", "clamp_max", "time", "le", "inf", "nan"}


def series_names(expr: str) -> set[str]:
    """The series a PromQL expression names (identifiers that are not functions, keywords,
    label names in a grouping or a selector, durations or strings)."""
    bare = _STRING.sub('""', expr)
    bare = re.sub(r"\{[^}]*\}", "", bare)  # selectors' label matchers
    bare = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", bare)
    bare = re.sub(r"\[[^\]]*\]", "", bare)  # ranges, subqueries
    names = set()
    for m in _IDENT.finditer(bare):
        token = m.group(0)
        if token.lower() in _FUNCTIONS_AND_KEYWORDS or (
                m.start() > 0 and bare[m.start() - 1].isdigit()):
            continue
        after = bare[m.end():].lstrip()
        if after.startswith("("):  # a function
            continue
        names.add(token)
    return names


def selector_labels(expr: str) -> list[tuple[str, set[str]]]:
    """(series, label names) of each ``series{...}`` selector, and the labels grouped by."""
    out = []
    for m in _SELECTOR.finditer(_STRING.sub('""', expr)):
        out.append((m.group(1), {p.split("=")[0].split("!")[0].split("~")[0].strip()
                                 for p in m.group(2).split(",") if p.strip()}))
    return out


def _rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    return [r for g in doc["groups"] for r in g["rules"]]


def dashboard_exprs() -> list[tuple[str, str]]:
    d = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return [(p["title"], t["expr"]) for p in d["panels"] for t in p.get("targets", [])]


def _check_names(where: str, expr: str, known: dict[str, set[str]]) -> list[str]:
    problems = []
    names = series_names(expr)
    if not names:
        problems.append(f"{where}: names no series: {expr}")
    for name in sorted(names - SCRAPE_SERIES):
        if name not in known:
            problems.append(f"{where}: {name} is not a series the service exports")
    for name, labels in selector_labels(expr):
        allowed = known.get(name, set()) | SCRAPE_LABELS
        if name in SCRAPE_SERIES:
            continue
        for label in sorted(labels - allowed):
            problems.append(f"{where}: {name} has no label {label!r}")
    return problems


# --- the catalogue and the expression parser themselves ---------------------------------------


def test_catalogue_has_declared_and_used_series() -> None:
    known = catalogue()
    assert known["trigger_fire_lag_seconds_bucket"] == {"le"}
    assert known["trigger_deliveries_total"] == {"outcome", "caller"}
    assert known["trigger_queue_depth"] == {"queue"}
    # Undeclared, created at first use: labels from the call.
    assert known["trigger_endpoints_disabled_total"] == {"caller"}
    assert "trigger_shard_acquisitions_total" in known
    assert "trigger_inbox_publish_failures_total" in known  # through a module constant
    assert "trigger_no_such_series_total" not in known


def test_series_names_finds_the_series_only() -> None:
    expr = ('histogram_quantile(0.99, sum by (le, caller) (rate(trigger_fire_lag_seconds_bucket'
            '{job="trigger-api"}[5m]))) > 5 and (sum(rate(trigger_sqs_calls_total{operation='
            '"receive"}[5m])) or vector(0)) == 0 and deriv(max(x_y)[30m:1m]) > 1e3')
    assert series_names(expr) == {"trigger_fire_lag_seconds_bucket", "trigger_sqs_calls_total",
                                  "x_y"}
    assert selector_labels(expr) == [("trigger_fire_lag_seconds_bucket", {"job"}),
                                     ("trigger_sqs_calls_total", {"operation"})]
    problems = _check_names("t", 'sum(trigger_made_up_total{queue="x"})', catalogue())
    assert problems == ["t: trigger_made_up_total is not a series the service exports",
                        "t: trigger_made_up_total has no label 'queue'"]


# --- the rules --------------------------------------------------------------------------------


@needs_promtool
def test_promtool_check_rules() -> None:
    assert PROMTOOL is not None
    r = subprocess.run([PROMTOOL, "check", "rules", str(RULES)], capture_output=True,
                       text=True, timeout=60, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"SUCCESS: {len(_rules())} rules found" in r.stdout


@needs_promtool
def test_promtool_rule_unit_tests() -> None:
    assert PROMTOOL is not None
    r = subprocess.run([PROMTOOL, "test", "rules", str(RULE_TESTS)], capture_output=True,
                       text=True, timeout=120, check=False, cwd=RULE_TESTS.parent)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS" in r.stdout


def test_every_alert_fires_in_a_test_and_stays_quiet_in_another() -> None:
    doc = yaml.safe_load(RULE_TESTS.read_text(encoding="utf-8"))
    fires: set[str] = set()
    quiet: set[str] = set()
    for case in doc["tests"]:
        for t in case.get("alert_rule_test", []):
            (fires if t.get("exp_alerts") else quiet).add(t["alertname"])
    alerts = {r["alert"] for r in _rules()}
    assert alerts - fires == set(), "alerts never shown firing"
    assert alerts - quiet == set(), "alerts never shown quiet on a healthy series"
    assert (fires | quiet) - alerts == set(), "tests of alerts that do not exist"


def test_every_alert_has_for_severity_and_annotations() -> None:
    anchors = runbook_anchors()
    names = [r["alert"] for r in _rules()]
    assert len(names) == len(set(names))
    for rule in _rules():
        name = rule["alert"]
        assert rule.get("for"), f"{name}: no for:"
        assert rule["labels"]["severity"] in {"page", "warning", "info"}, name
        notes = rule["annotations"]
        assert notes.get("summary") and notes.get("description"), name
        url = notes["runbook_url"]
        assert url.endswith("/operations/runbooks/#" + name.lower()), (name, url)
        assert name.lower() in anchors, f"{name}: no section in {RUNBOOKS.name}"


def test_rules_name_only_exported_series() -> None:
    known = catalogue()
    problems = [p for r in _rules() for p in _check_names(r["alert"], r["expr"], known)]
    assert problems == []


def runbook_anchors() -> set[str]:
    """The anchors of runbooks.md's sections: ``{#anchor}`` or the heading's slug."""
    anchors = set()
    for line in RUNBOOKS.read_text(encoding="utf-8").splitlines():
        m = re.match(r"#{2,3} (.+?)\s*(?:\{#([\w-]+)\})?\s*$", line)
        if m:
            anchors.add(m.group(2) or re.sub(r"[^\w]+", "-", m.group(1).lower()).strip("-"))
    return anchors


# --- the dashboard --------------------------------------------------------------------------------


def test_dashboard_queries_name_only_exported_series() -> None:
    known = catalogue()
    exprs = dashboard_exprs()
    assert len(exprs) >= 15
    problems = [p for title, expr in exprs for p in _check_names(title, expr, known)]
    assert problems == []


def test_dashboard_has_the_on_call_panels() -> None:
    d = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    assert d["schemaVersion"] >= 39
    titles = {p["title"] for p in d["panels"]}
    for wanted in ("Registrations/s", "Deliveries/s by outcome", "Fire lag p50 / p99",
                   "Dead letters/min by reason", "SQS backlog", "Circuits open / half-open",
                   "Endpoints disabled / failing (per hour)", "Sweeper shard leases",
                   "Dependency errors/min"):
        assert wanted in titles
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids))
    for p in d["panels"]:
        if p["type"] != "row":
            assert p["datasource"]["uid"] == "${datasource}", p["title"]
