"""Dense output of the sweep: ``solve_imbedding(..., dense_output=True).sol(p)`` against
the exact ensemble (`solve_adjoint`) at random depths, against the sweep's own grid, and
the errors for what it cannot do (docs/accuracy.md, "Dense output: any depth from one
sweep")."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.integrate import OdeSolution

import invimbed
from invimbed._core.sweep.dense import DenseSolution, StateInterpolant, input_columns
from problems import lq_problem, sympy_pendulum

FIELDS = ("z", "value", "adjoint", "param_grad", "depth_grad")
A = np.array([[0.0, 1.0], [-1.0, -0.3]])
B = np.array([[0.0], [1.0]])
LQ = dict(A=A, B=B, Q=0.5 * np.eye(2), Rth=0.2 * np.eye(1), S=np.zeros((2, 1)), PT=np.eye(2))
X = np.array([1.0, -0.5])
RTOL, ATOL = 1e-6, 1e-9
#: The stated accuracy of the dense output (docs/accuracy.md): every field within
#: ``DENSE_FACTOR * (rtol * max|field| + atol)`` of the exact value where the closure is
#: exact: within the requested tolerance.
DENSE_FACTOR = 1.0


def lq_sweep(**kw):
    pb = lq_problem(**LQ)
    ctrl = invimbed.Constant([0.3])
    res = invimbed.solve_imbedding(pb, X, [-3.0, 0.0], control=ctrl, dense_output=True,
                                   rtol=RTOL, atol=ATOL, **kw)
    assert res.success
    return pb, ctrl, res


def exact(pb, ctrl, p, x=X):
    """The ensemble's fields at increasing depths ``p`` (tight tolerances)."""
    ref = invimbed.solve_adjoint(pb, x, p, control=ctrl, strategy="ensemble", rtol=1e-10,
                                 atol=1e-12)
    assert ref.success
    return ref


def error_in_tolerance_units(got, ref, rtol=RTOL, atol=ATOL) -> dict[str, float]:
    """Largest error of each field in units of ``rtol * max|field| + atol``."""
    return {k: float(np.max(np.abs(got[k] - ref[k])) / (rtol * np.max(np.abs(ref[k])) + atol))
            for k in FIELDS}


def random_depths(n, lo, hi, seed=0):
    return np.sort(np.random.default_rng(seed).uniform(lo, hi, n))


def check_lq(n):
    pb, ctrl, res = lq_sweep()
    assert res.sol.interval == (-3.0, 0.0)
    p = random_depths(n, -3.0, 0.0)
    got = res.sol(p)
    ref = exact(pb, ctrl, p)
    units = error_in_tolerance_units(got, ref)
    assert max(units.values()) < DENSE_FACTOR, units
    assert got.success and got.status == 0 and np.all(got.converged)
    return res, p, ref


@pytest.fixture(scope="module")
def lq_checked():
    """The LQ sweep, 300 random depths and the ensemble there, checked."""
    return check_lq(300)


def test_lq_dense_output_matches_the_ensemble_at_random_depths(lq_checked):
    res, p, _ = lq_checked
    assert res.sol(p).depths.shape == (300,)


@pytest.mark.slow
def test_lq_dense_output_matches_the_ensemble_at_ten_thousand_depths():
    check_lq(10_000)


@pytest.fixture(scope="module")
def lq_reference():
    """The LQ problem, 200 random depths in [-3, 0] and the ensemble there."""
    pb, ctrl = lq_problem(**LQ), invimbed.Constant([0.3])
    p = random_depths(200, -3.0, 0.0, seed=5)
    return pb, ctrl, p, exact(pb, ctrl, p)


@pytest.mark.parametrize("method, rtol", [
    (method, rtol) for method, tight in [("RK45", 1e-6), ("RK23", 1e-4), ("DOP853", 1e-6),
                                         ("Radau", 1e-5), ("BDF", 1e-6), ("LSODA", 1e-6)]
    for rtol in (1e-3, tight)])
