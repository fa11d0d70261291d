"""Tests of the exact ensemble, ``solve_adjoint(strategy="ensemble")``.

References, all independent of the ensemble's code:

* closed forms (`problems.lq_closed_form`) for linear-quadratic problems;
* ``strategy="per_depth"`` (scipy's ``solve_ivp`` solvers, one depth at a time) and a
  brute-force forward ``solve_ivp`` (`problems.brute_force`) for nonlinear problems;
* ``scipy.integrate.solve_ivp`` itself for the row integrator: a single row takes the
  steps scipy takes.

Error measure: ``rel_err`` of test_adjoint (max-norm relative error over a whole field).
Tolerances: the solvers run at rtol 1e-10, atol 1e-12; the fields are asserted within
1e-7 relative (observed 1e-11 .. 1e-9).
"""

from __future__ import annotations

import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.integrate import solve_ivp

import invimbed
from invimbed._core.integrators.ensemble import DONE, MAX_STEPS, TABLEAUX, integrate_rows
from problems import (brute_force, lq_closed_form, lq_matrices, lq_problem, pendulum_functions,
                      piecewise_theta)

FIELDS = ("z", "value", "adjoint", "param_grad", "depth_grad")
TIGHT = dict(rtol=1e-10, atol=1e-12)


def rel_err(got, exp) -> float:
    got, exp = np.asarray(got, dtype=float), np.asarray(exp, dtype=float)
    assert got.shape == exp.shape, (got.shape, exp.shape)
    return float(np.max(np.abs(got - exp)) / max(np.max(np.abs(exp)), 1e-300))


PEND = pendulum_functions()                      # time-dependent forcing, N = M = 2
PEND_CONTROL = invimbed.PiecewiseConstant(
    [-2.0, -1.3, -0.6, -0.1, 0.0], [[0.3, 0.1], [-0.2, 0.2], [0.5, 0.05], [0.1, 0.3]])
PEND_X = np.array([[0.4, -0.2], [1.0, 0.3], [-0.5, 0.5]])


# ---------------------------------------------------------------------------------------
# 1. The row integrator is scipy's method, row by row
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("method", ["RK45", "RK23"])
def test_a_single_row_takes_scipys_steps(method):
    def f(t, y):
        return np.array([y[1], -np.sin(y[0]) + np.cos(t)])

    y0 = np.array([0.5, 0.1])
    sol = solve_ivp(f, (-2.0, 0.5), y0, method=method, rtol=1e-6, atol=1e-9)
    out = integrate_rows(lambda t, y, rows, piece: np.stack(
        [y[:, 1], -np.sin(y[:, 0]) + np.cos(t)], axis=1),
        np.array([-2.0]), np.array([0.5]), y0[None], tableau=TABLEAUX[method], rtol=1e-6,
        atol=1e-9, max_steps=10_000)
    assert out.status[0] == DONE
    assert out.nfev == sol.nfev                  # same first step, same accepts/rejects
    np.testing.assert_allclose(out.y[0], sol.y[:, -1], rtol=1e-14)


def test_rows_are_independent_of_each_other():
    # a row's steps depend on its own error only: solving it with other rows changes
    # nothing
    prob = PEND.problem()
    depths = np.array([-0.3, -1.1, -1.9])
    together = invimbed.solve_adjoint(prob, PEND_X, depths, control=PEND_CONTROL, **TIGHT)
    for b in range(PEND_X.shape[0]):
        alone = invimbed.solve_adjoint(prob, PEND_X[b], depths, control=PEND_CONTROL, **TIGHT)
        for k in FIELDS:
            np.testing.assert_allclose(together[k][:, b], alone[k], rtol=1e-13, atol=1e-15,
                                       err_msg=k)
        np.testing.assert_array_equal(together.nsteps[:, b], alone.nsteps)


# ---------------------------------------------------------------------------------------
# 2. Exact answers: closed forms and the per-depth reference
# ---------------------------------------------------------------------------------------
# 5 examples, not 15: the same property on the same code path (solve_adjoint's default
# ensemble, RK45, against lq_closed_form, every field to 1e-7) is drawn 40 times, over
# larger sizes, q, depth orders and p = q, by
# test_adjoint::test_lq_all_fields_match_closed_form; this one adds the solver's finer
# rtol=1e-11, atol=1e-14 and the strategy reported
@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow],
          derandomize=True)
