"""The generated jet right-hand side of ``backend="numba"``
(`invimbed._core.derivatives._jet_code`): on problems with exact expressions (from_sympy,
traced, derivatives given and completed by the trace) the fixed-step sweep runs code
generated for the problem instead of the generic index-table kernel. It must give the
generic kernel's numbers (1e-12: the same sums in another order) and numpy's (1e-12),
fields and error estimates, on the pendulums, a problem with dense couplings and one with
theta- and time-dependent terms, with and without derivatives given, with and without the
estimate (the jets of orders 1 and 2), on a control with more parameters than values."""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest

numba = pytest.importorskip("numba")
sp = pytest.importorskip("sympy")

from numba import njit  # noqa: E402

from invimbed import BolzaProblem, Constant, PiecewiseConstant, solve_imbedding  # noqa: E402
from invimbed._backends import _numba  # noqa: E402
from problems import no_control_sympy  # noqa: E402

FIELDS = ("z", "value", "adjoint", "param_grad", "depth_grad")
DEPTHS = np.linspace(0.0, -1.0, 5)


# -- three problems, each from sympy expressions and as per-sample @njit functions ---------

def _pendulums(t, z, th, m):
    return ([z[2], z[3], -m.sin(z[0]) - 0.5 * (z[0] - z[1]) - 0.1 * z[2] + th[0],
             -m.sin(z[1]) - 0.5 * (z[1] - z[0]) - 0.1 * z[3] + th[1]],
            0.2 * (2 - m.cos(z[0]) - m.cos(z[1])) + 0.025 * (th[0] ** 2 + th[1] ** 2),
            ((z[0] - 1) ** 2 + (z[1] - 1) ** 2 + z[2] ** 2 + z[3] ** 2) / 2)


def _dense(t, z, th, m):
    """Every state in every equation, products of states: no Taylor coefficient zero."""
    s0 = m.sin(z[0] + 0.3 * z[1] - 0.2 * z[2])
    s1 = m.cos(z[1] - 0.4 * z[2]) * z[0]
    s2 = m.tanh(z[2] + 0.5 * z[0] * z[1])
    return ([0.3 * s1 - s2 + th[0] * z[1], s0 * s2 + 0.2 * z[0] * z[2] - th[1],
             -s0 + 0.1 * s1 * z[2] + th[0] * th[1]],
            m.exp(0.1 * (z[0] + z[1] * z[2])) + 0.5 * (th[0] ** 2 + th[1] ** 2) * (1 + z[0] ** 2),
            m.log(1 + z[0] ** 2 + z[1] ** 2) + z[2] ** 2 * z[0] / 2)


def _theta_time(t, z, th, m):
    """theta inside the nonlinear terms, and the time."""
    return ([z[1] * (1 + 0.5 * th[1]),
             -m.sin(z[0]) * (1 + th[0] ** 2) + th[1] * z[1] * m.cos(t) - 0.2 * z[1] * th[0] * z[0]],
            th[0] * z[0] ** 2 + m.exp(0.1 * z[1]) * th[1] ** 2 + 0.3 * th[0] * th[1] * m.sin(t),
            (z[0] - 0.5) ** 2 + z[1] ** 2 * (1 + z[0] ** 2) / 4)


SIZES = {_pendulums: 4, _dense: 3, _theta_time: 2}


# one problem per case for the module: its provider generates the code (sympy
# derivatives, cse, printing) once for the tests that solve it
@cache
def from_sympy(case) -> BolzaProblem:
    N = SIZES[case]
    t = sp.Symbol("t")
    z = sp.symbols(f"z0:{N}")
    th = sp.symbols("th0:2")
    f, R, T = case(t, z, th, sp)
    return BolzaProblem.from_sympy(t, z, th, f, R, T)


def per_sample(case, given: tuple = ()) -> BolzaProblem:
    """The problem as per-sample @njit functions (traced at the first solve: the ones
    sympy generates for it, as a user would write them), with the derivatives named in
    ``given`` (generated too)."""
    prov = from_sympy(case).derivative_provider
    derivatives = {}
    for name in given:
        which, rest = name.split("_")
        derivatives[name] = prov.sample_function(which, rest.count("z"), rest.count("theta"))
    f, R, T = (prov.sample_function(w) for w in "fRT")
    return BolzaProblem(f, R, T, derivatives=derivatives or "auto")


def assert_close(a, b, rtol):
    """``|a - b| <= rtol max(1, |b|)`` for every field and every error estimate."""
    for k in FIELDS:
        assert a[k].shape == b[k].shape, k
        err = np.max(np.abs(a[k] - b[k]) / np.maximum(1.0, np.abs(b[k])), initial=0.0)
        assert err <= rtol, (k, err)
    assert (a.error_estimate is None) == (b.error_estimate is None)
    for k in (b.error_estimate or {}):
        err = np.max(np.abs(a.error_estimate[k] - b.error_estimate[k])
                     / np.maximum(1.0, np.abs(b[k])), initial=0.0)
        assert err <= rtol, ("estimate", k, err)