def test_dense_output_is_within_the_requested_tolerance(lq_reference, method, rtol):
    """Where the jet is exact, every field at random depths is within the requested
    ``rtol * max|field| + atol`` of the exact ensemble, for every method that keeps a
    continuous extension (the integrator runs tighter by the method's factor,
    docs/accuracy.md); the result says success."""
    pb, ctrl, p, ref = lq_reference
    atol = rtol / 100
    res = invimbed.solve_imbedding(pb, X, [-3.0, 0.0], control=ctrl, method=method,
                                   rtol=rtol, atol=atol, dense_output=True)
    got = res.sol(p)
    assert res.success and got.success and got.status == 0
    units = error_in_tolerance_units(got, ref, rtol, atol)
    assert max(units.values()) <= 1.0, units


def rk45_arrays(sol):
    """The arrays of `StateInterpolant.from_steps` from scipy's RK45 interpolants."""
    ts = np.asarray(sol.ts) if sol.ts[0] > sol.ts[-1] else np.asarray(sol.ts)[::-1]
    interps = sol.interpolants if sol.ts[0] > sol.ts[-1] else sol.interpolants[::-1]
    return (ts, np.stack([i.y_old for i in interps]), np.stack([i.Q for i in interps]))


def test_the_array_route_matches_ode_solution_and_a_wrong_interpolant_fails(lq_checked):
    """`from_steps` (what a compiled sweep feeds) gives the states of the OdeSolution; a
    linear interpolant between the step ends, fed the same way, fails the check that the
    right one passes: the test sees the interpolant."""
    res, p, ref = lq_checked
    ode = res.sol.states.solution
    assert isinstance(ode, OdeSolution)
    ts, y_old, Q = rk45_arrays(ode)
    arrays = StateInterpolant.from_steps(ts, y_old, Q)
    np.testing.assert_allclose(arrays(p), res.sol.states(p), rtol=1e-13, atol=1e-15)
    right = DenseSolution(res.sol.setup, arrays, res.sol.per_depth, res.sol.shapes,
                          stacked=res.sol.stacked, **res.sol.assembly)
    assert max(error_in_tolerance_units(right(p), ref).values()) < DENSE_FACTOR
    y_new = np.concatenate([y_old[1:], ode(ts[-1])[None]])
    linear = StateInterpolant.from_steps(ts, y_old, ((y_new - y_old) / np.diff(ts)[:, None])[..., None])
    wrong = DenseSolution(res.sol.setup, linear, res.sol.per_depth, res.sol.shapes,
                          stacked=res.sol.stacked, **res.sol.assembly)
    np.testing.assert_allclose(wrong(ts).z, right(ts).z, rtol=1e-12)   # right at the ends
    assert max(error_in_tolerance_units(wrong(p), ref).values()) > 10 * DENSE_FACTOR


def test_a_nonlinear_sweep_is_within_its_estimate_at_random_depths():
    """The pendulum (jet order 1): at random depths the error is within the bound the
    sweep's own estimate gives (3 times the estimate, docs/accuracy.md, plus the
    integrator's share)."""
    pb = sympy_pendulum()
    ctrl = invimbed.Constant([0.2, 0.3])
    x = np.array([1.0, 0.5])
    res = invimbed.solve_imbedding(pb, x, [-0.6, 0.0], control=ctrl, dense_output=True,
                                   rtol=RTOL, atol=ATOL)
    assert res.status in (0, -2)     # every depth reached (the 10% rule may refuse the deepest)
    p = random_depths(200, -0.6, 0.0, seed=2)
    got = res.sol(p)
    ref = exact(pb, ctrl, p, x)
    for k in ("z", "value", "adjoint", "param_grad"):
        bound = (3.0 * got.error_estimate[k]
                 + DENSE_FACTOR * (RTOL * np.max(np.abs(ref[k])) + ATOL))
        assert np.all(np.abs(got[k] - ref[k]) <= bound), k
    # depth_grad = -(Lam . f + R) at (p, x): its error is at most |f|_1 times the adjoint's
    f = pb.provider(2, 2).derivative("f", p, np.tile(x, (p.size, 1)),
                                     np.tile([0.2, 0.3], (p.size, 1)))
    adjoint_bound = (3.0 * got.error_estimate["adjoint"].max(axis=1)
                     + DENSE_FACTOR * (RTOL * np.max(np.abs(ref.adjoint)) + ATOL))
    assert np.all(np.abs(got.depth_grad - ref.depth_grad)
                  <= np.abs(f).sum(axis=1) * adjoint_bound)
    # the estimate is not idle here: the closure error is far above the integrator's
    assert got.error_estimate["z"].max() > 100 * RTOL


