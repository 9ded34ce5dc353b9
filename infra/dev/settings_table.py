"""Rewrite the README's settings table from ``VARIABLES`` (run after adding a setting):
``.venv/bin/python infra/dev/settings_table.py``."""

from __future__ import annotations

import re

from trigger_service.config.settings import REPO_ROOT, markdown_table

readme = REPO_ROOT / "README.md"
text = readme.read_text()
table = re.compile(r"^\| variable \| default \| meaning \|\n(?:\|.*\|\n)+", re.M)
assert table.search(text), "no settings table in the README"
readme.write_text(table.sub(lambda _: markdown_table() + "\n", text, count=1))
