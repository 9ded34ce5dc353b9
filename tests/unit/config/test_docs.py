"""The README documents every setting (it is what operators read)."""

from __future__ import annotations

from trigger_service.config.production_needs import production_table
from trigger_service.config.settings import REPO_ROOT, VARIABLES


def test_readme_lists_every_setting_with_its_default() -> None:
    readme = (REPO_ROOT / "README.md").read_text()
    assert readme.index("make up") < readme.index("## API")
    for v in VARIABLES:
        assert f"| `{v.name}` | `{v.default}` |" in readme, v.name


def test_readme_production_table_is_generated_from_the_production_needs() -> None:
    readme = (REPO_ROOT / "README.md").read_text()
    section = readme[readme.index("### Production"):]
    assert production_table() in section[:section.index("\n## ")]
