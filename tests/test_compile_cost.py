"""A first run compiles no numba kernel it does not need (docs/performance.md, "Compiled
kernels and the first run on a machine"): the Taylor tape's and the jet contraction's
kernels run only where they are ready or where the work repays their compilation, and
the numpy route they replace gives the same numbers."""

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

numba = pytest.importorskip("numba")
sp = pytest.importorskip("sympy")

from invimbed._core.runtime import compile_cost  # noqa: E402
from invimbed._core.closures import jet  # noqa: E402
from invimbed._core.derivatives import taylor_mode  # noqa: E402
from invimbed._core.derivatives.symbolic import SympyProvider  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def test_ready_is_false_before_the_first_compilation_and_true_after():
    @numba.njit
    def twice(x):
        return 2 * x

    assert not compile_cost.ready(twice)
    twice(1.0)
    assert compile_cost.ready(twice)
    assert not compile_cost.ready(object())         # not a dispatcher: not known ready


def provider_args():
    t, a, b, u = sp.symbols("t a b u")
    return (t, [a, b], [u], [b, -sp.sin(a) + u * sp.cos(b)], (1 - sp.cos(a)) + u**2,
            a**2 + b**2)


@pytest.mark.parametrize("is_ready", [False, True])
def test_taylor_mode_runs_the_kernel_only_where_ready_or_large(monkeypatch, is_ready):
    calls = []
    real = taylor_mode.evaluate

    def numpy_evaluate(*args):
        calls.append("numpy")
        return real(*args)

    def kernel_evaluate(*args):         # the kernel is not compiled here: only chosen
        calls.append("numba")
        return real(*args)

    from invimbed._core.derivatives import _taylor_numba

    monkeypatch.setattr(taylor_mode, "evaluate", numpy_evaluate)
    monkeypatch.setattr(_taylor_numba, "evaluate", kernel_evaluate)
    monkeypatch.setattr(compile_cost, "ready", lambda kernel: is_ready)
    prov = SympyProvider(*provider_args())
    assert prov._jets.engine == "auto"
    z, th = np.array([[0.3, -0.2]]), np.array([[0.4]])
    ref = SympyProvider(*provider_args(), taylor_mode=False)
    for K in (2, 3):                              # degrees 4, 5: small tables
        calls.clear()
        got = prov.taylor("f", 0.1, z, th, K + 2, 1)
        assert calls == (["numba"] if is_ready else ["numpy"])
        np.testing.assert_allclose(got, ref.taylor("f", 0.1, z, th, K + 2, 1), rtol=0,
                                   atol=1e-12 * np.abs(got).max())
    assert prov._jets._compiled(4, 8)         # C(16, 8) pairs: compiled, ready or not
    assert prov._jets._compiled(2, 4) == is_ready


def test_jet_contraction_compiles_only_large_tables_where_not_ready(monkeypatch):
    monkeypatch.setattr(compile_cost, "ready", lambda kernel: False)
    assert jet._compiled(jet._COMPILE_FROM - 1) is None
    assert jet._compiled(jet._COMPILE_FROM) is not None
    monkeypatch.setattr(compile_cost, "ready", lambda kernel: True)
    assert jet._compiled(500) is not None


# -- a compilation that is not cached announces itself -----------------------------------


@pytest.fixture
def standin(tmp_path, monkeypatch):
    """A caching numba kernel in a module of its own, cached under ``tmp_path`` (numba's
    cache directory, as ``NUMBA_CACHE_DIR`` sets it): a machine whose cache is cold."""
    import importlib.util

    monkeypatch.setattr(numba.config, "CACHE_DIR", str(tmp_path / "cache"))
    src = tmp_path / "standin_kernel.py"
    src.write_text("from numba import njit\n\n\n@njit(cache=True)\n"
                   "def twice(x):\n    return 2.0 * x\n")
    spec = importlib.util.spec_from_file_location("standin_kernel", src)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    err = []
    monkeypatch.setattr(compile_cost, "STREAM", _Lines(err))
    monkeypatch.setattr(compile_cost, "COMPILED", {})
    return mod.twice, err