@given(mats=lq_matrices(max_n=4, max_m=2, min_m=1), batch=st.integers(1, 3),
       data=st.data())
def test_linear_quadratic_closed_form(mats, batch, data):
    N, M = mats["B"].shape
    w = np.array(data.draw(st.lists(st.floats(-1, 1), min_size=M, max_size=M)))
    x = np.array(data.draw(st.lists(st.floats(-1, 1), min_size=batch * N,
                                    max_size=batch * N))).reshape(batch, N)
    depths = np.array([0.0, -0.4, -1.0])
    res = invimbed.solve_adjoint(lq_problem(**mats), x, depths,
                                 control=invimbed.Constant(w), rtol=1e-11, atol=1e-14)
    assert res.success and res.strategy == "ensemble"
    for i, p in enumerate(depths):
        exact = lq_closed_form(**mats, x=x, w=w, p=p)
        for k in FIELDS:
            scale = max(np.max(np.abs(exact[k])), 1e-6)   # fields that vanish: absolute
            assert np.max(np.abs(res[k][i] - exact[k])) <= 1e-7 * scale, (k, p)


def test_matches_per_depth_with_knots_between_depths_and_time_dependent_dynamics():
    # forcing cos(1.3 t) in f; the control jumps at -1.3, -0.6, -0.1, between the depths
    prob = PEND.problem()
    depths = np.linspace(0.0, -1.9, 12)
    ens = invimbed.solve_adjoint(prob, PEND_X, depths, control=PEND_CONTROL, **TIGHT)
    ref = invimbed.solve_adjoint(prob, PEND_X, depths, control=PEND_CONTROL,
                                 strategy="per_depth", **TIGHT)
    assert ens.success and ref.success
    assert ens.strategy == "ensemble" and ref.strategy == "per_depth"
    for k in FIELDS:
        assert rel_err(ens[k], ref[k]) < 1e-7, k


def test_output_and_loss_match_a_brute_force_forward_solve():
    prob = PEND.problem()
    depths = np.array([-0.05, -0.65, -1.35, -2.0])     # just below each knot, and p_min
    ens = invimbed.solve_adjoint(prob, PEND_X, depths, control=PEND_CONTROL, **TIGHT)
    theta = piecewise_theta(PEND_CONTROL.knots, PEND_CONTROL.values)
    for i, p in enumerate(depths):
        zq, J = brute_force(PEND, PEND_X, p, theta, breakpoints=PEND_CONTROL.knots)
        assert rel_err(ens.z[i], zq) < 1e-8
        assert rel_err(ens.value[i], J) < 1e-8


def test_depth_gradient_is_the_derivative_of_the_loss_in_depth():
    # central differences of V(p) in p, away from the knots
    prob = PEND.problem()
    p0, h = -0.9, 1e-4
    res = invimbed.solve_adjoint(prob, PEND_X[0], [p0 + h, p0, p0 - h],
                                 control=PEND_CONTROL, rtol=1e-12, atol=1e-14)
    fd = (res.value[0] - res.value[2]) / (2 * h)
    assert abs(res.depth_grad[1] - fd) <= 1e-6 * max(1.0, abs(fd))


@pytest.mark.parametrize("vectorized", [True, False])
def test_time_dependent_callables_vectorised_or_per_sample(vectorized):
    # vectorized callables take the rows' times as an array (B,); per-sample ones row by row
    fns = PEND
    if vectorized:
        prob = fns.problem()
    else:
        prob = invimbed.BolzaProblem(lambda t, z, th: fns.f(t, z[None], th[None])[0],
                                     lambda t, z, th: fns.R(t, z[None], th[None])[0],
                                     lambda z: fns.T(z[None])[0])
    depths = np.array([0.0, -0.8, -1.5])
    ens = invimbed.solve_adjoint(prob, PEND_X[:2], depths, control=PEND_CONTROL, **TIGHT)
    ref = invimbed.solve_adjoint(fns.problem(), PEND_X[:2], depths, control=PEND_CONTROL,
                                 strategy="per_depth", **TIGHT)
    for k in FIELDS:
        # finite-difference derivatives (per-sample problem) are good to ~1e-8
        assert rel_err(ens[k], ref[k]) < (1e-7 if vectorized else 1e-5), k


