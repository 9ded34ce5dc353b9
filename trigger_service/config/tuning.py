"""Which process reads which settings: a variable's section names it (``TRIGGER_<SECTION>_``),
and this table maps sections onto the processes of a deployment. docs/operations/settings.md's
"tuning by process" table is generated from it (``tuning_table()``), leaving out what
production must set (``production_needs``: docs/operations/production.md has those); a unit
test keeps the page in step.
"""

from __future__ import annotations

from trigger_service.config.production_needs import PRODUCTION_NEEDS
from trigger_service.config.settings import VARIABLES, Variable

# Process → the sections it alone reads (in the order a reader meets them). The top-level
# settings (no section) and the stores' sections are read by every process.
PROCESS_SECTIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("API (`trigger-api`)", ("api", "limits", "inbox")),
    ("dispatcher (`trigger-dispatcher`)",
     ("dispatch", "endpoint_health", "smtp", "email", "sms", "push", "telegram")),
    ("sweeper (`trigger-sweeper`)", ("sweep", "heal")),
    ("reconciler (`trigger-reconciler`)", ("reconcile",)),
    ("every process", ("", "cassandra", "sqs", "redis", "encryption")),
)


def process_of(v: Variable) -> str:
    """The process (row label of ``PROCESS_SECTIONS``) whose section holds ``v``."""
    return next(p for p, sections in PROCESS_SECTIONS if v.target[0] in sections)


def tuning_table() -> str:
    """The "tuning by process" table: every setting production need not set, grouped by the
    process that reads it (a process's name on its first row only)."""
    must = {name for name, _ in PRODUCTION_NEEDS}
    rows = ["| process | variable | default | meaning |", "|---|---|---|---|"]
    for process, sections in PROCESS_SECTIONS:
        label = process
        for section in sections:
            for v in VARIABLES:
                if v.target[0] == section and v.name not in must:
                    rows.append(f"| {label} | `{v.name}` | `{v.default}` | {v.help} |")
                    label = ""
    return "\n".join(rows)