@pytest.mark.parametrize("closure", ["jet", "stencil"])
def test_sol_at_the_requested_depths_is_the_result(closure):
    """Batch, a piecewise-constant control (the sweep restarts at its jumps), the jet's
    vectorised fields and the stencil's depth-by-depth ones: ``sol(depths)`` is the
    result, with its estimate and verdict."""
    pb = sympy_pendulum()
    ctrl = invimbed.PiecewiseConstant([-1.0, -0.6, -0.3, 0.0], [[0.1, 0.2], [0.3, 0.1], [0.0, 0.4]])
    x = np.array([[1.0, 0.5], [0.2, -0.3]])
    depths = [-0.9, -0.45, -0.3, -0.1]
    res = invimbed.solve_imbedding(pb, x, depths, control=ctrl, closure=closure,
                                   dense_output=True)
    got = res.sol(res.depths)
    for k in FIELDS:
        np.testing.assert_allclose(got[k], res[k], rtol=1e-12, atol=1e-14, err_msg=k)
    assert got.status == res.status
    if closure == "jet":
        for k in res.error_estimate:
            np.testing.assert_allclose(got.error_estimate[k], res.error_estimate[k],
                                       rtol=1e-12, atol=1e-15)
        np.testing.assert_array_equal(got.converged, res.converged)
    one = res.sol(-0.45)
    assert np.ndim(one.value) == 1 and one.z.shape == (2, 2) and one.depths == -0.45
    np.testing.assert_allclose(one.z, res.z[1], rtol=1e-12)


def test_the_vectorised_fields_equal_the_depth_by_depth_assembly():
    _, _, res = lq_sweep(order=2)
    p = random_depths(50, -3.0, 0.0, seed=3)[::-1]
    slow = DenseSolution(res.sol.setup, res.sol.states, res.sol.per_depth, res.sol.shapes,
                         **res.sol.assembly)
    a, b = res.sol(p), slow(p)
    for k in FIELDS:
        np.testing.assert_allclose(a[k], b[k], rtol=1e-14, atol=1e-15)
    for k in a.error_estimate:
        np.testing.assert_allclose(a.error_estimate[k], b.error_estimate[k], rtol=1e-14,
                                   atol=1e-16)


def test_input_columns_pick_one_input_of_a_batch():
    shapes = {"Z": (3, 2, 3), "V": (3, 6)}
    cols = input_columns(shapes, 1)
    y = np.arange(3 * 2 * 3 + 3 * 6, dtype=float)
    Z = y[:18].reshape(3, 2, 3)[1].ravel()
    V = y[18:].reshape(3, 6)[1]
    np.testing.assert_array_equal(y[cols], np.concatenate([Z, V]))


def test_depths_outside_the_swept_interval_are_refused():
    _, _, res = lq_sweep()
    with pytest.raises(ValueError, match=r"`p` must lie in the swept interval \[-3, 0\].*p = 0.5"):
        res.sol(0.5)
    with pytest.raises(ValueError, match=r"2 of 3 depths outside it, the first -3.5"):
        res.sol([-1.0, -3.5, 1.0])
    with pytest.raises(ValueError, match="swept interval.*nan"):
        res.sol(np.nan)
    with pytest.raises(ValueError, match="`p` must be a depth or a 1-d array"):
        res.sol(np.zeros((2, 2)))
    with pytest.raises(TypeError, match="`p` must be"):
        res.sol("deep")


