"""The layout's rules, checked on the source: sizes, the direction of imports, and the
declared dependencies (each one used, every third-party import declared)."""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import re
import sys
import tomllib
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("trigger_service", "dispatcher", "sweeper", "reconciler")
# Size is a signal, not a rule to split by: a module past SOFT_MODULE_LINES is listed by
# test_modules_past_the_soft_size_are_few (look whether it holds two ideas; split by idea, not
# by length); past MAX_MODULE_LINES it fails (it certainly holds more than one).
SOFT_MODULE_LINES = 400
MAX_MODULE_LINES = 600
MAX_SOFT_OVERS = 5  # how many may be past the signal at once
MAX_FUNCTION_LINES = 60


def sources() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> Iterator[str]:
    """Every module ``path`` imports (also inside functions and ``TYPE_CHECKING``)."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module


def ours(name: str) -> bool:
    return name.split(".")[0] in PACKAGES


@pytest.mark.parametrize("path", sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_module_and_function_sizes(path: Path) -> None:
    text = path.read_text()
    assert len(text.splitlines()) <= MAX_MODULE_LINES
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            assert length <= MAX_FUNCTION_LINES, f"{node.name}: {length} lines"


def test_modules_past_the_soft_size_are_few() -> None:
    over = {str(p.relative_to(ROOT)): n for p in sources()
            if (n := len(p.read_text().splitlines())) > SOFT_MODULE_LINES}
    assert len(over) <= MAX_SOFT_OVERS, over


def test_few_loose_modules_at_the_top_of_trigger_service() -> None:
    loose = sorted(p.name for p in (ROOT / "trigger_service").glob("*.py"))
    assert loose == ["__init__.py", "__main__.py", "migrate.py"]  # the entry points


# Which of our modules each room may import (prefixes); dependencies point inward.
ALLOWED = {
    "trigger_service.core": ("trigger_service.core",),
    "trigger_service.config": ("trigger_service.core", "trigger_service.config"),
    "trigger_service.app": ("trigger_service.core", "trigger_service.config",
                            "trigger_service.app"),
    "trigger_service.adapters": ("trigger_service.core", "trigger_service.config",
                                 "trigger_service.adapters", "trigger_service.platform.logs"),
    "trigger_service.platform": ("trigger_service.core", "trigger_service.config",
                                 "trigger_service.platform", "trigger_service.adapters"),
    "trigger_service.http": ("trigger_service.core", "trigger_service.config",
                             "trigger_service.app", "trigger_service.platform",
                             "trigger_service.http"),
    "trigger_service.__main__": ("trigger_service",),
    "trigger_service.migrate": ("trigger_service",),
    "dispatcher": ("trigger_service.core", "trigger_service.config", "trigger_service.platform",
                   "dispatcher"),
    "sweeper": ("trigger_service.core", "trigger_service.config", "trigger_service.platform",
                "sweeper"),
    "reconciler": ("trigger_service.core", "trigger_service.config",
                   "trigger_service.platform", "reconciler"),
}


def room_of(module: str) -> str:
    return max((r for r in ALLOWED if module == r or module.startswith(r + ".")), key=len)


@pytest.mark.parametrize("path", sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_point_inward(path: Path) -> None:
    module = module_name(path)
    if module == "trigger_service":
        return
    allowed = ALLOWED[room_of(module)]
    bad = [i for i in imports(path)
           if ours(i) and not any(i == a or i.startswith(a + ".") for a in allowed)]
    assert not bad, f"{module} may not import {bad}"


# The in-memory fakes hold state no other process sees: a production process on one would
# quietly disagree with the rest (its own rate limits, breakers, inbox). Tests reach them
# (tests/fake_runtime.py); production modules may not, but for the ones listed here, each
# with the reason a fake is a real choice there. None is, today.
MEMORY = "trigger_service.adapters.memory"
MEMORY_ALLOWED: dict[str, str] = {}


@pytest.mark.parametrize("path", sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_production_modules_do_not_import_the_memory_fakes(path: Path) -> None:
    module = module_name(path)
    if module == MEMORY or module.startswith(MEMORY + ".") or module in MEMORY_ALLOWED:
        return
    fakes = [i for i in imports(path) if i == MEMORY or i.startswith(MEMORY + ".")]
    assert not fakes, f"{module} imports the in-memory fakes {fakes}"


def test_the_memory_allow_list_names_real_modules() -> None:
    assert set(MEMORY_ALLOWED) <= {module_name(p) for p in sources()}


def import_graph() -> dict[str, set[str]]:
    """Each of our modules → the modules of ours it imports, wherever in it: at module level,
    inside a function, and under ``if TYPE_CHECKING:`` too (a type-only import is still a
    dependency of the design, and a circle closed by one is a circle all the same: it is the
    guard such a circle usually hides behind). ``from package import name`` imports the
    submodule ``package.name`` when there is one, else the package."""
    modules = {module_name(p): p for p in sources()}
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                deps |= {a.name for a in node.names if a.name in modules}
            elif isinstance(node, ast.ImportFrom) and node.module in modules:
                deps |= {sub if (sub := f"{node.module}.{a.name}") in modules else node.module
                         for a in node.names}
        graph[module] = deps - {module}
    return graph


def import_cycle(graph: Mapping[str, set[str]]) -> list[str] | None:
    """A circle of ``graph``: its modules in import order, the first again at the end; None
    if there is none."""
    finished: set[str] = set()
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        if module in path:
            return [*path[path.index(module):], module]
        if module in finished:
            return None
        path.append(module)
        for dep in sorted(graph[module]):
            if (found := visit(dep)) is not None:
                return found
        path.pop()
        finished.add(module)
        return None

    return next((c for m in sorted(graph) if (c := visit(m)) is not None), None)


def test_import_cycle_finds_a_circle_and_only_a_circle() -> None:
    assert import_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert import_cycle({"a": {"b"}, "b": {"c"}, "c": {"b"}}) == ["b", "c", "b"]


def test_no_module_imports_itself_through_others() -> None:
    # A circle makes the import order matter (a name read before its module finished) and
    # ties its modules into one: none can be understood, tested or moved alone.
    found = import_cycle(import_graph())
    assert found is None, "import cycle: " + " -> ".join(found or [])


# A method a production class has only for its tests is behaviour production lacks: it belongs
# in tests/ (a subclass there, or the test reads the state another way). Told by name: a method
# is used when production or bench/ reads an attribute of its name anywhere, names it to
# getattr or hasattr, or a Protocol declares it (a port's member, called through the port);
# it is for tests only when it is not used and tests read it. So the check is generous: a
# method sharing its name with one production calls passes. The in-memory fakes are test
# doubles, all theirs is for tests. Listed here, "Class.method": why it stays.
TEST_ONLY_ALLOWED = {
    "ManualClock.advance_ms": "ManualClock is the Clock's test double, beside SystemClock",
    "InMemoryMetrics.observed": "InMemoryMetrics is the Metrics test double, beside "
                                "PrometheusMetrics",
    "StreamGate.open_streams": "tests count the streams of the gate the app made: no test "
                               "subclass can stand in for it",
    "RedisInboxBus.local_subscribers": "integration tests wait on it for a subscription to be "
                                       "live (then a publish is seen) on the bus Runtime.open "
                                       "made: no test subclass can stand in for it",
}


MEMORY_DIR = ROOT / MEMORY.replace(".", "/")


def production_classes() -> Iterator[tuple[Path, ast.ClassDef]]:
    for path in sources():
        if MEMORY_DIR not in path.parents:
            yield from ((path, n) for n in ast.walk(ast.parse(path.read_text()))
                        if isinstance(n, ast.ClassDef))


def is_protocol(c: ast.ClassDef) -> bool:
    bases = [b.value if isinstance(b, ast.Subscript) else b for b in c.bases]
    return any((isinstance(b, ast.Name) and b.id == "Protocol")
               or (isinstance(b, ast.Attribute) and b.attr == "Protocol") for b in bases)


def methods(c: ast.ClassDef) -> list[str]:
    return [f.name for f in c.body if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)]


def attributes_read(paths: Iterable[Path]) -> set[str]:
    """Every ``x.name`` in ``paths``, and every name given to getattr or hasattr as text."""
    names: set[str] = set()
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute):
                names.add(node.attr)
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                  and node.func.id in ("getattr", "hasattr") and len(node.args) > 1
                  and isinstance(node.args[1], ast.Constant)):
                names.add(str(node.args[1].value))
    return names


@functools.cache
def for_tests_only() -> dict[str, str]:
    """``Class.method`` → where it is defined, for every method only tests use."""
    classes = list(production_classes())
    used = attributes_read(p for p in [*sources(), *(ROOT / "bench").rglob("*.py")]
                           if MEMORY_DIR not in p.parents)
    used |= {m for _, c in classes if is_protocol(c) for m in methods(c)}
    in_tests = attributes_read((ROOT / "tests").rglob("*.py"))
    return {f"{c.name}.{m}": f"{path.relative_to(ROOT)}:{c.lineno}"
            for path, c in classes if not is_protocol(c) for m in methods(c)
            if not (m.startswith("__") and m.endswith("__")) and m not in used
            and m in in_tests}


def test_no_production_method_is_for_tests_only() -> None:
    found = {k: v for k, v in for_tests_only().items() if k not in TEST_ONLY_ALLOWED}
    assert not found, f"used by tests only (move it to tests/): {found}"


def test_the_test_only_allow_list_is_current() -> None:
    stale = set(TEST_ONLY_ALLOWED) - set(for_tests_only())
    assert not stale, f"no longer used by tests only (or gone): take them off the list: {stale}"


def third_party(path: Path) -> set[str]:
    return {i.split(".")[0] for i in imports(path)
            if not ours(i) and i.split(".")[0] not in sys.stdlib_module_names}


def test_core_imports_no_io_library() -> None:
    # Third-party imports the core may have, all pure computation: ULIDs, the zone rules'
    # data, RRULE and cron expansion, IDNA host names, dateparser (its `when` reading is given
    # the base time and zone: core/time/when.py), and OpenTelemetry's API (contexts and ids:
    # core/trace_context.py; its SDK and exporters, which do I/O, are platform's).
    for path in (ROOT / "trigger_service" / "core").rglob("*.py"):
        assert third_party(path) <= {"ulid", "tzdata", "dateutil", "croniter", "idna",
                                     "dateparser", "opentelemetry"}, path
        assert not [i for i in imports(path)
                    if i.startswith(("opentelemetry.sdk", "opentelemetry.exporter"))], path


def declared() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return {re.split(r"[<>=!~\[ ;]", d, maxsplit=1)[0].lower()
            for d in project["dependencies"]}


def distributions_of(module: str, dists: Mapping[str, list[str]]) -> set[str]:
    """The distributions that ship ``module``: its top-level package's, narrowed by their
    files when several share it (a namespace package such as ``opentelemetry``)."""
    candidates = dists[module.split(".")[0]]
    if len(candidates) == 1:
        return set(candidates)
    if "." not in module:  # `from opentelemetry import trace`: the names say, not the module
        return set()
    path = module.replace(".", "/")
    return {d for d in candidates
            if any(str(f) == path + ".py" or str(f).startswith(path + "/")
                   for f in importlib.metadata.files(d) or ())}


def test_every_third_party_import_is_declared_and_every_dependency_used() -> None:
    dists = importlib.metadata.packages_distributions()
    used = {d.lower() for p in sources() for i in imports(p)
            if not ours(i) and i.split(".")[0] not in sys.stdlib_module_names
            for d in distributions_of(i, dists)}
    assert used - declared() == set(), "imported but not declared"
    assert declared() - used == set(), "declared but not imported"


# Code and docs say what is and why, not which ticket of an outside tracker made it: a reader
# has no tracker to look the number up in. (As written here the pattern does not match
# itself: "issues?" is followed by a backslash, not by white space.)
TICKET_REFERENCE = re.compile(r"\bissues?\s+#?\d+", re.IGNORECASE)
PROSE_ROOTS = (*PACKAGES, "tests", "bench", "infra", "clients", "docs", "config", "localstack",
               "README.md", "Makefile", "pyproject.toml", "mkdocs.yml")
GENERATED = {"__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache"}


def prose_files() -> Iterator[Path]:
    """Every file under ``PROSE_ROOTS`` but what tools generate (caches, egg-info)."""
    for name in PROSE_ROOTS:
        top = ROOT / name
        for path in sorted(top.rglob("*")) if top.is_dir() else [top]:
            parts = path.relative_to(ROOT).parts
            if path.is_file() and not any(p in GENERATED or p.endswith(".egg-info")
                                          for p in parts):
                yield path


def test_no_file_cites_a_tracker_ticket() -> None:
    found = []
    for path in prose_files():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue  # images and other binary results
        found += [f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, m.start()) + 1}: {m[0]!r}"
                  for m in TICKET_REFERENCE.finditer(text)]
    assert not found, "say what it is and why instead of the ticket: " + "; ".join(found)