def test_autonomous_declaration_is_checked_and_used():
    def f(t, z, th):
        return -z + th

    def T(z):
        return 0.5 * np.sum(z * z, axis=-1)

    auto = invimbed.BolzaProblem(f, terminal_loss=T, vectorized=True, autonomous=True)
    res = invimbed.solve_adjoint(auto, [[1.0], [2.0]], [-0.5, -1.0],
                                 control=invimbed.Constant([0.3]), **TIGHT)
    s = np.array([0.5, 1.0])[:, None]
    z = 0.3 + (np.array([1.0, 2.0])[None] - 0.3) * np.exp(-s)        # closed form
    np.testing.assert_allclose(res.z[..., 0], z, rtol=1e-9)
    lying = invimbed.BolzaProblem(lambda t, z, th: -z + t, terminal_loss=T, vectorized=True,
                                  autonomous=True)
    with pytest.raises(ValueError, match="autonomous=True.*`dynamics` depends on t"):
        invimbed.solve_adjoint(lying, [1.0], [-1.0])


def test_from_sympy_rows_at_their_own_times():
    sp = pytest.importorskip("sympy")
    t, a, v, u = sp.symbols("t a v u")
    problem = invimbed.from_sympy(t, [a, v], [u], [v, -sp.sin(a) + u + 0.3 * sp.cos(1.3 * t)],
                                  running_loss=0.1 * a ** 2 + 0.05 * u ** 2,
                                  terminal_loss=(a - 1) ** 2 / 2 + v ** 2 / 2)
    control = invimbed.PiecewiseConstant([-1.5, -0.7, 0.0], [0.4, -0.3])
    depths = np.linspace(0.0, -1.5, 7)
    x = [[0.3, 0.1], [-0.2, 0.4]]
    ens = invimbed.solve_adjoint(problem, x, depths, control=control, **TIGHT)
    ref = invimbed.solve_adjoint(problem, x, depths, control=control, strategy="per_depth",
                                 **TIGHT)
    for k in FIELDS:
        assert rel_err(ens[k], ref[k]) < 1e-7, k


# ---------------------------------------------------------------------------------------
# 3. Honest per row: failures, stiffness, budgets
# ---------------------------------------------------------------------------------------
def _blowing_up():
    # dz/dt = z^2: finite for x (q - p) < 1, infinite from there on
    return invimbed.BolzaProblem(lambda t, z, th: z * z,
                                 terminal_loss=lambda z: 0.5 * np.sum(z * z, axis=-1),
                                 vectorized=True, autonomous=True)


def test_a_failing_row_among_good_ones():
    x = np.array([[0.2], [1.5], [0.5]])                 # x = 1.5 blows up before s = 1
    depths = np.array([0.0, -0.5, -1.0])
    res = invimbed.solve_adjoint(_blowing_up(), x, depths, **TIGHT)
    assert not res.success and res.status == -1
    failed = ~np.isfinite(res.value)
    # rows with x s >= 1 fail: (x=1.5, s=1.0) only (x=1.5, s=0.5 gives 0.75 < 1)
    expected = np.zeros((3, 3), dtype=bool)
    expected[2, 1] = True
    np.testing.assert_array_equal(failed, expected)
    assert "depth p = -1" in res.message and "input x[1]" in res.message
    assert "1 of 9" in res.message
    good = ~failed
    s = -depths[:, None] * np.ones((1, 3))
    z = x[:, 0][None] / (1 - x[:, 0][None] * s)
    np.testing.assert_allclose(res.z[..., 0][good], z[good], rtol=1e-8)


def test_non_finite_dynamics_fail_fast_instead_of_hanging():
    prob = invimbed.BolzaProblem(lambda t, z, th: z * np.nan,
                                 terminal_loss=lambda z: np.sum(z, axis=-1), vectorized=True)
    for strategy in ("ensemble", "per_depth"):
        start = time.perf_counter()
        res = invimbed.solve_adjoint(prob, [1.0], [-1.0], strategy=strategy)
        assert time.perf_counter() - start < 10.0
        assert not res.success
        assert "not finite" in res.message and "depth p = -1" in res.message