def run_both(problem, x, monkeypatch, **kw):
    """numba with the generated code (checked to be used), numba's generic kernel, numpy."""
    used = []
    build = _numba.jet_code
    monkeypatch.setattr(_numba, "jet_code", lambda s, o: used.append(build(s, o)) or used[-1])
    coded = solve_imbedding(problem, x, DEPTHS, backend="numba", **kw)
    assert used and used[-1] is not None, "the generated jet code was not used"
    monkeypatch.setattr(_numba, "JET_CODE", False)
    generic = solve_imbedding(problem, x, DEPTHS, backend="numba", **kw)
    assert used[-1] is None
    ref = solve_imbedding(problem, x, DEPTHS, ratio_test=False, **kw)
    return coded, generic, ref


CASES = [(_pendulums, 4), (_dense, 3), (_theta_time, 2)]


@pytest.mark.parametrize("case,N", CASES, ids=["pendulums", "dense", "theta-time"])
@pytest.mark.parametrize("estimate_error", [True, False], ids=["jets-1-2", "jet-1"])
def test_generated_jet_code_equals_the_generic_kernel_and_numpy(case, N, estimate_error,
                                                                 monkeypatch):
    """from_sympy problems: the generated right-hand side, the generic kernel and numpy
    agree to 1e-12 (fields and error estimates) on a control of 4 parameters (2 values
    on 2 pieces: the theta-gradient's Jacobian is not the identity)."""
    x = np.random.default_rng(N).normal(scale=0.5, size=(4, N))
    kw = dict(control=PiecewiseConstant([-1.0, -0.5, 0.0], [[0.2, -0.1], [0.1, 0.3]]),
              method="rk4", step=1 / 8, estimate_error=estimate_error)
    coded, generic, ref = run_both(from_sympy(case), x, monkeypatch, **kw)
    assert (coded.success, coded.status) == (generic.success, generic.status) == (
        ref.success, ref.status)
    assert_close(coded, generic, 1e-12)
    assert_close(coded, ref, 1e-12)


@pytest.mark.parametrize("case,N,given", [
    (_pendulums, 4, ("f_z", "f_zz", "f_theta", "R_z", "T_z")),
    (_dense, 3, ()),
    (_theta_time, 2, ("f_z", "f_theta", "f_ztheta", "R_theta")),
], ids=["pendulums-given", "dense-traced", "theta-time-given"])
def test_per_sample_functions_run_on_the_generated_code(case, N, given, monkeypatch):
    """Per-sample @njit functions, traced, with derivatives given (they agree with the
    trace: the generated code stands in for them) or none: the generated right-hand side
    equals the generic kernel (which calls the given derivatives) and numpy to 1e-12.
    The given derivatives (the provider's generated code) are compiled once each."""
    problem = per_sample(case, given)
    x = np.random.default_rng(N + 10).normal(scale=0.5, size=(3, N))
    kw = dict(control=Constant([0.2, -0.1]), method="rk4", step=1 / 8)
    coded, generic, ref = run_both(problem, x, monkeypatch, **kw)
    assert "traced" in coded.derivatives
    # the generated code given as derivatives is called as it is: no proof that it does
    # not write (a compilation for read-only arguments), it writes into nothing
    for fn in problem.known_derivatives.values():
        assert len(fn.signatures) == 1
    assert_close(coded, generic, 1e-12)
    assert_close(coded, ref, 1e-12)


def test_the_layer_recursion_runs_on_the_generated_code(monkeypatch):
    """method='disc' (two right-hand sides of the jet of order 1 per step)."""
    x = np.random.default_rng(3).normal(scale=0.5, size=(3, 2))
    kw = dict(control=Constant([0.2, -0.1]), method="disc", step=1 / 8, estimate_error=False)
    coded, generic, ref = run_both(from_sympy(_theta_time), x, monkeypatch, **kw)
    assert_close(coded, generic, 1e-12)
    assert_close(coded, ref, 1e-12)


def test_given_derivatives_that_disagree_with_the_trace_are_called(monkeypatch):
    """A given derivative that is not the trace's (here f_z off by 1e-6): no generated
    code; the generic kernel calls the user's derivative, as numpy does."""
    prov = from_sympy(_pendulums).derivative_provider
    # a dispatcher of its own: the write proof of f_z compiles what f_z calls for read-only
    # arguments, and the provider's dispatcher is the one the test above counts
    exact = njit(prov.sample_function("f", 1, 0).py_func)

    @njit
    def f_z(t, z, th):
        return exact(t, z, th) * (1.0 + 1e-6)

    problem = per_sample(_pendulums)
    problem = BolzaProblem(problem.dynamics, problem.running_loss, problem.terminal_loss,
                           derivatives=dict(f_z=f_z))
    x = np.random.default_rng(2).normal(scale=0.5, size=(3, 4))
    kw = dict(control=Constant([0.2, -0.1]), method="rk4", step=1 / 8)
    used = []
    build = _numba.jet_code
    monkeypatch.setattr(_numba, "jet_code", lambda s, o: used.append(build(s, o)) or used[-1])
    res = solve_imbedding(problem, x, DEPTHS, backend="numba", **kw)
    assert used == [None]
    ref = solve_imbedding(problem, x, DEPTHS, ratio_test=False, **kw)
    assert_close(res, ref, 1e-12)


