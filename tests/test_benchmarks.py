"""The benchmark scripts share one helper and import no other benchmark (benchmarks/README.md):
every script takes its command line and timing from ``benchmarks/_machine.py``, and what
two scripts share lives in a ``benchmarks/_*.py`` helper module, not in a script the
other imports. Checked on the source (nothing is run: the scripts take minutes)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
SCRIPTS = sorted([*BENCH.glob("bench_*.py"), BENCH / "gpu_check.py"])


def _imports(path: Path) -> set[str]:
    """The top-level module names ``path`` imports (anywhere in it, also in strings run
    by a child process: ``python -c "import bench_x"``)."""
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                "import " in node.value:
            try:
                names |= _imports_of_source(node.value)
            except SyntaxError:
                pass
    return names


def _imports_of_source(text: str) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


def test_no_benchmark_imports_another():
    scripts = {p.stem for p in SCRIPTS}
    found = {p.name: sorted(_imports(p) & (scripts - {p.stem}))
             for p in [*SCRIPTS, *BENCH.glob("_*.py")]}
    assert {k: v for k, v in found.items() if v} == {}


def test_every_benchmark_takes_its_command_line_from_the_shared_helper():
    own = []
    for script in SCRIPTS:
        tree = ast.parse(script.read_text())
        used = {a.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                and node.module == "_machine" for a in node.names}
        if "arguments" not in used or any(isinstance(node, ast.Attribute)
                                          and node.attr == "ArgumentParser"
                                          for node in ast.walk(tree)):
            own.append(script.name)
    assert own == [], "these build their own argparse parser"


@pytest.fixture(scope="module")
def machine():
    sys.path.insert(0, str(BENCH))
    try:
        import _machine
        yield _machine
    finally:
        sys.path.remove(str(BENCH))


def test_the_shared_options(machine):
    ap = machine.arguments("Title.\n\nMore.", quick="small", repeats=None, json_out=True,
                           aliases=("--repeat",))
    assert ap.description == "Title."
    args = ap.parse_args(["--quick", "--repeat", "4", "--json", "out.json"])
    assert (args.quick, args.repeats, args.json) == (True, 4, "out.json")
    assert machine.repeats_of(args, full=5) == 4
    assert machine.repeats_of(ap.parse_args(["--quick"]), full=5) == 1
    assert machine.repeats_of(ap.parse_args([]), full=5, quick=2) == 5
    with pytest.raises(SystemExit, match="--repeats must be at least 1, not 0"):
        machine.repeats_of(ap.parse_args(["--repeats", "0"]), full=5)
    bare = machine.arguments(None, timed=False)
    with pytest.raises(SystemExit):
        bare.parse_args(["--repeats", "2"])


def test_interleaved_timing_calls_each_side_in_turn(machine):
    order = []
    sides = [lambda: order.append("a") or "A", lambda: order.append("b") or "B"]
    timed = machine.interleaved(sides, 3, number=2)
    assert order == ["a", "b"] + ["a", "a", "b", "b"] * 3     # warm-up, then rounds
    assert [t.result for t in timed] == ["A", "B"]
    assert all(0 <= t.best < float("inf") and t.first >= 0 for t in timed)
    calls = []
    best, out = machine.best_of(lambda: calls.append(1) or len(calls), 5, budget=-1.0)
    assert (len(calls), out) == (1, 1)      # past the budget after the first round
