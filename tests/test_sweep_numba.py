"""The compiled adaptive sweep (``backend="numba"``, ``method="RK45"``/``"RK23"``) against
the numpy sweep, which steps the same jets with scipy's solvers.

Every test runs the one compiled kernel (`invimbed._backends._sweep_kernels`, cached on
disk: the first run on a machine compiles it, minutes on two shared cores; later runs
load it in about a second). ``from_sympy`` problems run on their Taylor-mode tapes, so
nothing is compiled per problem; the per-sample ``njit`` problem compiles its functions.
"""

from __future__ import annotations

import numpy as np
import pytest

numba = pytest.importorskip("numba")
sp = pytest.importorskip("sympy")

import invimbed  # noqa: E402
from invimbed import solve_adjoint, solve_imbedding  # noqa: E402
from problems import sympy_pendulum  # noqa: E402
from test_tol import lorenz, pendulum, within  # noqa: E402

FIELDS = ("z", "value", "adjoint", "param_grad", "depth_grad")
EST = ("z", "value", "adjoint", "param_grad")
X = np.array([0.3, -0.1])
DEPTHS = np.array([-1.0, -0.5, -0.2, 0.0])          # q itself, deepest first
CTRL = invimbed.Constant([0.1, 0.2])


def assert_same(res, ref, tol=1e-10):
    """Same fields, estimate and verdict, to ``tol`` relative to ``max(1, |ref|)``."""
    for k in FIELDS:
        np.testing.assert_allclose(res[k], ref[k], rtol=tol, atol=tol, err_msg=k)
    for k in EST:
        np.testing.assert_allclose(res.error_estimate[k], ref.error_estimate[k], rtol=tol,
                                   atol=tol, err_msg=f"error_estimate[{k}]")
    np.testing.assert_array_equal(res.converged, ref.converged)
    assert (res.success, res.status) == (ref.success, ref.status)


@pytest.fixture(scope="module")
def problem():
    return sympy_pendulum()


@pytest.mark.parametrize("method, order", [("RK45", 1), ("RK45", 2), ("RK45", 3), ("RK45", 4),
                                           ("RK23", 1), ("RK23", 3)])
def test_numba_sweep_equals_numpy(problem, method, order):
    kw = dict(control=CTRL, order=order, method=method)
    ref = solve_imbedding(problem, X, DEPTHS, **kw)
    res = solve_imbedding(problem, X, DEPTHS, backend="numba", **kw)
    assert_same(res, ref)
    assert res.nfev == ref.nfev            # the same steps, accepted and rejected


def test_each_input_is_the_numpy_sweep_of_that_input_alone(problem):
    """The batch is stepped per input: row b equals the numpy sweep of x[b] alone."""
    xs = np.array([[0.3, -0.1], [1.2, 0.4], [-0.7, 0.9]])
    res = solve_imbedding(problem, xs, DEPTHS, control=CTRL, order=2, backend="numba")
    assert res.z.shape == (DEPTHS.size, 3, 2)
    for b, x in enumerate(xs):
        ref = solve_imbedding(problem, x, DEPTHS, control=CTRL, order=2)
        np.testing.assert_array_equal(res.converged[:, b], ref.converged)
        for k in EST:
            np.testing.assert_allclose(res.error_estimate[k][:, b], ref.error_estimate[k],
                                       rtol=1e-10, atol=1e-10)
        for k in FIELDS:
            np.testing.assert_allclose(res[k][:, b], ref[k], rtol=1e-10, atol=1e-10)


def test_a_divergent_series_is_refused_by_the_ratio_test():
    """Lorenz-63 at s = 1: the jet series grows with the order; numba stops at once, as
    numpy does (tests/test_tol.py)."""
    kw = dict(tol=1e-3, max_order=6)
    ref = solve_imbedding(lorenz(), [1.0, 1.0, 20.0], [-1.0], **kw)
    res = solve_imbedding(lorenz(), [1.0, 1.0, 20.0], [-1.0], backend="numba", **kw)
    assert res.orders_run == ref.orders_run == [1]
    assert (res.success, res.status) == (False, -2) and not res.converged[0]
    assert "does not converge" in res.message and "depth p = -1" in res.message
    np.testing.assert_allclose(res.series_ratio, ref.series_ratio, rtol=1e-8)


