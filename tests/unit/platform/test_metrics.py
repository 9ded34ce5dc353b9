"""``PrometheusMetrics``: the series as Prometheus shows them, the durable counters, one
registry per instance, and multiprocess mode summing the processes of a host."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from trigger_service.config.settings import Settings
from trigger_service.platform.metrics import InMemoryMetrics, PrometheusMetrics


def text(m: PrometheusMetrics) -> str:
    return m.exposition().decode()


def test_counters_histograms_and_gauges_in_the_text_format() -> None:
    m = PrometheusMetrics()
    m.inc("deliveries_total", outcome="fired", caller="orders")
    m.inc("dead_lettered_total", reason="gone")
    m.observe("fire_lag_seconds", 0.004)
    m.set("breaker_state", 2, caller="orders", origin="http://a:80")
    page = text(m)
    assert 'trigger_deliveries_total{caller="orders",outcome="fired"} 1.0' in page
    assert 'trigger_dead_lettered_total{reason="gone"} 1.0' in page
    assert 'trigger_fire_lag_seconds_bucket{le="0.001"} 0.0' in page
    assert 'trigger_fire_lag_seconds_bucket{le="0.005"} 1.0' in page
    assert 'trigger_fire_lag_seconds_bucket{le="60.0"} 1.0' in page
    assert "trigger_fire_lag_seconds_count 1.0" in page
    assert 'trigger_breaker_state{caller="orders",origin="http://a:80"} 2.0' in page
    assert "_created" not in page


def test_snapshot_keeps_the_durable_labels_only() -> None:
    m = PrometheusMetrics()
    m.inc("deliveries_total", outcome="fired", caller="orders")
    m.inc("deliveries_total", outcome="fired", caller="billing")
    m.inc("dead_lettered_total", reason="max_age")
    m.inc("delivery_attempts_total", caller="orders")
    m.inc("promoted_total", 3)
    assert m.snapshot() == {'deliveries_total{outcome="fired"}': 2,
                            'deliveries_total{caller="billing",outcome="fired"}': 1,
                            'deliveries_total{caller="orders",outcome="fired"}': 1,
                            'dead_lettered_total{reason="max_age"}': 1,
                            "delivery_attempts_total": 1,
                            'delivery_attempts_total{caller="orders"}': 1,
                            "promoted_total": 3}


def test_labels_that_do_not_fit_never_raise() -> None:
    m = PrometheusMetrics()
    m.inc("dead_lettered_total")  # no reason: exposed as ""
    m.inc("dead_lettered_total", reason="gone", extra="dropped")
    m.inc("custom_total", kind="a")
    m.inc("custom_total")
    page = text(m)
    assert 'trigger_dead_lettered_total{reason=""} 1.0' in page
    assert 'trigger_dead_lettered_total{reason="gone"} 1.0' in page
    assert 'trigger_custom_total{kind=""} 1.0' in page
    assert m.snapshot()['dead_lettered_total{extra="dropped",reason="gone"}'] == 1


def test_each_instance_has_its_own_registry() -> None:
    a, b = PrometheusMetrics(), InMemoryMetrics()
    a.observe("fire_lag_seconds", 1.5)
    b.observe("fire_lag_seconds", 0.2)
    assert "trigger_fire_lag_seconds_count 1.0" in text(a)
    assert "trigger_fire_lag_seconds_count 1.0" in text(b)
    assert b.observed("fire_lag_seconds") == [0.2]


_CHILD = """
import sys
from pathlib import Path
from trigger_service.platform.metrics import PrometheusMetrics
m = PrometheusMetrics(Path(sys.argv[1]))
m.observe("fire_lag_seconds", float(sys.argv[2]))
m.inc("deliveries_total", outcome="fired", caller="orders")
"""


def test_multiprocess_mode_sums_every_process_of_the_host(tmp_path: Path) -> None:
    # prometheus_client reads PROMETHEUS_MULTIPROC_DIR when it is imported: other processes.
    env = {"PROMETHEUS_MULTIPROC_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"}
    for lag in ("0.002", "0.3"):
        subprocess.run([sys.executable, "-c", _CHILD, str(tmp_path), lag], env=env, check=True,
                       cwd=Path(__file__).resolve().parents[3])
    page = PrometheusMetrics(tmp_path).exposition(aggregate=True).decode()
    assert "trigger_fire_lag_seconds_count 2.0" in page
    assert 'trigger_fire_lag_seconds_bucket{le="0.0025"} 1.0' in page
    assert 'trigger_deliveries_total{caller="orders",outcome="fired"} 2.0' in page


def test_settings_take_the_multiprocess_dir_and_the_metrics_ports() -> None:
    s = Settings.from_env({"PROMETHEUS_MULTIPROC_DIR": "/tmp/prom",
                           "TRIGGER_SWEEP_METRICS_PORT": "0"})
    assert s.metrics_multiproc_dir == Path("/tmp/prom")
    assert (s.dispatch.metrics_port, s.sweep.metrics_port) == (9101, 0)
    assert Settings.from_env({}).metrics_multiproc_dir is None
