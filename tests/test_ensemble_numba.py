"""``solve_adjoint(strategy="ensemble", backend="numba")`` against the numpy ensemble.

The numba kernel runs the numpy ensemble's algorithm row by row (same tableaux, first
step, step control, stops, failure rules), so both take the same steps and agree to
rounding: asserted to 1e-10 relative per entry (observed 1e-12 with exact
derivatives; see the finite-difference test for why that one is looser), with equal step
counts. The first test compiles the kernel when numba's on-disk cache is cold (about
12 s of CPU); later runs load it.
"""

from __future__ import annotations

import numpy as np
import pytest

numba = pytest.importorskip("numba")

import invimbed  # noqa: E402
from invimbed import BolzaProblem, Constant, PiecewiseConstant, solve_adjoint  # noqa: E402
from problems import sympy_pendulum, uncompilable_dynamics  # noqa: E402

FIELDS = ("z", "value", "adjoint", "param_grad", "depth_grad")


def assert_same(res, ref, rtol=1e-10, norm_rtol=None):
    """Same success, same failed rows, same step counts, and every field within ``rtol``
    relative, entry by entry (and within ``norm_rtol`` of the field's largest entry)."""
    assert res.success == ref.success
    assert res.strategy == ref.strategy == "ensemble"
    np.testing.assert_array_equal(res.nsteps, ref.nsteps)
    for k in FIELDS:
        got, want = np.asarray(res[k]), np.asarray(ref[k])
        assert got.shape == want.shape, k
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=k)
        ok = ~np.isnan(want)
        diff = np.abs(got[ok] - want[ok])
        err = np.max(diff / np.maximum(np.abs(want[ok]), 1e-300), initial=0.0)
        assert err <= rtol, f"{k}: relative difference {err:.3g} > {rtol}"
        if norm_rtol is not None and diff.size:
            err = np.max(diff) / max(np.max(np.abs(want[ok])), 1e-300)
            assert err <= norm_rtol, f"{k}: normwise difference {err:.3g} > {norm_rtol}"


# -- (a) from_sympy, piecewise-constant control with knots between the depths ------------
X = np.array([[0.4, -0.3], [1.1, 0.6], [-0.8, 0.2]])
DEPTHS = np.array([-1.0, -0.7, -0.3, 0.0])          # not sorted the way the solver sorts
KNOTS_CTRL = PiecewiseConstant([-1.0, -0.55, -0.15, 0.0],   # knots between the depths
                               [[0.2, 0.1], [-0.3, 0.05], [0.4, 0.2]])



@pytest.fixture(scope="module")
def sympy_problem():
    return sympy_pendulum()


@pytest.mark.parametrize("method", ["RK45", "RK23"])
def test_from_sympy_with_knots_between_depths_matches_numpy(sympy_problem, method):
    kw = dict(control=KNOTS_CTRL, method=method, rtol=1e-8, atol=1e-10)
    ref = solve_adjoint(sympy_problem, X, DEPTHS, **kw)
    res = solve_adjoint(sympy_problem, X, DEPTHS, backend="numba", **kw)
    assert ref.success and res.success, res.message
    assert res.z.shape == (4, 3, 2) and res.param_grad.shape == (4, 3, 6)
    assert_same(res, ref)
    # the pieces before a depth do not act on it: exact zeros in both
    assert np.all(res.param_grad[0, :, :] != 0) and np.all(res.param_grad[2, :, :2] == 0)
    # nfev: the largest per-row count of right-hand-side evaluations; the numpy
    # ensemble counts its vectorised calls, which every row takes part in
    assert 0 < res.nfev <= ref.nfev
    one = solve_adjoint(sympy_problem, X[1], DEPTHS[:1], backend="numba", **kw)
    one_ref = solve_adjoint(sympy_problem, X[1], DEPTHS[:1], **kw)
    assert one.nfev == one_ref.nfev                    # one row: the same count
    assert one.z.shape == (1, 2)
    np.testing.assert_allclose(one.adjoint, res.adjoint[:1, 1], rtol=1e-13)


# -- (b) per-sample Python functions, time-dependent, finite-difference derivatives -------
def fd_f(t, z, th):
    return np.array([z[1], -np.sin(z[0]) - th[1] * z[1] + th[0] + 0.3 * np.cos(1.3 * t)])


def fd_R(t, z, th):
    return 0.4 * (1.0 - np.cos(z[0])) + 0.1 * z[1] ** 2 + 0.05 * th[0] ** 2 + 0.1 * t * z[0]


def fd_T(z):
    return 1.0 - np.cos(z[0] - 0.5) + 0.25 * (z[1] + 0.2) ** 4


@pytest.fixture(params=["python rows", "compiled rows"])
def depth_gradient_rows(request, monkeypatch):
    """The depth gradient's f and R: a Python call per row (few rows, the default here)
    or the compiled loop (`_numba.CompiledValues`, forced for every row count)."""
    if request.param == "compiled rows":
        from invimbed._backends import _numba

        monkeypatch.setattr(_numba, "COMPILED_ROWS", 0)
    return request.param