@pytest.mark.parametrize("kw, name", [
    (dict(method="rk4", step=0.1), "method='rk4'"),
    (dict(method="disc"), "method='disc'"),
    (dict(tol=1e-3), "tol=0.001"),
    (dict(fallback="adjoint"), "fallback='adjoint'"),
    (dict(backend="numba", method="Radau"), "backend='numba'"),
    (dict(backend="cupy"), "backend='cupy'"),
])
def test_dense_output_where_it_cannot_work_names_it(kw, name):
    pb = lq_problem(**LQ)
    with pytest.raises(ValueError, match=rf"`dense_output=True` cannot be combined with "
                                         rf"{name}"):
        invimbed.solve_imbedding(pb, X, [-1.0], control=invimbed.Constant([0.3]),
                                 dense_output=True, **kw)
    with pytest.raises(TypeError, match="`dense_output` must be True or False"):
        invimbed.solve_imbedding(pb, X, [-1.0], control=invimbed.Constant([0.3]),
                                 dense_output="yes")


def test_without_dense_output_there_is_no_sol():
    pb = lq_problem(**LQ)
    res = invimbed.solve_imbedding(pb, X, [-1.0], control=invimbed.Constant([0.3]))
    assert "sol" not in res


def test_solve_optimal_gives_the_riccati_gain_at_any_horizon():
    """``dz/dt = u``, ``R = (z^2 + u^2)/2``: ``P(h) = tanh(h)``, gain ``K = tanh(h)``; the
    dense output against solve_optimal on a grid of its own and the closed form."""
    pb = invimbed.BolzaProblem(lambda t, z, u: u, lambda t, z, u: 0.5 * (z @ z + u @ u))
    res = invimbed.solve_optimal(pb, [1.0], [-2.0], n_controls=1, dense_output=True,
                                 rtol=RTOL, atol=ATOL)
    assert res.linear_quadratic and res.sol.interval == (-2.0, 0.0)
    p = random_depths(200, -2.0, 0.0, seed=4)
    got = res.sol(p)
    grid = invimbed.solve_optimal(pb, [1.0], p, n_controls=1, rtol=RTOL, atol=ATOL)
    for k in ("feedback_jacobian", "feedback", "value", "adjoint", "depth_grad"):
        np.testing.assert_allclose(got[k], grid[k], rtol=0, atol=DENSE_FACTOR * (RTOL + ATOL),
                                   err_msg=k)
    np.testing.assert_allclose(got.feedback_jacobian[:, 0, 0], -np.tanh(-p),
                               atol=DENSE_FACTOR * (RTOL + ATOL))


def test_solve_optimal_dense_output_of_the_hjb_sweep():
    """A nonlinear problem (the HJB sweep): the gain of ``sol(p)`` against solve_optimal
    run at those depths, within the integrator's tolerance (same closure, same order)."""
    pb = invimbed.BolzaProblem(lambda t, z, u: -z + 0.3 * z ** 3 / 3 + u,
                               lambda t, z, u: 0.5 * (z @ z + u @ u),
                               terminal_loss=lambda z: 0.5 * z @ z)
    res = invimbed.solve_optimal(pb, [0.5], [-1.0], n_controls=1, dense_output=True,
                                 linear_quadratic=False, closed_loop=False)
    assert not res.linear_quadratic
    p = random_depths(15, -1.0, 0.0, seed=5)
    got = res.sol(p)
    grid = invimbed.solve_optimal(pb, [0.5], p, n_controls=1, linear_quadratic=False,
                                  closed_loop=False)
    for k in ("feedback_jacobian", "feedback", "value", "adjoint"):   # rtol, atol: defaults
        scale = DENSE_FACTOR * (RTOL * np.abs(grid[k]).max() + ATOL)
        np.testing.assert_allclose(got[k], grid[k], rtol=0, atol=scale, err_msg=k)
    with pytest.raises(ValueError, match="`dense_output=True` cannot be combined with "
                                         "method='rk4'"):
        invimbed.solve_optimal(pb, [0.5], [-1.0], n_controls=1, dense_output=True,
                               method="rk4", step=0.1)


