"""The docs site documents every setting (it is what operators read), with tables generated
from ``settings.VARIABLES`` (``settings_docs``) and ``production_needs`` (the pages hold their
output; these tests fail when a page and the code disagree)."""

from __future__ import annotations

from trigger_service.config.aliases import renamed_table
from trigger_service.config.production_needs import PRODUCTION_NEEDS, production_table
from trigger_service.config.settings import REPO_ROOT, VARIABLES
from trigger_service.config.settings_docs import markdown_table, tuning_table

DOCS = REPO_ROOT / "docs"


def test_settings_page_holds_the_generated_table_of_every_setting() -> None:
    page = (DOCS / "operations" / "settings.md").read_text()
    assert markdown_table() in page
    for v in VARIABLES:
        assert f"| `{v.name}` | {v.default_cell} |" in page, v.name


def test_settings_page_holds_the_tuning_table_by_process_and_the_renamed_names() -> None:
    page = (DOCS / "operations" / "settings.md").read_text()
    assert tuning_table() in page and renamed_table() in page
    tuning = tuning_table()
    must = {name for name, _ in PRODUCTION_NEEDS}
    for v in VARIABLES:  # every setting is in exactly one of the two tables
        assert (f"| `{v.name}` |" in tuning) != (v.name in must), v.name


def test_production_page_holds_the_generated_production_table() -> None:
    page = (DOCS / "operations" / "production.md").read_text()
    assert production_table() in page


def test_readme_starts_with_the_two_commands_and_stays_short() -> None:
    readme = (REPO_ROOT / "README.md").read_text()
    assert readme.index("make up") < readme.index("make test") < readme.index("## Five-minute")
    assert readme.count("\n") <= 300
