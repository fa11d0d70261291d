"""The command line ``python -m invimbed demo``: exit codes, the printed table, the plot."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

from invimbed import __main__ as cli
from invimbed._demo import closed_form, run_projectile

ENV = {**os.environ, "MPLBACKEND": "Agg"}


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "invimbed", *args], capture_output=True,
                          text=True, env=ENV, timeout=120)


def table_rows(text: str) -> np.ndarray:
    """The data rows of the demo table: lines of exactly eight numbers (``|`` ignored)."""
    rows = []
    for line in text.splitlines():
        tokens = line.replace("|", " ").split()
        if len(tokens) != 8:
            continue
        try:
            rows.append([float(t) for t in tokens])
        except ValueError:
            continue
    return np.array(rows)


def nfev_of(text: str) -> list[int]:
    return [int(m) for m in re.findall(r"nfev = (\d+)", text)]


def check_table(text: str, n_depths: int, p_min: float = -1.0) -> None:
    rows = table_rows(text)
    assert rows.shape == (n_depths, 8), text
    p, h_imb, v_imb, h_adj, v_adj, h_exact, dh, dv = rows.T
    depths = np.linspace(1.0, p_min, n_depths)
    np.testing.assert_allclose(p, depths, atol=1e-3)  # printed with 3 decimals
    # the printed differences are tiny, and they are what they claim to be
    assert np.all(dh < 1e-8) and np.all(dv < 1e-8)
    np.testing.assert_allclose(h_imb, h_adj, atol=1e-7)
    np.testing.assert_allclose(v_imb, v_adj, atol=1e-7)
    # the closed form column is the projectile's h(q) = h0 + v0 s - g s^2 / 2
    s = 1.0 - depths
    np.testing.assert_allclose(h_exact, 10.0 * s - 0.5 * 9.81 * s ** 2, atol=1e-6)
    np.testing.assert_allclose(h_imb, h_exact, atol=1e-7)


def test_demo_subprocess_exit_code_and_table():
    proc = run_cli("demo")
    assert proc.returncode == 0, proc.stderr
    check_table(proc.stdout, 21)
    nfev_imb, nfev_ens, nfev_loop = nfev_of(proc.stdout)
    # one sweep for every depth, one ensemble solve of every depth, and a forward and a
    # backward solve per depth: the loop's calls grow with the 21 depths, the others' not
    assert 0 < nfev_imb < nfev_loop and 0 < nfev_ens < nfev_loop / 5
    assert "OK:" in proc.stdout
    assert proc.stderr == ""


@pytest.mark.parametrize("closure", ["jet", "stencil", "crop"])
def test_demo_in_process(closure, capsys):
    assert cli.main(["demo", "--depths", "9", "--closure", closure]) == 0
    out = capsys.readouterr().out
    check_table(out, 9)
    assert f"closure {closure!r}" in out


def test_demo_options_change_the_grid(capsys):
    assert cli.main(["demo", "--depths", "5", "--p-min", "-0.5", "--v0", "10"]) == 0
    check_table(capsys.readouterr().out, 5, p_min=-0.5)


def test_console_script_if_installed():
    exe = shutil.which("invimbed")
    if exe is None:
        pytest.skip("the `invimbed` console script is not on PATH")
    proc = subprocess.run([exe, "demo", "--depths", "4"], capture_output=True, text=True,
                          env=ENV, timeout=120)
    assert proc.returncode == 0, proc.stderr
    check_table(proc.stdout, 4)


def test_demo_plot_writes_png(tmp_path, capsys, monkeypatch):
    # in this process (the process-level exit status and output are those of
    # test_demo_subprocess_exit_code_and_table): a fresh interpreter costs seconds
    pytest.importorskip("matplotlib")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    out = tmp_path / "projectile.png"
    code = cli.main(["demo", "--depths", "11", "--plot", str(out)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert out.stat().st_size > 1000
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"wrote {out}" in captured.out


def test_demo_plot_without_matplotlib_says_how_to_install(monkeypatch, capsys, tmp_path):
    # a None entry in sys.modules makes `import matplotlib` raise ImportError
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    code = cli.main(["demo", "--plot", str(tmp_path / "x.png")])
    assert code != 0
    err = capsys.readouterr().err
    assert "pip install invimbed[plot]" in err
    assert not (tmp_path / "x.png").exists()


@pytest.mark.parametrize("args, fragment", [
    (["demo", "--bogus"], "unrecognized arguments: --bogus"),
    (["demo", "--depths", "1"], "must be at least 2"),
    (["demo", "--depths", "0"], "invimbed demo: error: argument --depths"),
    (["demo", "--depths", "many"], "expected an integer"),
    (["demo", "--closure", "magic"], "invalid choice: 'magic'"),
    (["demo", "--rtol", "-1"], "must be a positive finite number"),
    (["demo", "--p-min", "2"], "--p-min must be below q = 1"),
    (["frobnicate"], "invalid choice: 'frobnicate'"),
    ([], "a command is required"),
])
def test_bad_options_exit_non_zero_with_a_message(args, fragment, capsys):
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert fragment in err


def test_too_many_depths_are_refused_in_one_line_before_any_work(monkeypatch, capsys):
    # guards `demo --depths 200000`, which would run the per-depth loop for minutes
    def never(*args, **kwargs):
        raise AssertionError("run_projectile called for a refused --depths")

    monkeypatch.setattr("invimbed._demo.run_projectile", never)
    assert cli.main(["demo", "--depths", "200000"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert "--depths 200000" in err and f"limit of {cli.DEMO_MAX_DEPTHS}" in err
    assert "about 2000 s" in err             # 200000 x DEMO_SECONDS_PER_DEPTH


def test_the_depth_limit_itself_is_accepted(monkeypatch, capsys):
    seen = []

    def stub(n_depths, **kwargs):
        seen.append(n_depths)
        raise ValueError("stub reached")

    monkeypatch.setattr("invimbed._demo.run_projectile", stub)
    assert cli.main(["demo", "--depths", str(cli.DEMO_MAX_DEPTHS)]) == 2
    assert seen == [cli.DEMO_MAX_DEPTHS]
    assert "stub reached" in capsys.readouterr().err


def test_too_many_depths_subprocess_exits_2():
    # the process-level exit status of a refused option (the messages of the others are
    # checked in this process, test_bad_options_exit_non_zero_with_a_message)
    proc = run_cli("demo", "--depths", "200000")
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.startswith("invimbed demo: error: --depths 200000")


def test_disagreement_is_a_failure(monkeypatch, capsys):
    # guards the exit code of a numerical failure: the check must not be decorative
    monkeypatch.setattr(cli, "DEMO_AGREEMENT", -1.0)
    assert cli.main(["demo", "--depths", "3"]) == 1
    assert "disagree" in capsys.readouterr().err


def test_help_and_version_return_zero(capsys):
    assert cli.main(["--help"]) == 0
    assert "demo" in capsys.readouterr().out
    assert cli.main(["demo", "--help"]) == 0
    assert "--plot" in capsys.readouterr().out
    assert cli.main(["--version"]) == 0


def test_run_projectile_matches_closed_form():
    demo = run_projectile(7, p_min=-0.5, v0=8.0, h0=1.0, h_target=3.0)
    exact = closed_form(demo.depths, demo.x, 1.0, 3.0)
    for k in ("z", "value", "adjoint", "depth_grad"):
        np.testing.assert_allclose(demo.imbedding[k], exact[k], rtol=1e-8, atol=1e-9)
        np.testing.assert_allclose(demo.adjoint[k], exact[k], rtol=1e-8, atol=1e-9)
    assert demo.worst_relative_diff() < 1e-8
    with pytest.raises(ValueError, match="`n_depths` must be an integer >= 2"):
        run_projectile(1)
    with pytest.raises(ValueError, match="`p_min` must be below q"):
        run_projectile(3, p_min=1.0)
