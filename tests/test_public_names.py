"""Every public name of `invimbed` imported and used as the README and the docs show it,
each use checked against an independent reference (a closed form, a root of the exact
loss, scipy's `solve_ivp`, finite differences), on scalar problems small enough to run
in a few seconds in all.

`test_every_public_name_is_used_here` fails when a name joins ``invimbed.__all__``
without a use below: the public API is a contract, and a name nobody calls in a test can
break unseen.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import numpy as np
import pytest
from scipy.integrate import solve_ivp
from scipy.optimize import brentq

import invimbed

X, W, Y, RHO = 0.7, 0.3, 0.9, 0.5
DEPTHS = [0.0, -0.5, -1.0]


def growth(t, z, theta):                    # dz/dt = theta z, vectorised
    return theta[..., :1] * z


def miss(z):                                # T = (z - Y)^2 / 2
    return 0.5 * (z[..., 0] - Y) ** 2


def effort(t, z, theta):                    # R = RHO theta^2 / 2
    return 0.5 * RHO * theta[..., 0] ** 2


def exact(p, w=W):
    """z(0) and J of ``growth`` from depth ``p`` under ``theta = w`` (with ``effort``)."""
    z = X * np.exp(-w * np.asarray(p))
    return z, 0.5 * (z - Y) ** 2 + 0.5 * RHO * w ** 2 * (-np.asarray(p))


PROBLEM = invimbed.BolzaProblem(growth, effort, miss, vectorized=True)
USED: set[str] = set()


def uses(*names: str):
    """Mark the public names a test below uses."""
    USED.update(names)
    return lambda fn: fn


@uses("BolzaProblem", "Constant", "solve_adjoint", "solve_imbedding", "ImbeddingResult",
      "Status", "Result")
def test_solvers_agree_with_the_closed_form():
    ref = invimbed.solve_adjoint(PROBLEM, [X], DEPTHS, control=invimbed.Constant([W]),
                                 rtol=1e-10, atol=1e-12)
    res = invimbed.solve_imbedding(PROBLEM, [X], DEPTHS, control=invimbed.Constant([W]),
                                   tol=1e-7)
    z, J = exact(np.array(DEPTHS))
    for r in (ref, res):
        assert isinstance(r, invimbed.ImbeddingResult) and isinstance(r, invimbed.Result)
        assert r.success and r.status == invimbed.Status.SUCCESS
        np.testing.assert_allclose(r.z[:, 0], z, rtol=1e-7)
        np.testing.assert_allclose(r.value, J, rtol=1e-7, atol=1e-12)
    # the adjoint is dJ/dx: here (z - Y) dz/dx + 0 (the running loss does not depend on z)
    np.testing.assert_allclose(ref.adjoint[:, 0], (z - Y) * z / X, rtol=1e-7)


@uses("Accuracy", "Closure", "Integrator")
def test_settings_objects_equal_their_keywords():
    control = invimbed.Constant([W])
    by_keywords = invimbed.solve_imbedding(PROBLEM, [X], DEPTHS, control=control, order=2,
                                           method="rk4", step=0.05, tol=1e-3)
    by_objects = invimbed.solve_imbedding(
        PROBLEM, [X], DEPTHS, control=control, closure=invimbed.Closure(kind="jet", order=2),
        integrator=invimbed.Integrator(method="rk4", step=0.05),
        accuracy=invimbed.Accuracy(tol=1e-3))
    np.testing.assert_array_equal(by_objects.value, by_keywords.value)
    with pytest.raises(ValueError, match="order"):
        invimbed.solve_imbedding(PROBLEM, [X], DEPTHS, control=control, order=3,
                                 closure=invimbed.Closure(order=2))


@uses("DenseSolution")
def test_dense_output_between_depths():
    res = invimbed.solve_imbedding(PROBLEM, [X], [0.0, -1.0], control=invimbed.Constant([W]),
                                   dense_output=True, order=3)
    assert res.success and isinstance(res.sol, invimbed.DenseSolution)
    at = res.sol([-0.25, -0.75])
    bound = 10 * np.max(at.error_estimate.value) + 1e-9
    np.testing.assert_allclose(at.value, exact(np.array([-0.25, -0.75]))[1], atol=bound)


@uses("PiecewiseConstant", "Control", "OpenLoopControl", "simulate", "SimulationResult")
def test_open_loop_controls_and_simulate():
    piecewise = invimbed.PiecewiseConstant([-1.0, -0.5, 0.0], [[W], [W]])
    smooth = invimbed.Control(lambda t, w: w, [W], jac=lambda t, w: np.ones((1, 1)))
    for control in (piecewise, smooth):
        assert isinstance(control, invimbed.OpenLoopControl)
        res = invimbed.solve_adjoint(PROBLEM, [X], [-1.0], control=control, rtol=1e-10,
                                     atol=1e-12)
        np.testing.assert_allclose(res.value, exact(-1.0)[1], rtol=1e-7)
    sim = invimbed.simulate(PROBLEM, [X], invimbed.Constant([W]), 1.0, rtol=1e-10,
                            atol=1e-12)
    assert isinstance(sim, invimbed.SimulationResult)
    np.testing.assert_allclose(sim.cost, exact(-1.0)[1], rtol=1e-7)


@uses("from_sympy", "SympyProvider", "DerivativeProvider", "check_derivatives",
      "DerivativeCheck", "FiniteDifferences")
def test_derivative_providers_and_their_check():
    sp = pytest.importorskip("sympy")
    t, z, th = sp.symbols("t z theta")
    sym = invimbed.from_sympy(t, [z], [th], [th * z], RHO * th ** 2 / 2, (z - Y) ** 2 / 2)
    assert isinstance(sym.provider(1, 1), invimbed.SympyProvider)
    assert isinstance(sym.provider(1, 1), invimbed.DerivativeProvider)
    res = invimbed.solve_adjoint(sym, [X], [-1.0], control=invimbed.Constant([W]),
                                 rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(res.value, exact(-1.0)[1], rtol=1e-7)

    fd = invimbed.BolzaProblem(growth, effort, miss, vectorized=True,
                               derivatives="finite-differences")
    assert isinstance(fd.provider(1, 1), invimbed.FiniteDifferences)
    check = invimbed.check_derivatives(sym, [X], [W])
    assert isinstance(check, invimbed.DerivativeCheck) and check.ok

    wrong = invimbed.BolzaProblem(growth, effort, miss, vectorized=True,
                                  derivatives={"f_z": lambda t, z, th: 2 * th[..., None]},
                                  check_derivatives=False)
    assert not invimbed.check_derivatives(wrong, [X], [W]).ok


@uses("DerivativeOrderError")
def test_an_order_beyond_the_provider_is_named():
    fd = invimbed.BolzaProblem(growth, effort, miss, vectorized=True,
                               derivatives="finite-differences")
    provider = fd.provider(1, 1)
    limit = provider.order_limit("f")
    with pytest.raises(invimbed.DerivativeOrderError, match="order"):
        provider.derivative("f", 0.0, np.array([[X]]), np.array([[W]]), dz=limit + 1)


@uses("optimize_control", "ControlResult")
def test_optimize_control_finds_the_root_of_the_exact_gradient():
    s = 1.0                                   # from depth -1 to 0
    # dJ/dw = (z - Y) z s + RHO w s with z = X e^{w s}
    w_star = brentq(lambda w: (X * np.exp(w * s) - Y) * X * np.exp(w * s) + RHO * w,
                    -5.0, 5.0)
    res = invimbed.optimize_control(PROBLEM, [X], invimbed.Constant([0.0]), p=-s)
    assert res.success and isinstance(res, invimbed.ControlResult)
    np.testing.assert_allclose(res.x, [w_star], atol=1e-5)


@uses("optimal_depth", "DepthResult")
def test_optimal_depth_is_where_the_state_reaches_the_target():
    terminal_only = invimbed.BolzaProblem(growth, terminal_loss=miss, vectorized=True)
    res = invimbed.optimal_depth(terminal_only, [X], (-2.0, 0.0), control=invimbed.Constant([W]))
    assert isinstance(res, invimbed.DepthResult)
    np.testing.assert_allclose(res.p, -np.log(Y / X) / W, atol=1e-6)


# the scalar LQ regulator dz/dt = A z + u, R = (Q z^2 + U u^2) / 2, T = S z^2 / 2
A, Q, U, S = 0.4, 1.0, 0.5, 2.0
LQ = invimbed.BolzaProblem(
    lambda t, z, u: A * z + u[..., :1],
    lambda t, z, u: 0.5 * (Q * z[..., 0] ** 2 + U * u[..., 0] ** 2),
    lambda z: 0.5 * S * z[..., 0] ** 2, vectorized=True)


def riccati(p):
    """The optimal cost of the LQ regulator from depth ``p`` (scipy, independently)."""
    sol = solve_ivp(lambda t, P: -(2 * A * P + Q - P ** 2 / U), (0.0, p), [S],
                    rtol=1e-12, atol=1e-14)
    return 0.5 * sol.y[0, -1] * X ** 2


@uses("solve_optimal", "SweepFeedback", "optimality_residual", "OptimalityError",
      "FeedbackResult")
def test_solve_optimal_and_its_residual():
    res = invimbed.solve_optimal(LQ, [X], [-1.0], n_controls=1)
    assert res.success and isinstance(res, invimbed.FeedbackResult)
    np.testing.assert_allclose(res.value, riccati(-1.0), rtol=1e-6)
    if res.policy is not None:
        assert isinstance(res.policy, invimbed.SweepFeedback)
    # Theorem 3's condition: zero for the optimal feedback, not for a constant control
    optimal = invimbed.optimality_residual(LQ, [X], [-1.0], lambda t, z: -z[..., :1] * 0,
                                           n_controls=1)
    assert np.max(np.abs(optimal)) > 1e-3
    concave = invimbed.BolzaProblem(
        lambda t, z, u: A * z + u[..., :1],
        lambda t, z, u: 0.5 * (Q * z[..., 0] ** 2 - U * u[..., 0] ** 2),
        vectorized=True)
    # an OptimalityError ends the sweep; the result says where, it does not raise
    assert issubclass(invimbed.OptimalityError, ArithmeticError)
    failed = invimbed.solve_optimal(concave, [X], [-1.0], n_controls=1)
    assert not failed.success and "not strictly convex" in failed.message


@uses("solve_ocp", "OCPResult")
def test_solve_ocp_is_within_its_grid_of_the_riccati_optimum():
    res = invimbed.solve_ocp(LQ, [X], p=-1.0, intervals=20, n_controls=1)
    assert res.success and isinstance(res, invimbed.OCPResult)
    # piecewise-constant controls on 20 intervals cost at least the optimum, and little more
    assert riccati(-1.0) * (1 - 1e-8) <= res.fun <= riccati(-1.0) * 1.02


@uses("OCPSolver")
def test_ocp_solver_built_once_solves_again_from_a_new_state():
    solver = invimbed.OCPSolver(LQ, [X], p=-1.0, intervals=20, n_controls=1)
    first = solver.solve()
    np.testing.assert_allclose(first.fun, invimbed.solve_ocp(LQ, [X], p=-1.0, intervals=20,
                                                             n_controls=1).fun, rtol=1e-8)
    again = solver.solve([0.5 * X])              # warm: the LQ cost scales with x^2
    assert again.success
    np.testing.assert_allclose(again.fun, 0.25 * first.fun, rtol=1e-5)


@uses("endpoint_loss", "fit_endpoint_dynamics", "MLPDynamics", "FitResult")
def test_endpoint_fit_lowers_the_loss_and_its_gradient_is_exact():
    model = invimbed.MLPDynamics(1, hidden=3, linear=True)
    w0 = model.init_params(seed=0)
    x = np.array([[0.2], [0.5], [0.9]])
    y = (1.5 * x)[None]                       # (depths, samples, observed)
    # at jet order 2 the gradient of the sweep's loss is that loss's own derivative to
    # the differences' error (the order-1 default differs from it by ~1e-4 relative)
    loss = invimbed.endpoint_loss(model, w0, x, [-1.0], y, order=2)
    e = np.zeros_like(w0)
    e[0] = 1e-6
    up = invimbed.endpoint_loss(model, w0 + e, x, [-1.0], y, order=2).loss
    down = invimbed.endpoint_loss(model, w0 - e, x, [-1.0], y, order=2).loss
    np.testing.assert_allclose(loss.grad[0], (up - down) / 2e-6, rtol=1e-6)
    fit = invimbed.fit_endpoint_dynamics(model, w0, x, [-1.0], y, epochs=5)
    assert fit.fun < loss.loss and isinstance(fit, invimbed.FitResult)


@uses("SolverWarning", "array_namespace", "BackendCompileError", "STATUS", "OCP_STATUS",
      "__version__")
def test_small_names():
    warning = invimbed.SolverWarning("ran_per_depth", "text", depth=-0.5)
    assert str(warning) == "text" and warning.depth == -0.5
    assert invimbed.array_namespace(np.zeros(2)) is np
    assert issubclass(invimbed.BackendCompileError, Exception)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        assert invimbed.STATUS[0] and invimbed.OCP_STATUS
    version = re.search(r'^version = "([^"]+)"', (Path(__file__).parents[1] / "pyproject.toml")
                        .read_text(), re.MULTILINE)
    assert version is None or invimbed.__version__ == version.group(1)


def test_every_public_name_is_used_here():
    assert set(invimbed.__all__) - USED == set()
