"""Settings of the sweeper process's two loops and of the reconciler: sections ``sweep`` (the
promotion of far-future buckets), ``heal`` (the due-scan that re-sends what leaked) and
``reconcile`` (the deep safety net) of ``settings.Settings``; ``SWEEP_VARIABLES`` are their
rows of ``settings.VARIABLES``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trigger_service.config.parsers import pos_float as _pos_float
from trigger_service.config.parsers import pos_int as _pos_int

Row = tuple[str, tuple[str, str], Callable[[str], Any], str]


@dataclass(frozen=True)
class SweepSettings:
    interval_s: float = 30.0
    horizon_s: int = 120
    promote_ahead_s: int = 30
    lease_ttl_s: float = 2.0
    lookback_s: int = 3600
    tick_ms: int = 10
    group: str = "main"
    metrics_port: int = 9111


@dataclass(frozen=True)
class HealSettings:
    """The sweeper's due-scan over its shards' recent past."""

    interval_s: float = 5.0
    lookback_s: int = 900
    overdue_grace_s: int = 10


@dataclass(frozen=True)
class ReconcileSettings:
    """The reconciler's passes over every shard's older past."""

    interval_s: float = 3600.0
    grace_s: int = 3600
    window_s: int = 7_200
    lookback_h: int = 48


SWEEP_VARIABLES: tuple[Row, ...] = (
    ("TRIGGER_SWEEP_INTERVAL_S", ("sweep", "interval_s"), _pos_float,
             "how often a sweeper reads its shards' due buckets"),
    ("TRIGGER_SWEEP_HORIZON_S", ("sweep", "horizon_s"), _pos_int,
             "each sweep reads up to now + this; must stay below TRIGGER_DIRECT_MAX_DELAY_S"),
    ("TRIGGER_SWEEP_PROMOTE_AHEAD_S", ("sweep", "promote_ahead_s"), _pos_int,
             "the timing wheel hands a trigger to SQS this long before its fire time (SQS keeps "
             "it hidden until TRIGGER_SQS_ENQUEUE_LEAD_S before)"),
    ("TRIGGER_SWEEP_LEASE_TTL_S", ("sweep", "lease_ttl_s"), _pos_float,
             "shard lease TTL; a dead sweeper's shards are taken over within it"),
    ("TRIGGER_SWEEP_LOOKBACK_S", ("sweep", "lookback_s"), _pos_int,
             "a shard with no saved cursor is swept from now minus this"),
    ("TRIGGER_SWEEP_GROUP", ("sweep", "group"), str,
             "sweepers with the same group share the shards (names their leases and cursors)"),
    ("TRIGGER_SWEEP_TICK_MS", ("sweep", "tick_ms"), _pos_int, "timing wheel tick"),
    ("TRIGGER_RECONCILE_INTERVAL_S", ("reconcile", "interval_s"), _pos_float,
             "how often the reconciler runs a pass"),
    ("TRIGGER_RECONCILE_GRACE_S", ("reconcile", "grace_s"), _pos_int,
             "a trigger this far past its due time and still PENDING (or stale IN_FLIGHT) is a "
             "leak"),
    ("TRIGGER_RECONCILE_WINDOW_S", ("reconcile", "window_s"), _pos_int,
             "how far back (before the grace) the reconciler's first pass on a shard reads; "
             "later passes go on from the shard's saved cursor"),
    ("TRIGGER_RECONCILE_LOOKBACK_H", ("reconcile", "lookback_h"), _pos_int,
             "the reconciler's cursors never fall further back than this: anything still "
             "open within it is looked at on every pass"),
    ("TRIGGER_HEAL_OVERDUE_GRACE_S", ("heal", "overdue_grace_s"), _pos_int,
             "a trigger PENDING this long past its due time (or IN_FLIGHT with a claim stale "
             "this long) has leaked: the owner of its shard re-sends it"),
    ("TRIGGER_HEAL_INTERVAL_S", ("heal", "interval_s"), _pos_float,
             "how often each sweeper's due-scan looks at its shards' recent past"),
    ("TRIGGER_HEAL_LOOKBACK_S", ("heal", "lookback_s"), _pos_int,
             "how far back a sweeper's due-scan starts on a shard it has just taken"),
    ("TRIGGER_SWEEP_METRICS_PORT", ("sweep", "metrics_port"), _pos_int,
             "a sweeper's own /metrics port, 0 = none (infra/app.sh gives its Nth sweeper "
             "this + N - 1)"),
)
