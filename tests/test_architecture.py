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


def _module_name(path: Path, root: Path = ROOT) -> str:
    rel = path.relative_to(root).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules(package: Path) -> dict[str, Path]:
    return {_module_name(p, package.parent): p for p in package.rglob("*.py")}


MODULES = _modules(PACKAGE)


def _imports(name: str, top_level_only: bool = False,
             modules: dict[str, Path] | None = None) -> set[str]:
    """Modules of the package that ``name`` imports: at any level (imports inside
    functions included), or at module level only."""
    modules = MODULES if modules is None else modules
    path = modules[name]
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
            subs = [f"{target}.{a.name}" for a in node.names
                    if f"{target}.{a.name}" in modules]
            found.update(subs)
            if target in modules and len(subs) < len(node.names):   # names of the package
                found.add(target)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name in modules)
    found.discard(name)
    return found


#: The layers of the package, lowest first: a module imports only its own subpackage
#: and the layers below its own (``""`` is the package's ``__init__``, the public API).
LAYERS = {
    "_progress": 0,
    "_core": 1,
    "_backends": 2,
    "_control": 3, "_learning": 3, "nn": 3, "dask": 3, "data": 3, "_demo": 3,
    "": 4,
    "experiments": 5,
    "__main__": 6,
}


def _part(name: str) -> str:
    """The subpackage (or top-level module) of module ``name``; ``""`` for the package."""
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else ""


def layer_violations(package: Path, layers: dict[str, int], part=_part,
                     peers: bool = False) -> list[str]:
    """Every import (at module level or inside a function) of ``package``'s modules that
    reaches a layer not below the importer's, and every part without a layer. ``part``
    names a module's layer (None: outside the check); with ``peers``, parts of one rank
    may import each other."""
    modules = _modules(package)
    found = [f"{name}: no layer for {part(name)!r}" for name in modules
             if part(name) is not None and part(name) not in layers]
    for name in modules:
        src = part(name)
        for target in _imports(name, modules=modules):
            dst = part(target)
            if src not in layers or dst not in layers or dst == src:
                continue
            if layers[dst] > layers[src] or (layers[dst] == layers[src] and not peers):
                found.append(f"{name} imports {target}")
    return sorted(set(found))


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


def test_every_layer_imports_only_below_itself():
    """The core knows no backend, optimal control, learning or application (it asks the
    registry `invimbed._core.runtime.backends` for a backend); nothing imports upwards, at module
    level or inside a function."""
    assert layer_violations(PACKAGE, LAYERS) == []
    assert {_part(name) for name in MODULES} == set(LAYERS)


#: The stages of the core (folders of ``invimbed._core``), lowest first, in the order a
#: solve meets them read backwards: a stage imports only itself and the stages below.
#: The sweep and the reference are peers (the sweep falls back on the reference; the
#: reference assembles its result as the sweep does), without a module cycle.
CORE_STAGES = {
    "results": 0,                          # status codes, result types, failure messages
    "inputs": 1,                           # checks of the user's arguments and functions
    "runtime": 2,                          # backend registry, array namespace, compile cost
    "derivatives": 3,                      # derivative providers
    "problem": 4,                          # BolzaProblem, from_sympy, open-loop controls
    "closures": 5, "integrators": 5,       # right-hand sides in depth; integration
    "setup": 6,                            # the arguments read once into a Setup
    "sweep": 7, "reference": 7,            # solve_imbedding; solve_adjoint
}


def _core_stage(name: str) -> str | None:
    """The stage folder of a module of ``_core`` (``""`` for ``_core`` itself); None
    outside the core."""
    parts = name.split(".")
    if len(parts) < 2 or parts[1] != "_core":
        return None
    return parts[2] if len(parts) > 3 or (len(parts) == 3 and parts[2] in CORE_STAGES) else ""


def test_core_stages_import_only_below_themselves():
    """A newcomer finds each stage of a solve by its folder, and the folders form layers."""
    stages = {**CORE_STAGES, "": max(CORE_STAGES.values()) + 1}
    assert layer_violations(PACKAGE, stages, part=_core_stage, peers=True) == []
    assert {_core_stage(n) for n in MODULES} - {None} == set(stages)