def test_tol_raises_the_order_and_fallback_recomputes():
    """``tol``: the same orders, verdicts and fields as numpy. With ``fallback``, the
    order loop weighs each sweep's measured cost against the exact solve's, so which pairs
    fall back depends on the backend's speed; every pair ends within ``tol``."""
    pb, x, w = pendulum(), [0.5, 0.5], invimbed.Constant([0.5])
    depths = -np.array([0.1, 0.3, 3.0])
    exact = solve_adjoint(pb, x, depths, control=w, rtol=1e-12, atol=1e-14)
    kw = dict(control=w, tol=1e-4, max_order=4)
    ref = solve_imbedding(pb, x, depths, **kw)
    res = solve_imbedding(pb, x, depths, backend="numba", **kw)
    assert res.orders_run == ref.orders_run and res.order == ref.order > 1
    np.testing.assert_array_equal(res.depth_order, ref.depth_order)
    np.testing.assert_array_equal(res.converged, ref.converged)
    assert (res.success, res.status) == (ref.success, ref.status) == (False, -2)
    for k in FIELDS:
        np.testing.assert_allclose(res[k], ref[k], rtol=1e-8, atol=1e-10)
    assert within(res, exact, 1e-4, 1e-4)[res.converged].all()
    fb = solve_imbedding(pb, x, depths, backend="numba", fallback="adjoint", **kw)
    assert fb.success and fb.status == 0 and fb.exact_fallback[2]
    assert not (fb.converged & fb.exact_fallback).any()
    assert within(fb, exact, 1e-4, 1e-4).all()


