"""The ``Metrics`` port on ``prometheus_client``.

Every series is exposed as ``trigger_<name>``; ``SERIES`` declares the known ones (kind, help,
labels, and for a histogram its buckets). A name not declared there becomes a counter with
the labels of its first use. Labels a call leaves out are exposed as ``""`` and labels a
series does not declare are dropped, so a call can never raise.

Counters also feed ``snapshot()``, the durable counters (``CounterFlusher`` adds their deltas
to Cassandra for ``GET /v1/stats``), keyed ``name{label="value",...}`` with only the series'
*durable* labels: ``deliveries_total`` is exposed by outcome and caller but stored by outcome;
a series labelled by caller is stored once more with its caller (``caller_counters``: what
``GET /v1/stats`` shows a caller).

Registries: outside multiprocess mode each ``PrometheusMetrics`` has its own
``CollectorRegistry`` (tests build several in one process). With ``PROMETHEUS_MULTIPROC_DIR``
set (``infra/app.sh`` does; ``Settings.metrics_multiproc_dir``), prometheus_client writes
every value to files there and ``exposition()`` of ``aggregate=True`` sums every process of
the host: one scrape of the API shows the dispatchers' fire lag too.
"""

from __future__ import annotations

import hmac
import os
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
    multiprocess,
)
from prometheus_client import Counter as PromCounter

from trigger_service.core.time.lag import FIRE_LAG_BUCKETS_S

NAMESPACE = "trigger"
CONTENT_TYPE = CONTENT_TYPE_LATEST
REQUEST_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                     10.0)
# Messages per SQS request: one bucket per count (0: an empty receive; 10: SQS's batch limit).
SQS_BATCH_BUCKETS = tuple(float(n) for n in range(11))
# The ``*_created`` samples are noise here (and absent in multiprocess mode anyway).
disable_created_metrics()  # type: ignore[no-untyped-call]

Kind = Literal["counter", "gauge", "histogram"]
GaugeMode = Literal["livesum", "livemax", "mostrecent"]


@dataclass(frozen=True)
class Series:
    kind: Kind
    help: str
    labels: tuple[str, ...] = ()
    durable: tuple[str, ...] | None = None  # labels kept in snapshot(); None: all of them
    buckets: tuple[float, ...] = ()
    mode: GaugeMode = "livesum"  # how multiprocess mode combines a gauge's processes


