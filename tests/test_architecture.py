"""The package's structure: layers without import cycles, small modules, and a
documentation that cites only what the repository and the published paper contain."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import invimbed

PACKAGE = Path(invimbed.__file__).parent
ROOT = PACKAGE.parent
MAX_LINES = 500


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _imports(name: str, top_level_only: bool = False) -> set[str]:
    """Modules of the package that ``name`` imports: at any level (imports inside
    functions included), or at module level only."""
    path = MODULES[name]
    is_pkg = path.name == "__init__.py"
    found = set()
    tree = ast.parse(path.read_text())
    for node in (tree.body if top_level_only else ast.walk(tree)):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_pkg else name.split(".")[:-1]
                base = base[:len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target in MODULES:
                found.add(target)
            for alias in node.names:
                if f"{target}.{alias.name}" in MODULES:
                    found.add(f"{target}.{alias.name}")
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name in MODULES)
    found.discard(name)
    return found


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles():
    graph = {name: _imports(name) for name in MODULES}
    # a package's __init__ importing its own submodules is how packages re-export; a
    # submodule importing its package's __init__ back is the cycle we forbid
    assert _cycles(graph) == []


def test_core_does_not_import_applications_or_backends_at_module_level():
    """The core layer is usable without the layers above it."""
    upper = ("invimbed._control", "invimbed._learning", "invimbed.nn", "invimbed.experiments",
             "invimbed.data", "invimbed.dask")
    offenders = [f"{name} imports {target}"
                 for name in MODULES if name.startswith("invimbed._core")
                 for target in _imports(name, top_level_only=True)
                 if target.startswith(upper)]
    assert offenders == []


def test_modules_are_small_or_say_why():
    too_long = []
    for name, path in MODULES.items():
        text = path.read_text()
        if text.count("\n") <= MAX_LINES:
            continue
        doc = ast.get_docstring(ast.parse(text)) or ""
        if "Why this module is long" not in doc:
            too_long.append(f"{name} ({text.count(chr(10))} lines)")
    assert too_long == []


# Files of the product: the package, its docs, examples, benchmarks, README, CHANGELOG.
PRODUCT = ([*PACKAGE.rglob("*.py"), *(ROOT / "docs").rglob("*.md"), *(ROOT / "examples").glob("*.py"),
            *(ROOT / "benchmarks").glob("*.py"), ROOT / "README.md"])


@pytest.mark.parametrize("pattern, what", [
    (r"DESIGN\.md", "a design note the repository does not contain"),
    (r"(?<!pytorch )\bissues? #?\d{1,3}\b", "an issue number of ours"),
    (r"\beqs?\. [a-z]+-[a-z-]+\b", "a LaTeX equation label instead of its published number"),
    (r"\bsec\. [a-z]+-[a-z-]+\b", "a LaTeX section label instead of its published number"),
])
def test_docs_cite_only_what_exists(pattern, what):
    hits = []
    for path in PRODUCT:
        if not path.exists():
            continue
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(pattern, line, flags=re.IGNORECASE):
                hits.append(f"{path.relative_to(ROOT)}:{i}: {line.strip()[:80]}")
    assert hits == [], f"{what}:\n" + "\n".join(hits)
