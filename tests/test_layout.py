"""The package's shape, as its next maintainer relies on it: no module over 500 lines, no circle
among the imports of its modules, and no module reaching into another's underscore names (what
one module needs of another is that module's API)."""

from __future__ import annotations

import ast
import pathlib

import pytest

pytestmark = pytest.mark.core

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "jax_gather"
MODULES = {
    ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__"): path
    for path in sorted(PACKAGE.rglob("*.py"))
}
MAX_LINES = 500


def _imports(name: str, path: pathlib.Path) -> list[tuple[str, str | None, bool]]:
    """(module imported, name taken from it or None, at module level) for each import of a module
    of the package; ``from jax_gather import x`` imports the module ``jax_gather.x`` where it is one."""
    tree = ast.parse(path.read_text())
    top = {id(node) for node in tree.body}
    found = []
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(a.name, None, id(node) in top) for a in node.names if a.name in MODULES]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package, up level - 1
                parts = package.split(".")
                base = ".".join([*parts[: len(parts) - node.level + 1], base]).strip(".")
            if base not in MODULES:
                continue
            for alias in node.names:
                child = f"{base}.{alias.name}"
                if child in MODULES:
                    found.append((child, None, id(node) in top))
                else:
                    found.append((base, alias.name, id(node) in top))
    return found


def _private_attributes(path: pathlib.Path, modules: dict[str, str]) -> list[str]:
    """``m._name`` where ``m`` is a local name bound to another module of the package."""
    uses = []
    for node in ast.walk(ast.parse(path.read_text())):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in modules
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
        ):
            uses.append(f"{modules[node.value.id]}.{node.attr}")
    return uses


def _bound_modules(path: pathlib.Path) -> dict[str, str]:
    """Local names bound to modules of the package by ``from jax_gather import x`` or ``import``."""
    bound = {}
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module in MODULES and not node.level:
            for alias in node.names:
                if f"{node.module}.{alias.name}" in MODULES:
                    bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return bound


def test_the_layout_sees_the_package():
    assert {"jax_gather.ops", "jax_gather.plans", "jax_gather.bench.grid"} <= set(MODULES)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_module_is_over_500_lines(name):
    lines = len(MODULES[name].read_text().splitlines())
    assert lines <= MAX_LINES, f"{name} has {lines} lines: split it along its jobs"


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_module_uses_another_modules_private_names(name):
    path = MODULES[name]
    taken = [f"{module}.{what}" for module, what, _ in _imports(name, path) if what and what.startswith("_")]
    taken = [t for t in taken if t.rpartition(".")[0] != name]
    reached = [u for u in _private_attributes(path, _bound_modules(path)) if u.rpartition(".")[0] != name]
    assert not taken + reached, f"{name} uses private names of other modules: {taken + reached}"


def _circle(graph: dict[str, set[str]]) -> list[str] | None:
    """A circle of ``graph`` (module -> the modules it imports at module level), or None; a
    package is its ``__init__``, so a module importing the package that imports it is one."""
    state: dict[str, str] = {}

    def visit(node: str, trail: list[str]) -> list[str] | None:
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return [*trail, node, nxt]
            if nxt not in state and (found := visit(nxt, [*trail, node])):
                return found
        state[node] = "done"
        return None

    for name in sorted(graph):
        if name not in state and (found := visit(name, [])):
            return found
    return None


def test_the_modules_import_each_other_without_a_circle():
    graph = {
        name: {m for m, _, at_top in _imports(name, path) if at_top and m != name and m in MODULES}
        for name, path in MODULES.items()
    }
    assert _circle(graph) is None, "import circle: " + " -> ".join(_circle(graph) or [])


def test_the_checks_find_what_they_look_for(tmp_path):
    # So that the checks passing above means something.
    assert _circle({"p": {"p.a"}, "p.a": {"p.b"}, "p.b": set()}) is None
    assert _circle({"p.a": {"p.b"}, "p.b": {"p.a"}}) == ["p.a", "p.b", "p.a"]
    assert _circle({"p": {"p.a"}, "p.a": {"p"}}) == ["p", "p.a", "p"]
    fake = tmp_path / "m.py"
    fake.write_text("from jax_gather import _eager\nx = _eager._calls\n")
    assert _private_attributes(fake, _bound_modules(fake)) == ["jax_gather._eager._calls"]


def test_the_suites_scheduler_names_files_that_exist():
    # conftest.py keeps the files that export through jax2onnx on one worker and starts the
    # longest first: a file renamed or moved would silently leave both.
    import importlib.util

    spec = importlib.util.spec_from_file_location("root_conftest", PACKAGE.parent / "conftest.py")
    conftest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conftest)
    missing = [p for p in sorted(conftest.EXPORTING) if not (PACKAGE.parent / p).is_file()]
    missing += [p for p in conftest.LONGEST_FIRST if p != "jax2onnx" and not (PACKAGE.parent / p).is_file()]
    assert not missing, f"conftest.py names files that are not there: {missing}"
    longest = conftest.LONGEST_FIRST
    assert "jax2onnx" in longest and len(set(longest)) == len(longest), longest