class _Lines:
    def __init__(self, out):
        self.out = out

    def write(self, text):
        if text.strip():
            self.out.append(text)

    def flush(self):
        pass


def _call(kernel, err):
    sig = (numba.typeof(1.5),)
    with compile_cost.compiling("contract", [(kernel, sig)]) as compiles:
        assert kernel(1.5) == 3.0
    return compiles


def test_an_uncached_compile_announces_itself_once_and_a_cached_one_does_not(standin):
    kernel, err = standin
    assert _call(kernel, err)                       # cold: compiled, announced
    assert len(err) == 1 and "\n" not in err[0].rstrip("\n")
    line = err[0]
    assert line.startswith("invimbed: compiling the jet closure's compiled contraction")
    assert "not in numba's cache yet: expected about 2 s" in line
    assert "its CPU time on a 2-core reference machine, more on a busy one" in line
    assert "python -m invimbed compile" in line
    assert "contract" in compile_cost.COMPILED
    assert not _call(kernel, err) and len(err) == 1       # warm process: nothing
    # a new process: a fresh dispatcher of the same function, its machine code on disk
    fresh = numba.njit(cache=True)(kernel.py_func)
    assert compile_cost.compiled(fresh, (numba.typeof(1.5),))
    assert not _call(fresh, err) and len(err) == 1
    # ... but not for another signature
    assert not compile_cost.compiled(fresh, (numba.typeof(np.zeros(2)),))


def test_the_expected_duration_is_the_last_one_measured_here(standin, tmp_path):
    kernel, err = standin
    _call(kernel, err)
    where = compile_cost.cache_directory(kernel)
    assert where.startswith(str(tmp_path / "cache"))
    took = compile_cost.COMPILED["contract"]
    seconds, basis = compile_cost.expected_seconds("contract", where)
    assert seconds == pytest.approx(took, abs=0.01)
    assert basis == "its last compilation on this machine"
    # another kernel not compiled here yet: its reference time, scaled as this one's
    scaled, basis = compile_cost.expected_seconds("taylor", where)
    ratio = compile_cost._times(where)["contract"] / compile_cost.KERNELS["contract"][1]
    assert scaled == pytest.approx(compile_cost.KERNELS["taylor"][1] * ratio, rel=1e-2)
    assert "scaled by this machine's other compilations" in basis


def test_a_failed_compile_records_no_time(standin):
    kernel, err = standin
    with pytest.raises(numba.core.errors.TypingError):
        with compile_cost.compiling("contract", [(kernel, (numba.typeof("a"),))]):
            kernel("a")
    assert len(err) == 1 and "contract" not in compile_cost.COMPILED


class _Stop(Exception):
    pass


@pytest.fixture
def announced(monkeypatch):
    """`compiling` replaced by a stand-in that notes the kernel and its dispatchers and
    stops there, before anything is compiled."""
    seen = []

    def spy(name, pending):
        seen.append((name, [d for d, _ in pending]))
        raise _Stop

    from invimbed._backends import _numba, ensemble_numba, sweep_adaptive

    for mod in (compile_cost, _numba):        # `_numba.compile_loop`'s, and the others'
        monkeypatch.setattr(mod, "compiling", spy)
    monkeypatch.setitem(_numba._types(), "kernels", {})       # no kernel built yet here
    monkeypatch.setattr(ensemble_numba, "_KERNELS", {})
    monkeypatch.setattr(sweep_adaptive, "_KERNELS", {})
    return seen


def _njit_problem():
    from invimbed._backends._warm import _problem

    return _problem()


@pytest.mark.parametrize("entry", ["sweep_fixed", "sweep_adaptive", "ensemble", "values",
                                   "taylor", "contract", "jet_code"])