STIFF = invimbed.BolzaProblem(lambda t, z, th: -1e6 * z,
                              terminal_loss=lambda z: 0.5 * np.sum(z * z, axis=-1),
                              vectorized=True, autonomous=True)


@pytest.mark.parametrize("method, strategy", [("RK45", "ensemble"), ("RK23", "ensemble"),
                                              ("RK45", "per_depth"), ("DOP853", "per_depth")])
def test_a_stiff_problem_on_an_explicit_method_stops_early(method, strategy):
    """dz/dt = -1e6 z from p = -1: at its stability limit (h |lambda| about 3.3 for
    RK45) the explicit method would need about 3e5 steps. The row stops once 25
    accepted steps in a row sat at the limit and the steps left exceed the budget (the
    sweep's rule, `rules.stiff_stops`), after a few dozen steps (RK23, whose estimate
    hovers about the threshold: under 300), not ``max_steps = 10000``; the message says
    so and names the implicit methods."""
    res = invimbed.solve_adjoint(STIFF, [1.0], [-1.0], method=method, strategy=strategy)
    assert not res.success and res.status == -1
    assert "looks stiff" in res.message and "max_steps = 10000" in res.message
    assert "Radau" in res.message and "BDF" in res.message
    assert "forward solve failed for depth p = -1" in res.message
    assert 25 <= np.max(res.nsteps) < 400, res.nsteps      # before: 10000


def test_a_row_stopped_as_stiff_leaves_its_neighbours_bit_for_bit():
    """The rule only stops rows: a stiff row (lambda = -1e6) among non-stiff ones stops
    early with `MAX_STEPS`, and the others take the steps they take alone."""
    lam = np.array([-1.0, -1e6, -30.0])

    def rhs(t, y, rows, piece):
        return lam[rows][:, None] * y

    kw = dict(tableau=TABLEAUX["RK45"], rtol=1e-8, atol=1e-10, max_steps=10_000)
    both = integrate_rows(rhs, np.zeros(3), np.ones(3), np.ones((3, 2)), **kw)
    assert both.status[1] == MAX_STEPS and both.nsteps[1] < 200
    assert both.h_lambda[1] > 2.0 and 0.0 < both.t[1] < 1e-3
    for r in (0, 2):
        alone = integrate_rows(lambda t, y, rows, piece: lam[r] * y, np.zeros(1), np.ones(1),
                               np.ones((1, 2)), **kw)
        assert both.status[r] == alone.status[0] == DONE
        assert both.nsteps[r] == alone.nsteps[0]
        np.testing.assert_array_equal(both.y[r], alone.y[0])


def test_a_mildly_stiff_problem_within_the_budget_is_not_stopped():
    """dz/dt = -1e3 z from p = -1: RK45 spends some 300 steps per pass at its stability
    limit. With room in the budget it is not stopped (the projected-steps half of the
    rule) and gets the closed form; with a budget the steps left at that size cannot
    fit in, it stops as soon as the rule sees it, before the budget is spent."""
    mild = invimbed.BolzaProblem(lambda t, z, th: -1e3 * z,
                                 terminal_loss=lambda z: 0.5 * np.sum(z * z, axis=-1),
                                 vectorized=True, autonomous=True)
    for strategy in ("ensemble", "per_depth"):
        res = invimbed.solve_adjoint(mild, [1.0], [-1.0, -0.01], strategy=strategy,
                                     max_steps=1000)
        assert res.success, res.message
        assert np.max(res.nsteps) > 400            # hundreds of steps at the limit
        np.testing.assert_allclose(res.z[:, 0], np.exp(-1e3 * np.array([1.0, 0.01])),
                                   rtol=1e-5, atol=1e-9)
        short = invimbed.solve_adjoint(mild, [1.0], [-1.0], strategy=strategy,
                                       max_steps=250)
        assert not short.success and "looks stiff" in short.message
        assert np.max(short.nsteps) < 250, short.nsteps      # before: the whole 250