def test_generated_code_reads_only_the_coefficients_that_are_not_zero():
    """The pendulums' right-hand side of the jets of orders 1 and 2 names a Taylor
    coefficient of f only where it is not identically zero (f_0 = z_2: its constant and
    its delta_2 coefficient, the latter the constant 1, written into the products), and
    no product by a constant 1."""
    import re

    from invimbed._core.derivatives._jet_code import jet_source

    prov = from_sympy(_pendulums).derivative_provider
    lines, terms = jet_source(prov, (1, 2))
    assert lines[1] == "def jet_rhs(t, x, th, J, y, dy, offs, n):"
    source = "\n".join(lines)
    coef = prov.taylor("f", 0.3, np.array([[0.1, -0.2, 0.3, 0.4]]), np.array([[0.2, -0.1]]),
                       order=3)[0]
    named = {tuple(map(int, m)) for m in re.findall(r"\bp(\d+)_(\d+)\b", source)}
    assert named and all(coef[i, c] != 0.0 for i, c in named)
    assert {c for i, c in named if i == 0} == {0}
    assert "1.0 *" not in source and "* 1.0\n" not in source
    assert terms > 0


def test_generated_code_writes_each_operator_once():
    """numba's compile time grows with the operations written: each truncated operator is
    one loop body over every row it transports (degree 1: the rows of Z of the jet of
    order 1; degree 2: V and W of order 1 with Z of order 2; degree 3: V and W of order
    2), not written out row by row; the products per call are counted as before."""
    import re

    from invimbed._core.derivatives._jet_code import jet_source
    from invimbed._core.derivatives.multiindex import n_coefficients

    prov = from_sympy(_pendulums).derivative_provider
    lines, terms = jet_source(prov, (1, 2))
    assert sum(line.strip().startswith("for j in range(") for line in lines) == 3
    totals = [line for line in lines if re.match(r"\s*t\d+_\d+ = -\(", line)]
    assert len(totals) == sum(n_coefficients(4, d) for d in (1, 2, 3))
    assert not any("k += 1" in line for line in lines)
    assert terms == 842


def test_a_right_hand_side_too_large_to_compile_quickly_keeps_the_generic_kernel(monkeypatch):
    """Above `MAX_TERMS` products no code is generated (numba's compile time grows with
    it): the generic kernel runs, with numpy's numbers."""
    from invimbed._core.derivatives import _jet_code

    monkeypatch.setattr(_jet_code, "MAX_TERMS", 10)
    problem = from_sympy.__wrapped__(_theta_time)   # a new one: the shared one caches its code
    assert _jet_code.jet_function(problem.derivative_provider, (1, 2)) is None
    used = []
    build = _numba.jet_code
    monkeypatch.setattr(_numba, "jet_code", lambda s, o: used.append(build(s, o)) or used[-1])
    x = np.random.default_rng(4).normal(scale=0.5, size=(3, 2))
    kw = dict(control=Constant([0.2, -0.1]), method="rk4", step=1 / 8)
    res = solve_imbedding(problem, x, DEPTHS, backend="numba", **kw)
    assert used == [None]
    assert_close(res, solve_imbedding(problem, x, DEPTHS, ratio_test=False, **kw), 1e-12)


def test_a_problem_without_control_or_running_loss(monkeypatch):
    """No theta (no parameter rows W), R absent, time in f: the generated code, the
    generic kernel and numpy agree."""
    problem = no_control_sympy()       # tests/problems.py (test_backends: per-sample)
    x = np.random.default_rng(8).normal(scale=0.5, size=(3, 2))
    coded, generic, ref = run_both(problem, x, monkeypatch, method="rk4", step=1 / 8)
    assert coded.param_grad.shape == (DEPTHS.size, 3, 0)
    assert_close(coded, generic, 1e-12)
    assert_close(coded, ref, 1e-12)


def test_the_generated_jet_code_compiles_only_the_per_sample_code_it_calls():
    """On the generated jet code the sweep calls the terminal loss's per-sample functions
    only (for the initial state): the per-sample code of f's and R's derivatives, which
    the generic kernel would call, is neither generated nor compiled (each is a numba
    compilation of its own), nor, for a traced problem of few rows, f and R for the
    depth gradient's compiled loop; the numbers are numpy's."""
    problem = from_sympy.__wrapped__(_theta_time)   # a new provider: nothing generated yet
    x = np.random.default_rng(5).normal(scale=0.5, size=(3, 2))
    kw = dict(control=Constant([0.2, -0.1]), method="rk4", step=1 / 8)
    for problem in (problem, per_sample(_theta_time)):      # from_sympy, traced
        res = solve_imbedding(problem, x, DEPTHS, backend="numba", **kw)
        prov = problem.derivative_provider or problem.provider(2, 2)
        sampled = {key[1:] for key in prov._compiled if key[0] == "sample"}
        assert ("T", 0, 0) in sampled and all(which == "T" for which, _, _ in sampled)
        assert_close(res, solve_imbedding(problem, x, DEPTHS, ratio_test=False, **kw), 1e-12)