def test_stage_check_catches_an_upward_import(tmp_path):
    pkg = tmp_path / "pkg"
    for sub in ("_core", "_core/results", "_core/sweep"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "_core" / "results" / "types.py").write_text("from ..sweep import run\n")
    stages = {"results": 0, "sweep": 7, "": 8}
    assert layer_violations(pkg, stages, part=_core_stage, peers=True) == [
        "pkg._core.results.types imports pkg._core.sweep"]


def test_layer_check_catches_an_upward_import(tmp_path):
    pkg = tmp_path / "pkg"
    for sub in ("_core", "_backends", "_control"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("from ._control import tools\n")
    (pkg / "_backends" / "fast.py").write_text("from .._core import solve\n")
    (pkg / "_control" / "tools.py").write_text("from .._core.solve import run\n")
    (pkg / "_core" / "solve.py").write_text(
        "import numpy as np\n\n\ndef run(backend):\n"
        "    from .._backends.fast import kernel   # inside a function\n    return kernel\n")
    (pkg / "_core" / "plan.py").write_text("from .._control import tools\n")
    (pkg / "_odd").mkdir()
    (pkg / "_odd" / "__init__.py").write_text("")
    layers = {"_core": 1, "_backends": 2, "_control": 3, "": 4}
    assert layer_violations(pkg, layers) == [
        "pkg._core.plan imports pkg._control.tools",
        "pkg._core.solve imports pkg._backends.fast",
        "pkg._odd: no layer for '_odd'",
    ]
    (pkg / "_core" / "plan.py").write_text("")
    (pkg / "_core" / "solve.py").write_text("")
    (pkg / "_odd" / "__init__.py").unlink()
    (pkg / "_odd").rmdir()
    assert layer_violations(pkg, layers) == []


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


#: What ``import invimbed`` must not load: the optional dependencies (each imported where
#: a feature first needs it, so that the package imports without them) and the parts of
#: scipy that only one feature uses (imported there: every process that imports the
#: package, the test suite's workers and subprocesses included, would pay for them).
NOT_AT_IMPORT = ("numba", "sympy", "torch", "dask", "distributed", "matplotlib", "casadi",
                 "cyipopt", "cupy", "tqdm", "scipy.interpolate")


def _loaded_at_import(package: Path = PACKAGE) -> set[str]:
    """The package's modules that ``import invimbed`` runs: the module-level imports of
    its ``__init__``, followed, with the packages (``__init__``) above each module."""
    modules = _modules(package)
    seen, todo = set(), [package.name]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        parts = name.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]
        todo += _imports(name, top_level_only=True, modules=modules)
    return seen


def _heavy_imports_at_import(package: Path = PACKAGE) -> list[str]:
    hits = []
    for name in sorted(_loaded_at_import(package)):
        path = _modules(package)[name]
        for node in ast.parse(path.read_text()).body:
            targets = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                       [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level
                       else [])
            hits += [f"{name}:{node.lineno} imports {t}" for t in targets
                     if any(t == h or t.startswith(h + ".") for h in NOT_AT_IMPORT)]
    return hits


def test_import_invimbed_loads_no_optional_dependency():
    """`import invimbed` (about 1.2 s, nearly all of it numpy and scipy, which the results
    and the scipy tableaux need) loads none of `NOT_AT_IMPORT` (docs/performance.md,
    "Importing the package")."""
    assert _heavy_imports_at_import() == []
    assert {"invimbed", "invimbed._core.sweep.imbedding",
            "invimbed._control.policy"} <= _loaded_at_import()


def test_the_import_check_sees_a_module_level_import(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from .sub import mod\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "mod.py").write_text("import numpy\n\ndef f():\n    import torch\n")
    (pkg / "sub" / "late.py").write_text("import matplotlib\n")   # not imported by pkg
    assert _heavy_imports_at_import(pkg) == []
    (pkg / "sub" / "__init__.py").write_text("from scipy.interpolate import CubicSpline\n")
    assert _heavy_imports_at_import(pkg) == ["pkg.sub:1 imports scipy.interpolate"]


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