SERIES: dict[str, Series] = {
    "fire_lag_seconds": Series(
        "histogram", "first attempt's POST start minus the fire time", buckets=FIRE_LAG_BUCKETS_S),
    "deliveries_total": Series("counter", "delivery outcomes (fired, failed_attempt)",
                               ("outcome", "caller"), durable=("outcome",)),
    "delivery_attempts_total": Series("counter", "callback POSTs started", ("caller",),
                                      durable=()),
    "dead_lettered_total": Series("counter", "triggers dead-lettered, by reason", ("reason",)),
    "occurrences_expired_total": Series("counter", "occurrences dead-lettered past their "
                                        "deadline (expiresAt, maxLatenessSeconds)",
                                        ("caller",), durable=()),
    "breaker_state": Series("gauge", "circuit per caller and callback origin: 0 closed, "
                            "1 half-open, 2 open (the worst over this host's dispatchers)",
                            ("caller", "origin"), mode="livemax"),
    "flow_control_delay_seconds": Series(
        "histogram", "flow control's delay: a send's start minus its due time, by caller and "
        "key (the first 20 keys a process meets; the others as _other)", ("caller", "key"),
        buckets=FIRE_LAG_BUCKETS_S),
    "flow_control_fail_open_total": Series(
        "counter", "flow-control steps skipped because Redis failed (delivered anyway)"),
    "flow_control_deferrals_total": Series(
        "counter", "messages hidden on SQS until a flow-control slot far ahead"),
    "breakers_evicted_total": Series("counter", "idle circuits dropped for a caller's new "
                                     "origin (TRIGGER_DISPATCH_BREAKER_MAX_ORIGINS)"),
    "queue_depth": Series("gauge", "approximate visible messages (main, dead_letter)",
                          ("queue",), mode="mostrecent"),
    "sweeper_shards_owned": Series("gauge", "shard leases a sweeper holds", ("sweeper",)),
    "leaks_reinjected_total": Series("counter", "leaked triggers the reconciler re-sent"),
    "enqueue_overflow_total": Series("counter", "background SQS sends not started, "
                                     "TRIGGER_SQS_MAX_BACKGROUND_SENDS being pending (left "
                                     "to the due-scan)"),
    "audit_entries_total": Series("counter", "audit log entries written"),
    "audit_write_failures_total": Series(
        "counter", "audit log entries lost, by reason: error or cancelled (the write), "
        "overflow (TRIGGER_AUDIT_MAX_PENDING in flight), caller_share (its caller's share "
        "of them in flight)", ("reason",)),
    "audit_creates_total": Series("counter", "creates counted, not logged (without "
                                  "TRIGGER_AUDIT_CREATES)"),
    "rate_limited_total": Series("counter", "requests refused 429 rate_limited", ("caller",),
                                 durable=()),
    "rate_limit_errors_total": Series("counter", "rate checks that failed open (Redis)"),
    "registration_write_retries_total": Series(
        "counter", "registration writes repeated after a timeout (outcome unknown)"),
    "registration_outcome_unknown_total": Series(
        "counter", "registrations answered 503 outcome_unknown (every repeat timed out)"),
    "quota_exceeded_total": Series("counter", "registrations refused 429 quota_exceeded",
                                   ("caller",), durable=()),
    "quota_errors_total": Series("counter", "pending-quota checks that failed open (Redis)"),
    "budget_exhausted_total": Series("counter", "channels refused for a spent daily budget "
                                     "(registrations 429, sends not made)", ("caller", "type"),
                                     durable=()),
    "budget_errors_total": Series("counter", "daily-budget checks that failed open (Redis)"),
    "recipient_refused_total": Series("counter", "channel sends not made: the recipient is "
                                      "not allowed for the caller any more", ("type",)),
    "http_connections_refused_total": Series("counter", "connections over the cap (503)"),
    "http_connections_evicted_total": Series(
        "counter", "idle kept-alive connections closed for a new one at the cap"),
    "http_caller_connections_refused_total": Series(
        "counter", "requests refused 429 too_many_connections (a caller at its share)"),
    "http_anonymous_idle_closed_total": Series(
        "counter", "kept-alive connections no principal used, closed when idle"),
    "http_head_timeouts_total": Series("counter", "connections closed 408 for a slow head"),
    "http_request_duration_seconds": Series(
        "histogram", "API request latency by route pattern, method and status",
        ("route", "method", "status"), buckets=REQUEST_BUCKETS_S),
    "sqs_calls_total": Series("counter", "SQS requests by operation (send, delete, receive, "
                              "change_visibility, ...)", ("operation",)),
    "sqs_batch_messages": Series(
        "histogram", "messages per SQS request (send, delete, change_visibility: carried; "
        "receive: got)", ("operation",), buckets=SQS_BATCH_BUCKETS),
    "sqs_triggers_sent_total": Series(
        "counter", "triggers carried by the messages sent to the main queue (a pack carries "
        "many: divided by the messages sent, triggers per message)"),
}


def _key(name: str, labels: dict[str, str]) -> str:
    if not labels:
        return name
    inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return f"{name}{{{inner}}}"


Metric = PromCounter | Gauge | Histogram


