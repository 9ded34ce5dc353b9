"""Settings of the sweepers and the reconciler (section ``sweep`` of ``settings.Settings``);
``SWEEP_VARIABLES`` are their rows of ``settings.VARIABLES``."""

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
    reconcile_interval_s: float = 3600.0
    reconcile_grace_s: int = 3600
    reconcile_window_s: int = 7_200
    reconcile_lookback_h: int = 48
    group: str = "main"
    overdue_grace_s: int = 10
    heal_interval_s: float = 5.0
    heal_lookback_s: int = 900
    metrics_port: int = 9111


SWEEP_VARIABLES: tuple[Row, ...] = (
    ("TRIGGER_SWEEP_INTERVAL_S", ("sweep", "interval_s"), _pos_float,
             "how often a sweeper reads its shards' due buckets"),
    ("TRIGGER_SWEEP_HORIZON_S", ("sweep", "horizon_s"), _pos_int,
             "each sweep reads up to now + this; must stay below TRIGGER_DIRECT_MAX_DELAY_S"),
    ("TRIGGER_SWEEP_PROMOTE_AHEAD_S", ("sweep", "promote_ahead_s"), _pos_int,
             "the timing wheel hands a trigger to SQS this long before its fire time (SQS keeps "
             "it hidden until TRIGGER_ENQUEUE_LEAD_S before)"),
    ("TRIGGER_LEASE_TTL_S", ("sweep", "lease_ttl_s"), _pos_float,
             "shard lease TTL; a dead sweeper's shards are taken over within it"),
    ("TRIGGER_SWEEP_LOOKBACK_S", ("sweep", "lookback_s"), _pos_int,
             "a shard with no saved cursor is swept from now minus this"),
    ("TRIGGER_SWEEP_GROUP", ("sweep", "group"), str,
             "sweepers with the same group share the shards (names their leases and cursors)"),
    ("TRIGGER_WHEEL_TICK_MS", ("sweep", "tick_ms"), _pos_int, "timing wheel tick"),
    ("TRIGGER_RECONCILE_INTERVAL_S", ("sweep", "reconcile_interval_s"), _pos_float,
             "how often the reconciler runs a pass"),
    ("TRIGGER_RECONCILE_GRACE_S", ("sweep", "reconcile_grace_s"), _pos_int,
             "a trigger this far past its due time and still PENDING (or stale IN_FLIGHT) is a "
             "leak"),
    ("TRIGGER_RECONCILE_WINDOW_S", ("sweep", "reconcile_window_s"), _pos_int,
             "how far back (before the grace) the reconciler's first pass on a shard reads; "
             "later passes go on from the shard's saved cursor"),
    ("TRIGGER_RECONCILE_LOOKBACK_H", ("sweep", "reconcile_lookback_h"), _pos_int,
             "the reconciler's cursors never fall further back than this: anything still "
             "open within it is looked at on every pass"),
    ("TRIGGER_OVERDUE_GRACE_S", ("sweep", "overdue_grace_s"), _pos_int,
             "a trigger PENDING this long past its due time (or IN_FLIGHT with a claim stale "
             "this long) has leaked: the owner of its shard re-sends it"),
    ("TRIGGER_HEAL_INTERVAL_S", ("sweep", "heal_interval_s"), _pos_float,
             "how often each sweeper's due-scan looks at its shards' recent past"),
    ("TRIGGER_HEAL_LOOKBACK_S", ("sweep", "heal_lookback_s"), _pos_int,
             "how far back a sweeper's due-scan starts on a shard it has just taken"),
    ("TRIGGER_SWEEPER_METRICS_PORT", ("sweep", "metrics_port"), _pos_int,
             "a sweeper's own /metrics port, 0 = none (infra/app.sh gives its Nth sweeper "
             "this + N - 1)"),
)
