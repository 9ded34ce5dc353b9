"""What a chaos run is: its sizes, its ports and the environment its processes get."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
VAR = ROOT / "var" / "chaos"
RESULTS = ROOT / "bench" / "results"

# The run's own names, so a developer's data, queues and shard leases are never touched.
ISOLATION_ENV = {
    "TRIGGER_CASSANDRA_KEYSPACE": "triggers_chaos",
    "TRIGGER_SQS_QUEUE": "chaos-triggers",
    "TRIGGER_SQS_DLQ": "chaos-triggers-dlq",
    "TRIGGER_SWEEP_GROUP": "chaos",
}

# Both tiers within a minute: fire times 5-20 s ahead go straight to SQS, later ones wait in
# Cassandra for a sweeper (settings.py: horizon + 1 <= direct limit, horizon - interval >=
# promote-ahead). Everything else keeps the defaults of `make up`.
TIER_ENV = {
    # The processes stack.APPS expects (infra/app.sh's default would follow the core count).
    "TRIGGER_API_WORKERS": "2",
    "TRIGGER_DISPATCH_PROCESSES": "2",
    "TRIGGER_DIRECT_MAX_DELAY_S": "20",
    "TRIGGER_SWEEP_HORIZON_S": "10",
    "TRIGGER_SWEEP_INTERVAL_S": "1",
    "TRIGGER_SWEEP_PROMOTE_AHEAD_S": "3",
}


# The short form runs in CI on a shared 2-core machine, where a killed process can take
# 10-15 s to come back: it heals faster so that its 30 s lag target is about the service,
# not about the machine's speed (the full form keeps the defaults). The callback timeout
# stays: shorter, a loaded dispatcher times out on answers that did arrive, and retries them.
SHORT_ENV = {
    "TRIGGER_HEAL_OVERDUE_GRACE_S": "5",
    "TRIGGER_HEAL_INTERVAL_S": "2",
}


@dataclass(frozen=True)
class RunConfig:
    """Sizes and ports of one run (the CLI fills it)."""

    triggers: int = 3000
    register_s: float = 30.0
    min_delay_s: float = 5.0
    spread_s: float = 60.0
    fault_every_s: float = 5.0
    first_fault_s: float = 3.0
    short: bool = False
    api_port: int = 8180
    receiver_port: int = 9180
    concurrency: int = 32
    settle_s: float = 45.0
    request_timeout_s: float = 15.0
    retry_for_s: float = 120.0
    seed: int = 7
    stamp: str = field(default_factory=lambda: time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()))
    out: Path | None = None

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    @property
    def receiver_prefix(self) -> str:
        return f"http://127.0.0.1:{self.receiver_port}/"

    @property
    def fault_window_s(self) -> float:
        """Faults are injected from first_fault_s up to this (seconds after the start):
        through the registration and the whole fire window but its last few seconds."""
        return self.register_s + self.min_delay_s + self.spread_s - 5.0

    @property
    def out_path(self) -> Path:
        return self.out or RESULTS / f"chaos-{self.stamp}.json"

    @property
    def callers_file(self) -> Path:
        return VAR / "callers.toml"


def process_env(cfg: RunConfig, ring_nodes: int) -> dict[str, str]:
    """The environment for the infra scripts and the service's processes: the caller's own
    (ports of the dependencies, CASSANDRA_NODES, ...), then the run's isolation and tiers."""
    env = dict(os.environ)
    env.update(ISOLATION_ENV)
    env.update(TIER_ENV)
    # Production is the service's default; this stack runs on LocalStack and its own tokens.
    env["TRIGGER_ENV"] = "development"
    env["TRIGGER_API_PORT"] = str(cfg.api_port)
    env["TRIGGER_API_HOST"] = "127.0.0.1"
    env["TRIGGER_API_CALLERS_FILE"] = str(cfg.callers_file)
    if cfg.short:
        for name, value in SHORT_ENV.items():
            env.setdefault(name, value)  # the caller's own setting wins
    if ring_nodes >= 3:
        # One node down must not make a third of the data unavailable.
        env.setdefault("TRIGGER_CASSANDRA_REPLICATION_FACTOR", "3")
        env.setdefault("CASSANDRA_NODES", str(ring_nodes))
    return env