def test_every_compiled_entry_point_goes_through_the_announcement(announced, monkeypatch,
                                                                   entry):
    import invimbed
    from invimbed._backends import _numba
    from invimbed._core.derivatives import _taylor_numba

    x, depths, ctrl = np.array([0.3, -0.1]), np.array([-0.5, -0.25]), invimbed.Constant([0.1])
    kw = dict(control=ctrl, backend="numba")
    with pytest.raises(_Stop):
        if entry == "sweep_fixed":
            invimbed.solve_imbedding(_njit_problem(), x, depths, method="rk4", step=0.25, **kw)
        elif entry == "sweep_adaptive":
            invimbed.solve_imbedding(_njit_problem(), x, depths, method="RK45", **kw)
        elif entry == "ensemble":
            invimbed.solve_adjoint(_njit_problem(), x, depths, **kw)
        elif entry == "values":
            from invimbed._core.setup.arguments import prepare
            from invimbed._core.integrators import ALL_METHODS

            X = np.tile(x, (_numba.COMPILED_ROWS, 1))
            setup = prepare(_njit_problem(), X, depths, ctrl, "rk4", 1e-6, 1e-9, 0.25,
                            ALL_METHODS)
            values = _numba.CompiledValues(setup, setup.provider)
            values.derivative("f", 0.0, X, np.full((X.shape[0], 1), 0.1), 0, 0)
        elif entry == "jet_code":   # a problem's generated jet right-hand side
            from invimbed._backends._warm import _sympy_problem

            invimbed.solve_imbedding(_sympy_problem(), x, depths, method="rk4", step=0.25, **kw)
        elif entry == "taylor":     # a dispatcher that this process has not compiled
            monkeypatch.setattr(_taylor_numba, "run",
                                numba.njit(cache=True)(_taylor_numba.run.py_func))
            _call_taylor()
        else:
            from invimbed._core.closures import _contract_numba
            from invimbed._core.closures.jet import run_contraction
            from invimbed._core.derivatives.multiindex import product_table

            fresh = numba.njit(cache=True)(_contract_numba.contract.py_func)
            ia, ib, io = product_table(1, 1, 1, 1)
            run_contraction(fresh, np.ones((1, 1, 1, 2)), np.ones((1, 1, 1, 2)), ia, ib, io, 2)
    (name, dispatchers), = announced
    assert name == entry
    heavy = {"sweep_fixed": "_jet_sweep_one", "sweep_adaptive": "sweep_one",
             "ensemble": "_row", "values": "request_rows", "taylor": "run",
             "contract": "contract", "jet_code": "jet_rhs"}[entry]
    assert heavy in [d.py_func.__name__ for d in dispatchers]


def _call_taylor():
    from invimbed._core.derivatives._tape import build_tape
    from invimbed._core.derivatives._taylor_numba import evaluate

    t, a = sp.symbols("t a")
    tape = build_tape(sp, [sp.sin(a) * a], t, [a], [a])
    evaluate(tape, np.zeros(1), np.array([[0.5]]), 4)


def test_the_taylor_kernel_takes_read_only_inputs_without_compiling_again():
    """`taylor_mode` hands the kernel a broadcast time (read-only, and C-contiguous for
    one row); numba types a read-only array apart, so the kernel the warm-up compiled
    (``python -m invimbed compile``, writeable arrays) was compiled a second time (about
    2.5 s of CPU, in every test process of the suite that met it). One compiled
    signature serves both, with the same numbers."""
    from invimbed._core.derivatives._tape import build_tape
    from invimbed._core.derivatives._taylor_numba import evaluate, run

    t, a = sp.symbols("t a")
    tape = build_tape(sp, [sp.sin(a) * a], t, [a], [a])
    x = np.array([[0.5]])
    rw = evaluate(tape, np.zeros(1), x, 4)
    x.setflags(write=False)
    ro = evaluate(tape, np.broadcast_to(0.0, (1,)), x, 4)
    assert len(run.signatures) == 1
    assert not any(getattr(ty, "readonly", False) for ty in run.signatures[0])
    np.testing.assert_array_equal(ro, rw)