class PrometheusMetrics:
    """The service's metrics; cheap, in-process, never raises for a metric call."""

    def __init__(self, multiproc_dir: Path | None = None) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._multiproc_dir = multiproc_dir
        self._metrics: dict[str, tuple[Metric, tuple[str, ...]]] = {}
        self._counts: Counter[str] = Counter()
        self._children: dict[object, Metric] = {}

    def inc(self, name: str, amount: int = 1, **labels: str) -> None:
        series = SERIES.get(name) or Series("counter", name, tuple(sorted(labels)))
        durable = labels if series.durable is None else {
            k: v for k, v in labels.items() if k in series.durable}
        self._counts[_key(name, durable)] += amount
        if "caller" in labels and "caller" not in durable:
            # Also kept per caller, for that caller's own GET /v1/stats.
            self._counts[_key(name, {**durable, "caller": labels["caller"]})] += amount
        metric = self._metric(name, series, labels)
        assert isinstance(metric, PromCounter)
        metric.inc(amount)

    def observe(self, name: str, value: float, **labels: str) -> None:
        series = SERIES.get(name) or Series("histogram", name, tuple(sorted(labels)))
        metric = self._metric(name, series, labels)
        assert isinstance(metric, Histogram)
        metric.observe(value)

    def set(self, name: str, value: float, **labels: str) -> None:
        series = SERIES.get(name) or Series("gauge", name, tuple(sorted(labels)))
        metric = self._metric(name, series, labels)
        assert isinstance(metric, Gauge)
        metric.set(value)

    def remove(self, name: str, **labels: str) -> None:
        # (In multiprocess mode prometheus_client's file keeps this process's last value,
        # so the host's aggregate shows it until the process ends; its own registry forgets.)
        found = self._metrics.get(name)
        key = (name, *sorted(labels.items())) if labels else name
        if found is None or self._children.pop(key, None) is None:
            return
        metric, names = found
        if names:
            metric.remove(*(labels.get(n, "") for n in names))

    def snapshot(self) -> dict[str, int]:
        return dict(self._counts)

    def exposition(self, *, aggregate: bool = False) -> bytes:
        """Prometheus' text format: this object's series, or with ``aggregate`` in
        multiprocess mode every process's on this host (live ones for the gauges)."""
        if aggregate and self._multiproc_dir is not None:
            registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(  # type: ignore[no-untyped-call]
                registry, path=str(self._multiproc_dir))
            return generate_latest(registry)
        return generate_latest(self.registry)

    async def close(self) -> None:
        """In multiprocess mode: drop this process's live gauges (it is going away)."""
        if self._multiproc_dir is not None:
            multiprocess.mark_process_dead(  # type: ignore[no-untyped-call]
                os.getpid(), str(self._multiproc_dir))

    def _metric(self, name: str, series: Series, labels: dict[str, str]) -> Metric:
        # The labelled child, cached: prometheus_client's labels() takes a lock and
        # validates on every call, and the dispatcher asks several times per delivery.
        key = (name, *sorted(labels.items())) if labels else name
        child = self._children.get(key)
        if child is not None:
            return child
        found = self._metrics.get(name)
        if found is None:
            found = self._metrics[name] = (self._create(name, series), series.labels)
        metric, names = found
        child = metric.labels(*(labels.get(n, "") for n in names)) if names else metric
        self._children[key] = child
        return child

    def _create(self, name: str, s: Series) -> Metric:
        common = {"namespace": NAMESPACE, "registry": self.registry, "labelnames": s.labels}
        if s.kind == "counter":
            return PromCounter(name, s.help, **common)  # type: ignore[arg-type]
        if s.kind == "gauge":
            return Gauge(name, s.help, multiprocess_mode=s.mode, **common)  # type: ignore[arg-type]
        return Histogram(name, s.help, buckets=s.buckets, **common)  # type: ignore[arg-type]


class InMemoryMetrics(PrometheusMetrics):
    """The fake for tests: a private registry, plus every observation and gauge value kept
    for assertions (``observed("fire_lag_seconds")``, ``gauges['breaker_state{...}']``)."""

    def __init__(self) -> None:
        super().__init__()
        self.observations: defaultdict[str, list[float]] = defaultdict(list)
        self.gauges: dict[str, float] = {}

    def observe(self, name: str, value: float, **labels: str) -> None:
        super().observe(name, value, **labels)
        self.observations[_key(name, labels)].append(value)

    def set(self, name: str, value: float, **labels: str) -> None:
        super().set(name, value, **labels)
        self.gauges[_key(name, labels)] = value

    def remove(self, name: str, **labels: str) -> None:
        super().remove(name, **labels)
        self.gauges.pop(_key(name, labels), None)

    def observed(self, name: str) -> list[float]:
        """Every value observed for ``name``, whatever its labels."""
        return [v for key, values in self.observations.items()
                if key == name or key.startswith(name + "{") for v in values]


def counter_caller(key: str) -> str | None:
    """The ``caller`` label of a durable counter's key (``snapshot``), None without one."""
    _, brace, inner = key.partition("{")
    if not brace:
        return None
    for pair in inner.rstrip("}").split('",'):
        label, _, value = pair.partition('="')
        if label == "caller":
            return value.rstrip('"')
    return None


def caller_counters(counters: dict[str, int], caller: str) -> dict[str, int]:
    """The durable counters of one caller's own (those labelled with its name)."""
    return {k: v for k, v in counters.items() if counter_caller(k) == caller}


def metrics_authorized(authorization: str, token: str) -> bool:
    """Whether a ``/metrics`` request with this ``Authorization`` header may read: any when
    ``TRIGGER_METRICS_TOKEN`` is unset, else ``Bearer <token>`` (compared in constant time)."""
    if not token:
        return True
    scheme, _, given = authorization.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(),
                                                              token.encode())
