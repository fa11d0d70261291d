"""Every script in examples/ runs to completion (each checks its own results).

Each runs in this process, as ``python examples/<script>.py`` runs it (`runpy` with
``__name__ == "__main__"``, its folder first on ``sys.path``, no arguments, from an empty
working folder): a fresh interpreter per script would cost seconds of imports and numba
kernel loads each.
"""

from __future__ import annotations

import runpy
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
def test_example_runs(script, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(script.parent))
    monkeypatch.setattr(sys, "argv", [str(script)])
    try:
        runpy.run_path(str(script), run_name="__main__")
    except SystemExit as exc:      # `sys.exit(main())`: its status
        assert exc.code in (0, None), f"{script.name} exited with status {exc.code}"
    finally:
        if "matplotlib.pyplot" in sys.modules:
            sys.modules["matplotlib.pyplot"].close("all")
    assert capsys.readouterr().out.strip(), f"{script.name} printed nothing"