def test_stiff_problem_runs_out_of_steps_and_names_the_remedy():
    stiff = invimbed.BolzaProblem(lambda t, z, th: -1e6 * z,
                                  terminal_loss=lambda z: 0.5 * np.sum(z * z, axis=-1),
                                  vectorized=True, autonomous=True)
    res = invimbed.solve_adjoint(stiff, [1.0], [-1.0], max_steps=2000)
    assert not res.success
    assert "max_steps = 2000" in res.message and "looks stiff" in res.message
    assert "Radau" in res.message
    # the implicit methods run depth by depth, and the result says so
    rad = invimbed.solve_adjoint(stiff, [1.0], [-1e-6, -2e-6], method="Radau", rtol=1e-8,
                                 atol=1e-12)
    assert rad.success and rad.strategy == "per_depth"
    assert rad.warnings and rad.warnings[0].code == "ran_per_depth"
    assert "Radau" in str(rad.warnings[0]) and "per_depth" in str(rad.warnings[0])
    assert "per_depth" not in rad.message       # in `warnings`, not repeated in the message
    np.testing.assert_allclose(rad.z[:, 0], np.exp(-1e6 * np.array([1e-6, 2e-6])), rtol=1e-6)


def test_a_non_stiff_budget_overrun_asks_for_more_steps():
    res = invimbed.solve_adjoint(_blowing_up(), [0.1], [-1.0], max_steps=3, **TIGHT)
    assert not res.success and "increase `max_steps`" in res.message


# ---------------------------------------------------------------------------------------
# 4. Arguments
# ---------------------------------------------------------------------------------------
def test_unknown_keywords_and_bad_choices_are_named():
    prob = _blowing_up()
    with pytest.raises(TypeError, match="'rtoll'"):
        invimbed.solve_adjoint(prob, [0.1], [-1.0], rtoll=1e-6)
    with pytest.raises(ValueError, match="`strategy` must be one of"):
        invimbed.solve_adjoint(prob, [0.1], [-1.0], strategy="vectorised")
    with pytest.raises(ValueError, match="`backend` must be one of"):
        invimbed.solve_adjoint(prob, [0.1], [-1.0], backend="jax")
    with pytest.raises(ValueError, match="`max_steps` must be a positive integer"):
        invimbed.solve_adjoint(prob, [0.1], [-1.0], max_steps=0)
    with pytest.raises(ValueError, match="`first_step` must be a positive number"):
        invimbed.solve_adjoint(prob, [0.1], [-1.0], first_step=-1.0)


def test_first_and_max_step_are_honoured():
    prob = _blowing_up()
    res = invimbed.solve_adjoint(prob, [0.1], [-1.0], max_step=0.01, **TIGHT)
    assert res.nsteps[0] >= 200                        # forward and backward, >= 100 each
    assert rel_err(res.z[0], [0.1 / (1 - 0.1)]) < 1e-9


def test_rk23_is_exact_too():
    prob = PEND.problem()
    depths = np.array([0.0, -0.7, -1.6])
    a = invimbed.solve_adjoint(prob, PEND_X[0], depths, control=PEND_CONTROL, method="RK23",
                               rtol=1e-9, atol=1e-12)
    b = invimbed.solve_adjoint(prob, PEND_X[0], depths, control=PEND_CONTROL, **TIGHT)
    for k in FIELDS:
        assert rel_err(a[k], b[k]) < 1e-6, k


def test_dense_output_takes_the_step_that_holds_t():
    """Rows integrated forwards and backwards, one with no step: at each step's start the
    dense output gives that step's start value (the step found is the one that begins
    there, not the one that ends there), and between steps the solution ``e^t``."""
    out = integrate_rows(lambda t, y, rows, piece: y, np.array([0.0, 1.0, 0.3, -0.2]),
                         np.array([1.0, -0.5, 0.3, -1.1]), np.ones((4, 1)),
                         tableau=TABLEAUX["RK45"], rtol=1e-10, atol=1e-12, max_steps=1000,
                         record=True)
    dense = out.dense
    assert np.all(out.status == DONE) and dense.start[3] == dense.start[2]   # row 2: none
    for r in (0, 1, 3):
        steps = np.arange(dense.start[r], dense.start[r + 1])
        assert steps.size > 3
        rows = np.full(steps.size, r)
        np.testing.assert_array_equal(dense(dense.t_old[steps], rows), dense.y_old[steps])
        mid = dense.t_old[steps] + 0.5 * dense.h[steps]
        start = np.exp(-np.array([0.0, 1.0, 0.3, -0.2]))[r]
        np.testing.assert_allclose(dense(mid, rows)[:, 0], start * np.exp(mid), rtol=1e-8)
