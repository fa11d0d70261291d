"""Every script in examples/ runs to completion (each checks its own results)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

#: the scripts (a leading underscore marks a module the scripts share, not a script)
EXAMPLES = sorted(p for p in (Path(__file__).resolve().parents[1] / "examples").glob("*.py")
                  if not p.name.startswith("_"))


def test_examples_exist():
    names = {p.name for p in EXAMPLES}
    assert {"projectile.py", "pendulum_depths.py"} <= names


@pytest.mark.parametrize("script", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_runs(script, tmp_path):
    # the scripts import this tree's invimbed, not another installed copy
    root = str(Path(__file__).resolve().parents[1])
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "MPLBACKEND": "Agg", "PYTHONPATH": path}
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          cwd=tmp_path, env=env, timeout=120)
    assert proc.returncode == 0, f"{script.name} failed:\n{proc.stdout}\n{proc.stderr}"
    assert proc.stdout.strip(), f"{script.name} printed nothing"
