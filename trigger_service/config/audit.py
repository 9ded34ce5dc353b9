"""Settings of the audit log (section ``audit`` of ``settings.Settings``); ``AUDIT_VARIABLES``
are their rows of ``settings.VARIABLES``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trigger_service.config.parsers import flag
from trigger_service.config.parsers import pos_int as _pos_int

Row = tuple[str, tuple[str, str], Callable[[str], Any], str]


@dataclass(frozen=True)
class AuditSettings:
    retention_days: int = 90
    # Single creates are the bulk of the traffic: counted (audit_creates_total), not logged,
    # unless asked for.
    creates: bool = False
    # Entries written at once per API process (a caller's at most a quarter: app.audit);
    # beyond it an entry is dropped (and counted): a slow Cassandra must not grow the
    # process's memory with audit writes.
    max_pending: int = 1000

    @property
    def retention_s(self) -> int:
        return self.retention_days * 86_400


AUDIT_VARIABLES: tuple[Row, ...] = (
    ("TRIGGER_AUDIT_RETENTION_DAYS", ("audit", "retention_days"), _pos_int,
     "audit log entries expire this many days after they are written"),
    ("TRIGGER_AUDIT_CREATES", ("audit", "creates"), flag,
     "also log each create (POST /v1/triggers: one entry a trigger; the batch create: one "
     "entry a batch) with action create; otherwise creates are only counted"),
    ("TRIGGER_AUDIT_MAX_PENDING", ("audit", "max_pending"), _pos_int,
     "audit entries an API process writes at once, a caller at most a quarter of them; "
     "more are dropped and counted (audit_write_failures_total)"),
)
