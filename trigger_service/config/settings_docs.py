"""The settings as docs/operations/settings.md shows them, made from ``settings.VARIABLES``:
one table of every setting, grouped by the process that reads it (``settings_table``: per
process a heading and its rows, in ``VARIABLES`` order; what production must set
(``production_needs``) is marked, docs/operations/production.md says what to set it to).
``infra/dev/settings_table.py`` writes it into the page; tests/unit/config/test_docs.py fails
while the page and the code disagree.
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


PRODUCTION_MARK = "**production: set it** ([Production](production.md)). "


def process_of(section: str) -> str:
    """The heading of the process that reads the settings of ``section``."""
    for process, sections in PROCESS_SECTIONS:
        if section in sections:
            return process
    raise KeyError(f"section {section!r} of no process: add it to PROCESS_SECTIONS")


def settings_table() -> str:
    """The "every setting, by process" section of ``docs/operations/settings.md``: per process
    a heading and a table of every setting it reads, each setting in exactly one table."""
    must = {name for name, _ in PRODUCTION_NEEDS}
    for v in VARIABLES:
        process_of(v.target[0])  # every section has a process
    parts = []
    for process, sections in PROCESS_SECTIONS:
        rows = [f"### {process}", "", "| variable | default | meaning |", "|---|---|---|"]
        rows += [f"| `{v.name}` | {v.default_cell} | "
                 f"{PRODUCTION_MARK if v.name in must else ''}{v.help} |"
                 for section in sections for v in VARIABLES if v.target[0] == section]
        parts.append("\n".join(rows))
    return "\n\n".join(parts)
