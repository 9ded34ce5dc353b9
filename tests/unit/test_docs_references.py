"""What the docs name exists: every ``TRIGGER_*`` variable the pages, the README and the
changelog mention is a current setting, a deprecated alias (``config.aliases.RENAMED``) or a
retired name listed with its reason; every repository path they quote in backticks is in the
repository; and the architecture page's module map names every module of the use cases and
the three background processes."""

from __future__ import annotations

import re
from pathlib import Path

from trigger_service.config.aliases import RENAMED
from trigger_service.config.settings import (
    CLIENT_VARIABLES,
    REPO_ROOT,
    RETIRED_VARIABLES,
    VARIABLES,
)

PAGES = sorted(
    [*(REPO_ROOT / "docs").rglob("*.md"), REPO_ROOT / "README.md", REPO_ROOT / "CHANGELOG.md"])

# Names gone before the settings kept a retired list, with why a page may still name them.
RETIRED_EARLIER = {
    "TRIGGER_CANCEL_FENCE_MS": "retired when the claim's lease became the fence around a send",
}

NAME = re.compile(r"\bTRIGGER_[A-Z0-9_]+")
PATH_ROOTS = ("trigger_service/", "dispatcher/", "sweeper/", "reconciler/", "infra/", "bench/",
              "docs/", "tests/", "config/", "deploy/", "clients/", "localstack/")
# Paths a page may name before they exist (written by others, or made by a run).
MAY_BE_MISSING = re.compile(r"^(var/|\.cache/|deploy/|bench/results/.+\.json$)")
CODE = re.compile(r"`([^`\s]+)`")


def known_names() -> set[str]:
    return ({v.name for v in VARIABLES} | set(RENAMED) | set(RETIRED_VARIABLES)
            | CLIENT_VARIABLES | set(RETIRED_EARLIER))


def test_every_trigger_variable_a_page_names_exists() -> None:
    known = known_names()
    unknown = []
    for page in PAGES:
        for name in set(NAME.findall(page.read_text())):
            if name.endswith("_"):  # a family: TRIGGER_SMTP_*
                ok = any(k.startswith(name) for k in known)
            else:
                ok = name in known
            if not ok:
                unknown.append(f"{page.relative_to(REPO_ROOT)}: {name}")
    assert unknown == []


def quoted_paths(text: str) -> set[str]:
    paths = set()
    for quoted in CODE.findall(text):
        path = quoted.rstrip(".,:;)").split("::")[0]
        if not path.startswith(PATH_ROOTS) or any(c in path for c in "*<>{}…$"):
            continue
        if "/" in path.rstrip("/") and (path.endswith("/") or Path(path).suffix):
            paths.add(path)
    return paths


def test_every_repository_path_a_page_quotes_exists() -> None:
    missing = [f"{page.relative_to(REPO_ROOT)}: {path}"
               for page in PAGES for path in sorted(quoted_paths(page.read_text()))
               if not (REPO_ROOT / path).exists() and not MAY_BE_MISSING.match(path)]
    assert missing == []


def test_the_module_map_names_every_module() -> None:
    page = (REPO_ROOT / "docs" / "architecture.md").read_text()
    modules = [p for folder in ("trigger_service/app", "dispatcher", "sweeper", "reconciler")
               for p in sorted((REPO_ROOT / folder).rglob("*.py")) if p.name != "__init__.py"]
    assert modules
    unnamed = [str(p.relative_to(REPO_ROOT)) for p in modules
               if f"`{p.relative_to(REPO_ROOT)}`" not in page]
    assert unnamed == []
