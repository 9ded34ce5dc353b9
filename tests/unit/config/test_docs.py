"""The docs site documents every setting (it is what operators read), with tables generated
from ``settings.VARIABLES`` (``settings_docs``) and ``production_needs`` (the pages hold their
output; these tests fail when a page and the code disagree)."""

from __future__ import annotations

from trigger_service.config.aliases import renamed_table
from trigger_service.config.production_needs import PRODUCTION_NEEDS, production_table
from trigger_service.config.settings import REPO_ROOT, VARIABLES
from trigger_service.config.settings_docs import PRODUCTION_MARK, settings_table

DOCS = REPO_ROOT / "docs"


def test_settings_page_holds_one_generated_table_of_every_setting_by_process() -> None:
    page = (DOCS / "operations" / "settings.md").read_text()
    table = settings_table()
    assert table in page and renamed_table() in page
    must = {name for name, _ in PRODUCTION_NEEDS}
    for v in VARIABLES:  # every setting once, production's marked
        assert page.count(f"| `{v.name}` | {v.default_cell} |") == 1, v.name
        row = next(line for line in table.splitlines() if line.startswith(f"| `{v.name}` |"))
        assert (PRODUCTION_MARK in row) == (v.name in must), v.name


def test_production_page_holds_the_generated_production_table() -> None:
    page = (DOCS / "operations" / "production.md").read_text()
    assert production_table() in page


def test_readme_starts_with_the_two_commands_and_leaves_the_rest_to_the_site() -> None:
    readme = (REPO_ROOT / "README.md").read_text()
    assert readme.index("make up") < readme.index("make test") < readme.index("## What it is")
    assert "docs/getting-started.md" in readme
    # No second copy of the tutorial: the tour is on the site only.
    assert "Five-minute" not in readme and "triggerctl create" not in readme
    assert readme.count("\n") <= 60
