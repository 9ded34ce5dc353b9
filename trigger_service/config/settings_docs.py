"""The settings as docs/operations/settings.md shows them, made from ``settings.VARIABLES``:
the table of every setting (``markdown_table``) and the "tuning by process" tables
(``tuning_table``), which leave out what production must set (``production_needs``:
docs/operations/production.md has those). ``infra/dev/settings_table.py`` writes them into
the page; tests/unit/config/test_docs.py fails while the page and the code disagree.
"""

from __future__ import annotations

from trigger_service.config.production_needs import PRODUCTION_NEEDS
from trigger_service.config.settings import VARIABLES

# Which process reads which settings: a variable's section names it (``TRIGGER_<SECTION>_``),
# and this maps sections onto the processes of a deployment. Process → the sections it alone
# reads (in the order a reader meets them). The top-level settings (no section) and the
# stores' sections are read by every process. A process is a heading of the section.
PROCESS_SECTIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("API (`trigger-api`)", ("api", "limits", "inbox", "audit")),
    ("dispatcher (`trigger-dispatcher`)",
     ("dispatch", "endpoint_health", "smtp", "email", "sms", "push", "telegram")),
    ("sweeper (`trigger-sweeper`)", ("sweep", "heal")),
    ("reconciler (`trigger-reconciler`)", ("reconcile",)),
    ("every process", ("", "cassandra", "sqs", "redis", "encryption", "events")),
)


def markdown_table() -> str:
    """The "every setting" table of ``docs/operations/settings.md``, in ``VARIABLES``
    order."""
    rows = ["| variable | default | meaning |", "|---|---|---|"]
    rows += [f"| `{v.name}` | {v.default_cell} | {v.help} |" for v in VARIABLES]
    return "\n".join(rows)


def tuning_table() -> str:
    """The "tuning by process" section: per process a heading and a table of every setting
    production need not set that it reads."""
    must = {name for name, _ in PRODUCTION_NEEDS}
    parts = []
    for process, sections in PROCESS_SECTIONS:
        rows = [f"### {process}", "", "| variable | default | meaning |", "|---|---|---|"]
        rows += [f"| `{v.name}` | {v.default_cell} | {v.help} |"
                 for section in sections for v in VARIABLES
                 if v.target[0] == section and v.name not in must]
        parts.append("\n".join(rows))
    return "\n\n".join(parts)