def test_a_batch_with_one_failing_input_reports_it_and_keeps_the_others():
    """dz/dt = -z + log(z): not finite for the input x = -0.5, at its first evaluation;
    the input x = 0.5 reaches every depth, with the fields of its numpy sweep alone."""
    t, z = sp.symbols("t z")
    pb = invimbed.from_sympy(t, [z], [], [-z + sp.log(z)], None, z**2 / 2)
    depths = np.array([-0.1, -0.5, -1.0])
    res = solve_imbedding(pb, [[0.5], [-0.5]], depths, backend="numba")
    assert not res.success and res.status == -1
    assert "x[1]" in res.message and "first evaluation" in res.message
    assert "1 of 2 inputs failed" in res.message
    ok = solve_imbedding(pb, [0.5], depths)
    for k in FIELDS:
        np.testing.assert_allclose(res[k][:, 0], ok[k], rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(res.converged[:, 0], ok.converged)
    assert np.isnan(res.z[:, 1]).all() and np.isnan(res.adjoint[:, 1]).all()
    alone = solve_imbedding(pb, [-0.5], depths, backend="numba")
    assert alone.status == -1 and "first evaluation" in alone.message


def test_kept_steps_give_the_states_at_the_depths(problem):
    """The dense-output record (`SweepSteps`): its continuous extension at a requested
    depth is the state the sweep recorded there; room for 2 steps forces the rerun."""
    from invimbed._backends.sweep_adaptive import sweep_numba_adaptive
    from invimbed._core.setup.arguments import prepare
    from invimbed._core.setup.settings import Accuracy

    xs = np.array([[0.3, -0.1], [1.2, 0.4]])
    setup = prepare(problem, xs, DEPTHS, CTRL, "RK45", 1e-6, 1e-9, None, ("RK45",))
    res, steps = sweep_numba_adaptive(setup, order=2, method="RK45", rtol=1e-6, atol=1e-9,
                                      est=True, accuracy=Accuracy(ratio_test=False),
                                      look_ahead=False,
                                      warnings_=[], keep_steps=2)
    assert steps.n_steps.min() > 2 and steps.y_old.shape[1] == steps.n_steps.max()
    assert steps.Q.shape[-1] == 4 and np.all(steps.h[steps.t_old != 0] < 0)
    for b in range(2):
        for i, p in enumerate(DEPTHS):
            y = steps.state(b, p)
            got = steps.step_fields(y, 0)
            np.testing.assert_allclose(got["z"], res.z[i, b], rtol=1e-12, atol=1e-14)
            np.testing.assert_allclose(got["adjoint"], res.adjoint[i, b], rtol=1e-12,
                                       atol=1e-14)
            np.testing.assert_allclose(got["param_grad"], res.param_grad[i, b], rtol=1e-12,
                                       atol=1e-14)


@pytest.mark.parametrize("sparse", ["dense", "entries", "rows"])
@pytest.mark.parametrize("order", [0, 1, 2, 3, 4])
def test_compiled_jet_rhs_equals_the_numpy_closure(problem, order, sparse):
    """`_numba_kernels.jet_rhs` on the tables of `_numba._jet_tables` is
    `JetClosure._rhs_jet` transcribed: equal to 1e-13 at every order the sweep carries,
    also where a third of the state is zero (the products it skips), and where a
    parameter row is zero and another is zero above degree 1 (the rows it leaves out or
    takes only for its low coefficients); the list of products is built at the first
    call and reused at a second call on another state."""
    from invimbed._backends._numba import _jet_tables
    from invimbed._backends._numba_kernels import jet_rhs, jet_scratch, operator_size
    from invimbed._core.closures import JetClosure
    from invimbed._core.derivatives.multiindex import n_coefficients

    prov = problem.derivative_provider
    clo = JetClosure(prov, CTRL, X[None], 0.0, order=max(order, 1), estimate_error=True,
                     ratio_test=order == 0)
    rng = np.random.default_rng(order)
    N, nw = 2, 2
    cZ, cV = n_coefficients(N, order), n_coefficients(N, order + 1)
    off = clo.layout.slices[f"Z{order}"].start
    oW = off + N * cZ + cV
    coef = clo.coefficients(-0.3)
    cm = n_coefficients(N, order + 2)
    cp, cg = coef["Phi"].shape[-1], coef["G"].shape[-1]
    tab = _jet_tables(N, order)
    ops = jet_scratch(N, nw, cm, np.array([operator_size(N, tab)]))
    for call in range(2):
        y = rng.normal(size=clo.layout.size)
        if sparse == "entries":
            y[rng.random(y.size) < 1 / 3] = 0.0
        if sparse == "rows":
            y[oW + call * cV:oW + (call + 1) * cV] = 0.0               # one row zero
            y[oW + (1 - call) * cV + 1 + N:oW + (2 - call) * cV] = 0.0  # one of degree 1
        ref = clo.layout.unpack(clo.rhs(-0.3, y))
        dy = np.zeros_like(y)
        jet_rhs(N, nw, cZ, cV, tab, np.ascontiguousarray(coef["Phi"][0]),
                np.ascontiguousarray(coef["R"][0]), np.ascontiguousarray(coef["G"][0]),
                np.ascontiguousarray(coef["Rw"][0]), y, off, dy, ops, 0, np.empty((N, cm)),
                np.empty((nw, cm)), np.empty(max(N, nw + 1), np.int64),
                np.array([[cp] * N, [cg] * N]), np.empty(max(N, nw + 1)))
        assert ops[3][0, 4] == 1        # built, and kept for the second call
        got = clo.layout.unpack(dy)
        for key in (f"Z{order}", f"V{order}", f"W{order}"):
            np.testing.assert_allclose(got[key], ref[key], rtol=1e-13, atol=1e-13,
                                       err_msg=f"{key}, call {call}")


@pytest.mark.parametrize("derivatives", [False, True])
def test_per_sample_njit_functions_run_on_the_derivative_plan(derivatives):
    """Per-sample ``numba.njit`` functions at jet order 1: first derivatives given (the
    rest traced: the tapes of the traced expressions), or none with finite differences
    by the rule of `FiniteDifferences` (the derivative plan): the numpy sweep of the
    same functions."""
    from test_backends import CTRL as ctrl, pendulum_njit

    problem = pendulum_njit(derivatives)
    ref = solve_imbedding(problem, X, DEPTHS, control=ctrl)
    res = solve_imbedding(problem, X, DEPTHS, control=ctrl, backend="numba")
    assert_same(res, ref, tol=1e-9)


def test_budget_min_step_and_other_closures_end_as_on_numpy(problem):
    """``max_steps`` and ``min_step`` stop the sweep where and with the words numpy's
    does; closures other than the jet are refused before any work."""
    for kw in (dict(max_steps=3), dict(min_step=0.3)):
        ref = solve_imbedding(problem, X, DEPTHS, control=CTRL, **kw)
        res = solve_imbedding(problem, X, DEPTHS, control=CTRL, backend="numba", **kw)
        assert res.status == ref.status == -1 and res.message == ref.message
        for k in FIELDS:
            np.testing.assert_allclose(res[k], ref[k], rtol=1e-10, atol=1e-12)
    for closure in ("crop", "stencil"):
        with pytest.raises(ValueError, match=f"closure='jet' only.*{closure}.*backend='numpy'"):
            solve_imbedding(problem, X, DEPTHS, control=CTRL, backend="numba", closure=closure)


def sympy_lq():
    """`test_dense`'s LQ problem written with sympy, so that it runs on the numba tapes."""
    from test_dense import LQ

    t = sp.Symbol("t")
    z = sp.Matrix(sp.symbols("z0 z1"))
    th = sp.Matrix([sp.Symbol("u")])
    A, B, Q, Rth, PT = (sp.Matrix(LQ[k]) for k in ("A", "B", "Q", "Rth", "PT"))
    f = list(A * z + B * th)
    R = ((z.T * Q * z)[0] + (th.T * Rth * th)[0]) / 2
    T = (z.T * PT * z)[0] / 2
    return invimbed.from_sympy(t, list(z), list(th), f, R, T)


@pytest.mark.parametrize("method", ["RK45", "RK23"])
def test_numba_dense_output_equals_the_numpy_one(problem, method):
    """`sol(p)` of the numba sweep is that of the numpy sweep at random depths: the same
    steps, so the same continuous extension; in a batch, input b's is that of the numpy
    sweep of x[b] alone (each input has its own steps)."""
    kw = dict(control=CTRL, order=2, method=method, dense_output=True)
    if method == "RK23":     # the dense output runs RK23 30x tighter: a looser request
        # keeps the numpy sweeps short
        kw.update(rtol=1e-4, atol=1e-7)
    xs = np.array([[0.3, -0.1], [1.2, 0.4]])
    res = solve_imbedding(problem, xs, DEPTHS, backend="numba", **kw)
    assert res.sol.interval == (-1.0, 0.0)   # x[1] not converged at -1: as on numpy
    p = np.random.default_rng(3).uniform(-1.0, 0.0, 40)
    got = res.sol(p)
    for b, x in enumerate(xs):
        ref = solve_imbedding(problem, x, DEPTHS, **kw).sol(p)
        np.testing.assert_array_equal(got.converged[:, b], ref.converged)
        for k in FIELDS:
            np.testing.assert_allclose(got[k][:, b], ref[k], rtol=1e-10, atol=1e-10,
                                       err_msg=k)
        for k in EST:
            np.testing.assert_allclose(got.error_estimate[k][:, b], ref.error_estimate[k],
                                       rtol=1e-10, atol=1e-10, err_msg=k)
    one = solve_imbedding(problem, X, DEPTHS, backend="numba", **kw)
    assert_same(one.sol(p), solve_imbedding(problem, X, DEPTHS, **kw).sol(p))
    again = one.sol(DEPTHS)                    # the requested depths, from the steps
    for k in FIELDS:
        np.testing.assert_allclose(again[k], one[k], rtol=1e-12, atol=1e-13, err_msg=k)


@pytest.mark.parametrize("method", ["RK45", "RK23"])
def test_numba_dense_output_of_lq_matches_the_ensemble(method):
    """The LQ problem (where the jet is exact) against the exact ensemble at random depths,
    within the dense output's stated accuracy, the requested tolerance
    (tests/test_dense.py)."""
    from test_dense import (ATOL, DENSE_FACTOR, RTOL, X as XL, error_in_tolerance_units,
                            exact, random_depths)

    pb, ctrl = sympy_lq(), invimbed.Constant([0.3])
    res = solve_imbedding(pb, XL, [-3.0, 0.0], control=ctrl, backend="numba", method=method,
                          dense_output=True, rtol=RTOL, atol=ATOL)
    assert res.success and res.sol.interval == (-3.0, 0.0)
    p = random_depths(200, -3.0, 0.0, seed=4)
    got = res.sol(p)
    units = error_in_tolerance_units(got, exact(pb, ctrl, p))
    assert max(units.values()) < DENSE_FACTOR, units
    assert got.success and got.status == 0 and np.all(got.converged)


def _depth_gradient_reference(problem, x, depths, knots, values, adjoint):
    """``-(Lam . f(p, x, theta(p)) + R(p, x, theta(p)))`` from the problem's own ``f`` and
    ``R``, with ``theta(p)`` the piece above ``p`` at a knot (docs/theory.md)."""
    out = []
    for p, lam in zip(depths, adjoint):
        k = int(np.clip(np.searchsorted(knots, p, side="right") - 1, 0, len(values) - 1))
        th = np.asarray(values[k], dtype=float)[None]
        f = problem.dynamics(p, x[None], th)[0]
        R = problem.running_loss(p, x[None], th)[0]
        out.append(-(lam @ f + R))
    return np.array(out)


@pytest.mark.parametrize("forcing", [0.0, 0.3])
def test_depth_gradient_of_an_autonomous_problem_comes_from_the_kernel(monkeypatch, forcing):
    """An autonomous ``from_sympy`` problem (``forcing = 0``): the kernel records ``f`` and
    ``R`` at ``x`` from the piece's Taylor coefficients, and the core evaluates them only at
    ``q``, an interior knot here, where theta(q) is the piece above ``q``, not the first
    swept one. A problem that reads ``t`` (``forcing = 0.3``): the core computes every
    depth. Both against the definition, depths on knots included."""
    from invimbed._backends import sweep_adaptive

    rows = []
    real = sweep_adaptive._depth_gradients

    def counted(setup, adjoint, *rest):
        rows.append(int(np.all(np.isfinite(adjoint), axis=-1).sum()))
        return real(setup, adjoint, *rest)

    monkeypatch.setattr(sweep_adaptive, "_depth_gradients", counted)
    pb = sympy_pendulum(forcing=forcing)
    knots = np.array([-1.0, -0.6, -0.3, 0.0, 0.4])
    values = np.array([[0.1, 0.2], [-0.3, 0.1], [0.2, -0.1], [0.5, 0.3]])
    ctrl = invimbed.PiecewiseConstant(knots, values)
    depths = np.array([-1.0, -0.6, -0.45, -0.3, -0.1, 0.0])
    res = solve_imbedding(pb, X, depths, control=ctrl, order=2, backend="numba",
                          rtol=1e-9, atol=1e-11)
    assert res.success
    ref = _depth_gradient_reference(pb, X, depths, knots, values, res.adjoint)
    np.testing.assert_allclose(res.depth_grad, ref, rtol=1e-12, atol=1e-13)
    assert rows == ([1] if forcing == 0.0 else [depths.size])
    num = solve_imbedding(pb, X, depths, control=ctrl, order=2, rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(res.depth_grad, num.depth_grad, rtol=1e-10, atol=1e-10)
    if forcing == 0.0:          # the last knot at q: theta(q) is the first piece's
        rows.clear()
        top = invimbed.PiecewiseConstant(knots[:-1], values[:-1])
        res = solve_imbedding(pb, X, depths, control=top, order=2, backend="numba",
                              rtol=1e-9, atol=1e-11)
        ref = _depth_gradient_reference(pb, X, depths, knots[:-1], values[:-1], res.adjoint)
        np.testing.assert_allclose(res.depth_grad, ref, rtol=1e-12, atol=1e-13)
        assert rows == []