def test_optimal_depth_via_the_sweep_refines_on_the_dense_output():
    """``Z(p) = exp(-0.7 p) = 2`` at the optimum: one sweep, refined on ``sol(p)``."""
    pb = invimbed.BolzaProblem(lambda t, z, th: 0.7 * z,
                               terminal_loss=lambda z: 0.5 * (z[0] - 2.0) ** 2)
    res = invimbed.optimal_depth(pb, [1.0], (-2.0, 0.0), via="sweep", n=11)
    assert res.success and res.interior and res.nsolve == 1
    assert abs(res.p + np.log(2.0) / 0.7) < 1e-5           # between grid points 0.2 apart
    assert abs(res.depth_grad) < 1e-6 and res.value_error == 0.0   # the jet is exact here
    with pytest.raises(ValueError, match="`via`"):
        invimbed.optimal_depth(pb, [1.0], (-2.0, 0.0), via="dense")


def test_optimal_depth_via_the_sweep_agrees_with_the_exact_search_on_a_nonlinear_problem():
    """``dz/dt = sin(z)``, ``T = (z - 1.5)^2 / 2`` from ``x = 1``: the optimum ``Z = 1.5``
    is reached at the same depth by both searches, within the sweep's estimate. (The
    interval ends at -0.6: at -0.7 and -0.8 the jet series of order 3 grows from order to
    order, ratios 1.4 and 3.1, and the ratio test, run without `tol` too, refuses them.)"""
    pb = invimbed.BolzaProblem(lambda t, z, th: np.sin(z),
                               terminal_loss=lambda z: 0.5 * (z[0] - 1.5) ** 2)
    exact_res = invimbed.optimal_depth(pb, [1.0], (-0.6, 0.0), n=9)
    res = invimbed.optimal_depth(pb, [1.0], (-0.6, 0.0), via="sweep", n=9, order=3)
    assert res.success and exact_res.success and res.interior
    # closed form: z(s) with dz/ds = sin z: tan(z/2) = tan(1/2) e^s, so Z = 1.5 at
    # s = log(tan(0.75) / tan(0.5))
    s_star = np.log(np.tan(0.75) / np.tan(0.5))
    assert abs(exact_res.p + s_star) < 1e-6
    # the sweep's J at its depth is within its estimate of the exact J there, and that
    # depth is near the optimum (the jet's error moves the minimum, by 2e-3 here)
    at = invimbed.solve_adjoint(pb, [1.0], [res.p], rtol=1e-10, atol=1e-12)
    assert 0 < res.value_error < 1e-3
    assert abs(res.value - at.value[0]) <= 3 * res.value_error + 1e-6
    assert abs(res.p + s_star) < 1e-2 and at.value[0] - exact_res.value < 1e-4


def test_per_input_step_arrays_stack_into_the_batch_state():
    """What a sweep stepping each input on its own grid feeds: one `from_steps` per input
    on that input's columns (`input_columns`), stacked; here cut from the numpy sweep's
    joint steps, so the stack must give its states."""
    pb = lq_problem(**LQ)
    x = np.array([[1.0, -0.5], [0.3, 0.8]])
    res = invimbed.solve_imbedding(pb, x, [-1.0, 0.0], control=invimbed.Constant([0.3]),
                                   dense_output=True)
    ts, y_old, Q = rk45_arrays(res.sol.states.solution)
    size = y_old.shape[1]
    assert res.sol.layout.size == size
    parts = []
    for b in range(2):
        cols = input_columns(res.sol.layout.shapes, b)
        parts.append(StateInterpolant.from_steps(ts, y_old[:, cols], Q[:, cols], columns=cols,
                                                 size=size))
    stacked = StateInterpolant.stack(parts, size)
    p = random_depths(50, -1.0, 0.0, seed=6)
    assert stacked.interval == (-1.0, 0.0)
    np.testing.assert_allclose(stacked(p), res.sol.states(p), rtol=1e-13, atol=1e-15)
    one = StateInterpolant.from_steps(ts, y_old[:, cols], Q[:, cols], columns=cols, size=size)
    with pytest.raises(ValueError, match="`ts`, `y_old`, `Q` must have shapes"):
        StateInterpolant.from_steps(ts, y_old, Q[:, :, 0])
    assert one.interval == (-1.0, 0.0)