def test_functions_only_compiled_code_calls_have_no_python_wrapper():
    """The kernels' inner functions (called from compiled code, directly or as function
    values) are compiled without numba's CPython wrapper, code that only a call from
    Python would run (2 to 3 s of the per-input adaptive sweep's 11 s of compilation);
    the entry points keep theirs."""
    from invimbed._backends import _ensemble_kernels, _numba_calls, _numba_kernels
    from invimbed._backends import _sweep_kernels
    from invimbed._core.derivatives import _taylor_numba

    inner = [_sweep_kernels.sweep_one, _sweep_kernels._rhs, _sweep_kernels._tape_coefficients,
             _ensemble_kernels._row, _ensemble_kernels._rhs, _ensemble_kernels._integrate,
             _numba_kernels._jet_sweep_one, _numba_kernels._jet_coefficients,
             _numba_kernels._transport, _numba_kernels._operator, _numba_calls.eval_request,
             _numba_calls.call_base, _numba_calls._nested, _taylor_numba.run_row,
             _taylor_numba._compose, _ensemble_kernels.pass_out, _sweep_kernels._record]
    for d in inner:
        assert d.targetoptions.get("no_cpython_wrapper") is True, d.py_func.__name__
    for d in (_taylor_numba.run, _numba_kernels.jet_rhs):     # called from Python too
        assert not d.targetoptions.get("no_cpython_wrapper"), d.py_func.__name__


# -- python -m invimbed compile ----------------------------------------------------------


def test_compile_dry_run_lists_every_kernel_and_compiles_nothing(capsys, monkeypatch):
    from invimbed import __main__ as cli

    monkeypatch.setattr(compile_cost, "COMPILED", {})
    assert cli.main(["compile", "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == list(compile_cost.KERNELS)
    assert all(re.search(r"  (cached|not cached) +expected +\d+\.\d s \(.*\); cache: ", line)
               for line in lines)
    assert compile_cost.COMPILED == {}


def test_compile_of_one_kernel_prints_its_time_and_the_total(capsys):
    from invimbed import __main__ as cli

    assert cli.main(["compile", "--kernel", "contract"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["kernel", "wall", "CPU"]
    assert re.fullmatch(r"contract +\d+\.\d s +\d+\.\d s  (compiled|loaded from the cache)",
                        lines[1])
    assert re.fullmatch(r"total +\d+\.\d s +\d+\.\d s", lines[2]) and len(lines) == 3


def test_compile_names_an_unknown_kernel(capsys):
    from invimbed import __main__ as cli

    assert cli.main(["compile", "--kernel", "sweep"]) == 2
    assert "invalid choice: 'sweep'" in capsys.readouterr().err


@pytest.mark.slow
def test_compile_warms_every_kernel_from_a_cold_cache_once(tmp_path):
    """The whole command from an empty numba cache (minutes on two cores): every kernel
    compiled and announced once; a second process loads them all, without a word."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path),
               PYTHONPATH=os.pathsep.join([str(ROOT)] + sys.path))
    cmd = [sys.executable, "-m", "invimbed", "compile"]
    cold = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=3600)
    assert cold.returncode == 0, cold.stderr
    lines = cold.stdout.splitlines()[1:-1]
    assert [line.split()[0] for line in lines] == list(compile_cost.KERNELS)
    assert all(line.endswith("compiled") for line in lines)
    told = [line for line in cold.stderr.splitlines() if line.startswith("invimbed: compiling")]
    assert len(told) == len(compile_cost.KERNELS)
    warm = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert warm.returncode == 0, warm.stderr
    assert all(line.endswith("loaded from the cache")
               for line in warm.stdout.splitlines()[1:-1])
    assert "invimbed: compiling" not in warm.stderr


def test_every_kernel_is_warmed_and_has_a_cache_directory():
    from invimbed._backends import _warm

    assert list(_warm.WARMERS) == list(compile_cost.KERNELS)
    for name in compile_cost.KERNELS:
        assert compile_cost.cache_directory(_warm.representative(name))


def test_the_compile_lines_hold_every_kernel_once_after_what_it_reuses():
    """The suite's warm-up compiles `_warm.LINES` in two processes at once: every kernel
    once, and a kernel whose warm-up runs or calls another's code after it in its line
    (the depth gradient's warm-up runs the fixed-step sweep; the adaptive sweep calls its
    jet right-hand side), else both processes compile that code."""
    from invimbed._backends import _warm

    flat = [k for line in _warm.LINES for k in line]
    assert sorted(flat) == sorted(compile_cost.KERNELS)
    first = _warm.LINES[0]
    assert first.index("sweep_fixed") < first.index("values") < first.index("sweep_adaptive")
