"""Rewrite the docs' generated tables from the code (run after adding or changing a setting):
``.venv/bin/python infra/dev/settings_table.py``. The one settings table of
``docs/operations/settings.md`` (grouped by process) comes from ``settings.VARIABLES``
(``config.settings_docs``), the production table of
``docs/operations/production.md`` from ``production_needs``; ``tests/unit/config/test_docs.py``
fails while a page and the code disagree."""

from __future__ import annotations

import re
from collections.abc import Callable

from trigger_service.config.aliases import renamed_table
from trigger_service.config.production_needs import production_table
from trigger_service.config.settings import REPO_ROOT
from trigger_service.config.settings_docs import settings_table

# Each generated block sits between `<!-- generated: NAME -->` and `<!-- end: NAME -->`.
PAGES: tuple[tuple[str, str, Callable[[], str]], ...] = (
    ("operations/settings.md", "settings", settings_table),
    ("operations/settings.md", "renamed", renamed_table),
    ("operations/production.md", "production", production_table),
)
for page, name, make in PAGES:
    path = REPO_ROOT / "docs" / page
    text = path.read_text()
    block = re.compile(rf"(<!-- generated: {name} -->\n).*?(<!-- end: {name} -->)", re.S)
    assert block.search(text), f"no generated block {name} in docs/{page}"
    start, end = block.search(text).span()  # type: ignore[union-attr]  # asserted above
    path.write_text(text[:start] + f"<!-- generated: {name} -->\n\n{make()}\n\n"
                    f"<!-- end: {name} -->" + text[end:])
