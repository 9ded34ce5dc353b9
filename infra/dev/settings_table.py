"""Rewrite the docs' generated tables from the code (run after adding or changing a setting):
``.venv/bin/python infra/dev/settings_table.py``. The settings table and the
"tuning by process" table of ``docs/operations/settings.md`` come from ``settings.VARIABLES``
(and ``config.tuning``), the production table of
``docs/operations/production.md`` from ``production_needs``; ``tests/unit/config/test_docs.py``
fails while a page and the code disagree."""

from __future__ import annotations

import re

from trigger_service.config.aliases import renamed_table
from trigger_service.config.production_needs import production_table
from trigger_service.config.settings import REPO_ROOT, markdown_table
from trigger_service.config.tuning import tuning_table

PAGES = (
    ("operations/settings.md", r"variable \| default \| meaning", markdown_table),
    ("operations/production.md", r"variable \| default \| production needs", production_table),
    ("operations/settings.md", r"process \| variable \| default \| meaning", tuning_table),
    ("operations/settings.md", r"old name \(deprecated\) \| new name", renamed_table),
)
for page, header, make in PAGES:
    path = REPO_ROOT / "docs" / page
    text = path.read_text()
    table = re.compile(rf"^\| {header} \|\n(?:\|.*\|\n)+", re.M)
    assert table.search(text), f"no generated table in docs/{page}"
    path.write_text(table.sub(lambda _, make=make: make() + "\n", text, count=1))
