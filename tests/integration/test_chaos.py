"""The short chaos run (``python -m bench.chaos --short``): 500 triggers registered with
Idempotency-Keys while each fault happens once (SIGKILL of the API, a dispatcher, a sweeper
and the reconciler; Redis FLUSHALL; LocalStack stopped and started; one Cassandra node when a
3-node ring is up). It restarts the service's own processes with its settings and stops them
at the end; it leaves the dependencies running for the tests that follow."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from bench.chaos.faults import KINDS

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def sqs_port() -> int:
    endpoint = os.environ.get("TRIGGER_SQS_ENDPOINT_URL", "http://127.0.0.1:4566")
    return int(endpoint.rsplit(":", 1)[1].split("/")[0])


@pytest.mark.timeout(600)
def test_the_short_chaos_run_meets_every_target(tmp_path: Path) -> None:
    out = tmp_path / "chaos.json"
    done = subprocess.run([sys.executable, "-m", "bench.chaos", "--short", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=540, check=False)
    log = f"--- stdout\n{done.stdout[-6000:]}\n--- stderr\n{done.stderr[-4000:]}"
    assert out.exists(), log
    report = json.loads(out.read_text())
    t = report["triggers"]
    assert t["registered"] == 500, log
    assert report["registration"]["unanswered_keys"] == 0, log
    assert t["lost"] == 0, log
    assert t["early"] == 0, log
    assert t["keys_with_several_triggers"] == 0, log
    # At-least-once: a dispatcher SIGKILLed between the receiver's answer and the FIRED write
    # delivers those again. With 500 triggers the full form's 0.1 % would mean none at all, so
    # here every duplicate must be one of those (its first delivery just before the kill),
    # and they stay few.
    assert t["duplicates_unexplained"] == 0, log
    assert t["duplicates_pct"] <= 1.0, log
    assert t["lag_ms"]["max"] is not None and t["lag_ms"]["max"] <= 30_000, log
    by_kind = {f["kind"]: f for f in report["faults"]}
    assert set(by_kind) == set(KINDS), log
    for kind, fault in by_kind.items():
        if kind == "cassandra_node_restart" and report["cassandra_nodes"] < 3:
            assert fault["status"] == "skipped", log
        else:
            assert fault["status"] == "injected", (kind, log)
    assert done.returncode == 0 or all(m.startswith("duplicates ") for m in report["misses"]), log
    print(done.stdout)  # the report's table, for `pytest -rP`
    # What the run touched is back: LocalStack (restarted by the run) answers again.
    assert port_open(sqs_port()), log