def test_per_sample_functions_with_finite_differences_match_numpy(depth_gradient_rows):
    """Only f, R, T given (plain Python, compiled by the backend): every derivative is
    the same nested central difference, with the same steps, in both backends. The
    backward pass differences ``f`` at ``z(t)`` of the dense output, and the two backends
    round that ``z`` differently in the last bit (numpy's matmul/einsum); a difference
    quotient turns one ulp of its point into ``eps / h ~ 2e-11`` relative (the rule's
    own accuracy, ``eps^(2/3)``). Measured: 4e-11 (RK45) and 7e-11 (RK23) entry by
    entry, 9e-12 relative to each field's largest entry; asserted 1e-9 and 1e-10. With
    exact derivatives (the from_sympy test) the backends agree to 1e-12 entry by entry."""
    problem = BolzaProblem(fd_f, fd_R, fd_T)
    kw = dict(control=Constant([0.2, 0.1]), rtol=1e-7, atol=1e-9)
    x = X[:2]
    depths = np.array([0.0, -0.4, -0.9])
    ref = solve_adjoint(problem, x, depths, **kw)
    res = solve_adjoint(problem, x, depths, backend="numba", **kw)
    assert ref.success and res.success, res.message
    assert_same(res, ref, rtol=1e-9, norm_rtol=1e-10)
    assert np.all(res.depth_grad[0] != 0) and np.all(res.nsteps[0] == 0)   # p = q


# -- (c) a failing row among good rows ------------------------------------------------------
def nan_above_two(t, z, th):
    # dz/dt = z, not finite for z > 2: x e^(q - p) > 2 fails
    return z + 0.0 * np.sqrt(2.0 - z)


def half_square(z):
    return 0.5 * z[0] ** 2


def half_square_running(t, z, th):
    return 0.5 * z[0] ** 2


def test_a_failing_row_among_good_rows_like_numpy(depth_gradient_rows):
    # traced (the default): the trace keeps the NaN of sqrt above z = 2, which sympy's
    # 0.0 * sqrt(2 - z) = 0 drops (invimbed._core.derivatives._domains)
    problem = BolzaProblem(nan_above_two, half_square_running, half_square)
    x = np.array([[0.5], [1.0], [0.3]])
    depths = np.array([0.0, -0.5, -1.0])
    kw = dict(rtol=1e-9, atol=1e-11)
    ref = solve_adjoint(problem, x, depths, **kw)
    res = solve_adjoint(problem, x, depths, backend="numba", **kw)
    assert res.derivatives.startswith("exact")
    assert not res.success and res.status == -1
    expected = np.zeros((3, 3), dtype=bool)
    expected[2, 1] = True                              # only 1.0 e^1 > 2
    np.testing.assert_array_equal(~np.isfinite(res.value), expected)
    np.testing.assert_array_equal(np.isnan(res.adjoint[..., 0]), expected)
    assert "forward solve failed for depth p = -1 and input x[1]" in res.message
    assert "not finite" in res.message and "1 of 9" in res.message
    assert res.message.split(" at t = ")[0] == ref.message.split(" at t = ")[0]
    t_fail = float(res.message.split(" at t = ")[1].split(":")[0])
    assert -1.0 < t_fail < np.log(2.0) - 1.0 + 1e-6      # where 1.0 e^(t + 1) reaches 2
    good = ~expected
    for k in FIELDS:
        np.testing.assert_allclose(np.asarray(res[k])[good], np.asarray(ref[k])[good],
                                   rtol=1e-10, atol=0, err_msg=k)


# -- (d) a stiff problem exhausts the step budget ---------------------------------------------
def stiff_f(t, z, th):
    return -1e6 * z


@pytest.mark.parametrize("max_steps", [2000, 10_000])
def test_stiff_problem_stops_early_and_suggests_implicit_methods(max_steps):
    """The kernel stops a row whose steps sit at the stability limit as the numpy
    ensemble does (`rules.stiff_stops`): at the same step, after well under a hundred
    steps rather than ``max_steps``."""
    problem = BolzaProblem(stiff_f, terminal_loss=half_square)
    res = solve_adjoint(problem, [1.0], [-1.0, -1e-6], max_steps=max_steps, backend="numba")
    ref = solve_adjoint(problem, [1.0], [-1.0, -1e-6], max_steps=max_steps)
    assert not res.success
    assert f"max_steps = {max_steps}" in res.message and "looks stiff" in res.message
    assert "Radau" in res.message and "BDF" in res.message
    # the same row fails at the same step; where (t) only to rounding: the step sizes
    # come from error estimates that cancel, and the backends round them differently
    assert res.message.split(" at t = ")[0] == ref.message.split(" at t = ")[0]
    assert np.isnan(res.value[0]) and np.isfinite(res.value[1])   # the short row succeeds
    assert res.nsteps[0] == ref.nsteps[0] and 25 <= res.nsteps[0] < 200   # before: max_steps
    t_res = float(res.message.split(" at t = ")[1].split(":")[0])
    t_ref = float(ref.message.split(" at t = ")[1].split(":")[0])
    np.testing.assert_allclose(t_res, t_ref, rtol=1e-6)
    np.testing.assert_allclose(res.z[1], np.exp(-1.0), rtol=1e-5)


# -- (e) what the kernel cannot run --------------------------------------------------------------
def test_other_controls_are_refused_naming_control():
    problem = BolzaProblem(fd_f, fd_R, fd_T)
    ctrl = invimbed.Control(lambda t, w: np.array([w[0], w[1] * t]), [0.2, 0.1])
    with pytest.raises(ValueError, match=r"`control`.*backend='numpy'"):
        solve_adjoint(problem, X[0], [-0.5], control=ctrl, backend="numba")


def testuncompilable_dynamics_problem_raises_backend_compile_error():
    from invimbed._backends import BackendCompileError

    # not traced: a traced problem runs the generated code, which compiles
    problem = BolzaProblem(uncompilable_dynamics, fd_R, fd_T, derivatives="finite-differences")
    with pytest.raises(BackendCompileError, match=r"`dynamics`.*uncompilable_dynamics"):
        solve_adjoint(problem, X[0], [-0.5], control=Constant([0.2, 0.1]), backend="numba")
