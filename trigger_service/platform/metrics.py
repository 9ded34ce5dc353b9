"""In-process counters behind the ``Metrics`` port.

Names used:

- API: ``triggers_registered_total``, ``idempotent_replays_total``, ``enqueue_failures_total``,
  ``enqueue_slow_total`` (answered before SQS did);
- dispatcher: ``deliveries_total{outcome}``, ``duplicate_deliveries_total`` (our claim was
  taken over while we delivered), ``duplicate_messages_total`` (a redundant SQS copy),
  ``claim_takeovers_total``, ``dead_lettered_total``, ``circuit_open_deferrals_total``,
  ``bulkhead_deferrals_total``, ``message_refreshes_total`` (a deferred message replaced by
  a fresh copy to keep SQS's redrive budget), ``inbox_publish_failures_total`` (an inbox
  message stored but not pushed to the live streams);
- sweeper: ``promoted_total``, ``promotion_skipped_total`` (found cancelled or finished),
  ``promotion_retries_total``, ``shard_acquisitions_total``, ``overdue_resent_total`` (the
  due-scan healed a leak), ``heal_deferred_total`` (overdue, but SQS has a backlog);
- reconciler: ``leaks_reinjected_total``, ``reconcile_shard_failures_total``.
"""

from __future__ import annotations

from collections import Counter


class InMemoryMetrics:
    """Counters keyed by name and sorted labels, e.g. ``deliveries_total{outcome="fired"}``."""

    def __init__(self) -> None:
        self._counts: Counter[str] = Counter()

    def inc(self, name: str, amount: int = 1, **labels: str) -> None:
        if labels:
            inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
            name = f"{name}{{{inner}}}"
        self._counts[name] += amount

    def snapshot(self) -> dict[str, int]:
        return dict(self._counts)


def prometheus_text(snapshot: dict[str, int]) -> str:
    """Counters in Prometheus' text exposition format, one sample per line."""
    return "".join(f"{k} {v}\n" for k, v in sorted(snapshot.items()))
