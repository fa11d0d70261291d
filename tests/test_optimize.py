"""optimize_control and optimal_depth against closed forms and forward solves
independent of invimbed: the reported cost is the exact J."""

from functools import cache

import numpy as np
import pytest
from scipy.integrate import solve_ivp
from scipy.linalg import expm
from scipy.optimize import Bounds, brentq

import invimbed
from invimbed import BolzaProblem, Constant, PiecewiseConstant
from invimbed import optimal_depth, optimize_control
from problems import brute_force, lq_problem, pendulum_functions, piecewise_theta

# -- an LQ problem with a piecewise-constant control -----------------------------------
A = np.array([[0.0, 1.0], [-1.0, -0.2]])
B = np.array([[0.0], [1.0]])
Q = np.diag([1.0, 0.1])
RU = np.array([[0.5]])
PT = np.diag([2.0, 1.0])
P0, Q_END, K = -1.5, 0.0, 6
KNOTS = np.linspace(P0, Q_END, K + 1)
TIGHT = dict(rtol=1e-10, atol=1e-12)
OPT_TOL = dict(rtol=1e-9, atol=1e-11)     # of the solves inside the optimiser
OPTS = {"gtol": 1e-10, "ftol": 1e-13, "maxiter": 200}


def lq():
    return lq_problem(A, B, Q, RU, np.zeros((2, 1)), PT, q=Q_END)


def discretised_lq_optimum(x):
    """The optimum of ``J(w)`` for ``theta`` piecewise constant on ``KNOTS``, by exact
    linear algebra: on each interval ``y = (z, u)`` obeys ``y' = F y``, ``F = [[A, B],
    [0, 0]]``, and Van Loan's block exponential gives both the transition ``e^{F h}`` and
    the cost ``int_0^h y^T blkdiag(Q, R_u) y dt / 2 = y0^T W y0 / 2``. Composing the
    intervals makes ``J`` an explicit quadratic form in ``v = (x, w)``; ``w*`` solves
    ``H_ww w = -H_wx x`` (mean over a batch of ``x``: the linear term is averaged)."""
    N, M = B.shape
    nv = N + K * M
    F = np.zeros((N + M, N + M))
    F[:N, :N], F[:N, N:] = A, B
    Qa = np.zeros((N + M, N + M))
    Qa[:N, :N], Qa[N:, N:] = Q, RU
    H = np.zeros((nv, nv))
    L = np.zeros((N, nv))
    L[:, :N] = np.eye(N)                       # z_k = L v
    for k in range(K):
        h = KNOTS[k + 1] - KNOTS[k]
        big = expm(np.block([[-F.T, Qa], [np.zeros_like(F), F]]) * h)
        Phi = big[N + M:, N + M:]
        W = Phi.T @ big[:N + M, N + M:]
        E = np.zeros((M, nv))
        E[:, N + k * M:N + (k + 1) * M] = np.eye(M)
        Y = np.vstack([L, E])                  # y_k = Y v
        H += Y.T @ W @ Y
        L = Phi[:N] @ Y
    H += L.T @ PT @ L
    H = 0.5 * (H + H.T)
    Hww, Hwx = H[N:, N:], H[N:, :N]
    xbar = np.atleast_2d(x).mean(axis=0)
    w = np.linalg.solve(Hww, -Hwx @ xbar)

    def J(wv, xv):
        v = np.concatenate([xv, wv])
        return 0.5 * v @ H @ v

    return w, float(np.mean([J(w, xv) for xv in np.atleast_2d(x)])), J


LQ_X = {"single": np.array([1.0, -0.5]), "batch": np.array([[1.0, -0.5], [0.3, 0.8]])}


@cache            # one run per (x, gradient) for the module: the next two tests read them
def lq_optimized(x: str, gradient: str):
    """optimize_control on `lq` from ``LQ_X[x]``, the trajectory on 31 points (the
    trajectory is computed after the optimisation and does not change it)."""
    return optimize_control(lq(), LQ_X[x], PiecewiseConstant(KNOTS, np.zeros(K)),
                            gradient=gradient, options=OPTS, trajectory_points=31, **OPT_TOL)


@pytest.mark.parametrize("xid", ["single", "batch"])
def test_imbedding_and_adjoint_reach_the_discretised_lq_optimum(xid):
    x = LQ_X[xid]
    w_ref, J_ref, J = discretised_lq_optimum(x)
    results = {g: lq_optimized(xid, g) for g in ("imbedding", "adjoint")}
    for g, res in results.items():
        assert res.success, (g, res.message)
        np.testing.assert_allclose(res.x, w_ref, rtol=1e-6, atol=1e-7 * np.abs(w_ref).max(),
                                   err_msg=g)
        assert abs(res.fun - J_ref) <= 1e-9 * J_ref, g
        # linear-quadratic: the imbedding gradient is exact, and the result says so
        assert res.gradient == g and res.gradient_exact, g
        assert res.gradient_error <= OPT_TOL["rtol"] and res.warnings == [], g
        np.testing.assert_allclose(res.jac, res.jac_exact, rtol=1e-6, atol=1e-9, err_msg=g)
        assert isinstance(res.control, PiecewiseConstant)
        np.testing.assert_allclose(res.control.values.ravel(), res.x)
        assert res.p == P0 and res.nfev_solver > 0 and res.nsolve >= res.nfev
    np.testing.assert_allclose(results["imbedding"].x, results["adjoint"].x, rtol=1e-6,
                               atol=1e-8)
    # the optimum is not the start: J really went down
    assert np.mean([J(np.zeros(K), xv) for xv in np.atleast_2d(x)]) > 1.05 * J_ref


def test_trajectory_is_the_forward_solution_under_the_optimal_control():
    x = LQ_X["single"]
    res = lq_optimized("single", "adjoint")     # the run of the previous test
    tr = res.trajectory
    assert tr.t.shape == (31,) and tr.z.shape == (31, 2) and tr.theta.shape == (31, 1)
    assert tr.t[0] == P0 and tr.t[-1] == Q_END
    np.testing.assert_allclose(tr.z[0], x)
    # z(q) equals the imbedding output under the optimal control
    out = invimbed.solve_imbedding(lq(), x, [P0], control=res.control, **TIGHT)
    np.testing.assert_allclose(tr.z[-1], out.z[0], rtol=1e-7, atol=1e-9)
    # exact piecewise propagation with matrix exponentials
    z = x.copy()
    for k in range(K):
        h = KNOTS[k + 1] - KNOTS[k]
        F = np.zeros((3, 3))
        F[:2, :2], F[:2, 2:] = A, B
        z = (expm(F * h) @ np.concatenate([z, res.control.values[k]]))[:2]
    np.testing.assert_allclose(tr.z[-1], z, rtol=1e-7, atol=1e-9)


def test_bounds_are_respected_and_active():
    x = np.array([1.0, -0.5])
    w_free = discretised_lq_optimum(x)[0]
    lo = 0.5 * w_free.min()                    # cuts off the unconstrained optimum
    res = optimize_control(lq(), x, PiecewiseConstant(KNOTS, np.zeros(K)),
                           bounds=(lo, None), options=OPTS, gradient="adjoint", **OPT_TOL)
    assert res.success
    assert np.all(res.x >= lo - 1e-12)
    assert np.any(np.isclose(res.x, lo))
    res2 = optimize_control(lq(), x, PiecewiseConstant(KNOTS, np.zeros(K)),
                            bounds=Bounds(lo, np.inf), options=OPTS, gradient="adjoint",
                            **OPT_TOL)
    np.testing.assert_allclose(res2.x, res.x, atol=1e-8)


def test_callback_progress_and_early_stop(capsys, monkeypatch):
    seen = []

    def cb(info):
        seen.append((info.nit, info.fun, info.control))
        return info.nit >= 2                   # stop after two iterations

    import builtins
    real_import = builtins.__import__

    def no_tqdm(name, *args, **kwargs):        # exercise the fallback without tqdm
        if name.startswith("tqdm"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_tqdm)
    res = optimize_control(lq(), [1.0, -0.5], PiecewiseConstant(KNOTS, np.zeros(K)),
                           callback=cb, progress=True, **OPT_TOL)
    assert [s[0] for s in seen] == [1, 2]
    assert seen[1][1] <= seen[0][1]
    assert isinstance(seen[0][2], PiecewiseConstant)
    assert res.status == -4 and res.status is invimbed.Status.STOPPED and not res.success
    assert res.solver_status == 99                  # scipy's code for StopIteration
    assert "iteration 2" in capsys.readouterr().err


def test_progress_bar_with_tqdm(capsys):
    pytest.importorskip("tqdm")
    res = optimize_control(lq(), [1.0, -0.5], PiecewiseConstant(KNOTS, np.zeros(K)),
                           gradient="adjoint", progress=True, options={"maxiter": 2})
    assert res.nit == 2
    assert "optimize_control" in capsys.readouterr().err


def test_gradient_free_method_and_constant_control_default_depth():
    # dz/dt = u, J = (z(q) - 1)^2 / 2 + int u^2 / 2: with p = q - 1 the optimum is u = 1/2
    problem = BolzaProblem(lambda t, z, u: u, running_loss=lambda t, z, u: 0.5 * u @ u,
                           terminal_loss=lambda z: 0.5 * (z[0] - 1.0) ** 2, q=2.0)
    res = optimize_control(problem, [0.0], Constant([0.0]), method="Nelder-Mead",
                           gradient="adjoint",
                           options={"xatol": 1e-8, "fatol": 1e-12})
    assert res.p == 1.0
    np.testing.assert_allclose(res.x, [0.5], atol=1e-6)
    np.testing.assert_allclose(res.trajectory.z[-1], [0.5], atol=1e-6)


def test_solver_failure_is_a_status_not_an_exception():
    # dz/dt = u z^2 blows up in finite time for large u: the solve fails at some w
    problem = BolzaProblem(lambda t, z, u: u * z ** 2,
                           terminal_loss=lambda z: -float(z[0]), q=0.0)
    res = optimize_control(problem, [1.0], Constant([0.5]), p=-1.0, gradient="adjoint",
                           bounds=(0.0, 10.0))
    assert not res.success and res.status == -1
    assert "failed" in res.message
    assert np.isfinite(res.fun)


# -- the reported cost is the exact J (nonlinear problems) ------------------------------
def squared_growth():
    """dz/dt = z^2 + u, R = (z^2 + u^2)/2, T = z^2/2, q = 0, exact first derivatives."""
    derivs = {"f_z": lambda t, z, u: 2.0 * z[:, :, None],
              "f_theta": lambda t, z, u: np.ones((len(z), 1, 1)),
              "R_z": lambda t, z, u: z, "R_theta": lambda t, z, u: u, "T_z": lambda z: z}
    return BolzaProblem(lambda t, z, u: z ** 2 + u,
                        running_loss=lambda t, z, u: 0.5 * (z[:, 0] ** 2 + u[:, 0] ** 2),
                        terminal_loss=lambda z: 0.5 * z[:, 0] ** 2, derivatives=derivs,
                        vectorized=True)


def squared_growth_cost(x, knots, values):
    """The true J of `squared_growth` by one forward solve_ivp per piece (no invimbed)."""
    y = np.array([x, 0.0])
    for a, b, u in zip(knots[:-1], knots[1:], values):
        sol = solve_ivp(lambda t, y, u=u: [y[0] ** 2 + u, 0.5 * (y[0] ** 2 + u ** 2)], (a, b),
                        y, method="DOP853", rtol=1e-13, atol=1e-14)
        y = sol.y[:, -1]
    return y[1] + 0.5 * y[0] ** 2


def test_fun_is_the_true_cost_of_the_returned_control_squared_growth():
    """Before, the optimiser minimised the imbedded model's cost: from x = 1 with four
    pieces on [-1, 0], started at w = -1, it reported J = 1.1567 for a control whose true
    J was 1.0704."""
    knots = np.linspace(-1.0, 0.0, 5)
    res = optimize_control(squared_growth(), [1.0], PiecewiseConstant(knots, np.full(4, -1.0)),
                           options=OPTS, rtol=1e-9, atol=1e-11)
    assert res.success and res.gradient == "adjoint" and res.gradient_exact
    assert res.gradient_error == 0.0 and res.warnings == []
    w = res.control.values.ravel()
    J_true = squared_growth_cost(1.0, knots, w)
    assert abs(res.fun - J_true) <= 1e-6 * J_true
    assert J_true < 0.95                       # the exact optimum: 0.94315
    # and it is a stationary point of the true J: central differences of the forward solve
    h = 1e-5
    fd = [(squared_growth_cost(1.0, knots, w + h * e)
           - squared_growth_cost(1.0, knots, w - h * e)) / (2 * h) for e in np.eye(4)]
    np.testing.assert_allclose(fd, 0.0, atol=2e-5)
    np.testing.assert_allclose(res.jac_exact, fd, atol=1e-6)


def test_fun_is_the_true_cost_of_the_returned_control_pendulum():
    """Before: a pendulum with an 8-piece control on [-3, 0] reported J = 0.5030 for a
    control whose true J was 0.3701 (the imbedded model's optimum)."""
    fns = pendulum_functions()
    knots = np.linspace(-3.0, 0.0, 9)
    x = np.array([1.0, 0.5])
    res = optimize_control(fns.problem(), x, PiecewiseConstant(knots, np.zeros((8, 2))),
                           rtol=1e-8, atol=1e-10)
    assert res.success and res.gradient_exact and res.p == -3.0
    _, J = brute_force(fns, x, -3.0, piecewise_theta(knots, res.control.values),
                       breakpoints=knots)
    assert abs(res.fun - J[0]) <= 1e-6 * J[0]
    assert J[0] < 0.28                         # the exact optimum: 0.26937
    assert np.abs(res.jac_exact).max() < 1e-4


def test_imbedding_gradient_on_a_nonlinear_problem_reports_its_approximation():
    fns = pendulum_functions()
    x = [1.0, 0.5]
    runs = {g: optimize_control(fns.problem(), x, Constant([0.0, 0.0]), p=-0.5, gradient=g,
                                rtol=1e-9, atol=1e-11, options={"maxfun": 30})
            for g in ("adjoint", "imbedding")}
    res = runs["imbedding"]
    assert res.gradient == "imbedding" and not res.gradient_exact
    assert res.gradient_error > 1e-2           # jet 1 at depth 0.5 here: ~1 relative
    assert any("imbedding gradient is approximate" in w for w in res.warnings)
    assert "approximate" not in res.message     # in `warnings`, not repeated in the message
    # the value is still the exact J of the returned control
    _, J = brute_force(fns, np.atleast_2d(x), -0.5, res.x)
    assert abs(res.fun - J[0]) <= 1e-6 * J[0]
    # the exact gradient there is not zero, and the exact optimum is lower
    assert np.abs(res.jac_exact).max() > 1e-3
    assert runs["adjoint"].gradient_exact and runs["adjoint"].fun < res.fun


def test_imbedding_gradient_without_an_estimate_is_not_called_exact():
    res = optimize_control(lq(), [1.0, -0.5], PiecewiseConstant(KNOTS, np.zeros(K)),
                           gradient="imbedding", estimate_error=False, options={"maxiter": 3})
    assert res.gradient_error is None and not res.gradient_exact
    assert any("not estimated" in w for w in res.warnings)


def test_solver_keywords_are_split_between_the_two_solvers():
    control = PiecewiseConstant(KNOTS, np.zeros(K))
    x = [1.0, -0.5]
    # sweep-only keywords reach the sweep only (solve_adjoint would raise TypeError)
    res = optimize_control(lq(), x, control, gradient="imbedding", closure="jet", order=2,
                           difference="central", options={"maxiter": 2}, max_steps=5000,
                           strategy="ensemble")
    assert res.gradient == "imbedding" and res.nit == 2
    # with the exact gradient they are not used, and the result says so
    res = optimize_control(lq(), x, control, order=2, solver_method="RK23",
                           options={"maxiter": 2})
    assert any(w.startswith("order applies to gradient='imbedding' only") for w in res.warnings)
    assert res.gradient_exact


@pytest.mark.parametrize("call", ["optimize_control", "optimal_depth"])
def test_unknown_solver_keyword_is_a_type_error_naming_it(call):
    with pytest.raises(TypeError, match="'bogus_option'"):
        if call == "optimize_control":
            optimize_control(lq(), [1.0, 0.0], PiecewiseConstant(KNOTS, np.zeros(K)),
                             bogus_option=1)
        else:
            optimal_depth(growth_problem(), [1.0], (-1.0, 0.0), bogus_option=1)


@pytest.mark.parametrize("kwargs, match", [
    (dict(gradient="backprop"), "`gradient`"),
    (dict(p=0.0), "`p` must be < q"),
    (dict(p=-2.0), "`p`.*first knot"),
    (dict(bounds=(1.0, 0.0)), "`bounds` are infeasible"),
    (dict(bounds=[(0, 1)] * 3), "`bounds` must have one"),
    (dict(bounds=(0.0, 1.0), method="BFGS"), "`bounds` are not supported"),
    (dict(trajectory_points=1), "`trajectory_points`"),
])
def test_bad_input_names_the_argument(kwargs, match):
    with pytest.raises(ValueError, match=match):
        optimize_control(lq(), [1.0, 0.0], PiecewiseConstant(KNOTS, np.zeros(K)), **kwargs)


def test_bad_types_name_the_argument():
    with pytest.raises(TypeError, match="`problem`"):
        optimize_control(object(), [1.0], Constant([0.0]))
    with pytest.raises(TypeError, match="`control`"):
        optimize_control(lq(), [1.0, 0.0], [0.0])
    with pytest.raises(TypeError, match="`callback`"):
        optimize_control(lq(), [1.0, 0.0], PiecewiseConstant(KNOTS, np.zeros(K)), callback=3)
    with pytest.raises(TypeError, match="`options`"):
        optimize_control(lq(), [1.0, 0.0], PiecewiseConstant(KNOTS, np.zeros(K)), options=3)


# -- optimal depth -----------------------------------------------------------------------
def growth_problem(a=0.7, c=2.0):
    """dz/dt = a z, T = (z - c)^2 / 2, q = 0: J(p) = (x e^{-a p} - c)^2 / 2."""
    derivs = {"f_z": lambda t, z, th: np.full((len(z), 1, 1), a),
              "f_zz": lambda t, z, th: np.zeros((len(z), 1, 1, 1)),
              "f_zzz": lambda t, z, th: np.zeros((len(z), 1, 1, 1, 1)),
              "T_z": lambda z: z - c, "T_zz": lambda z: np.ones((len(z), 1, 1)),
              "T_zzz": lambda z: np.zeros((len(z), 1, 1, 1))}
    return BolzaProblem(lambda t, z, th: a * z, terminal_loss=lambda z: 0.5 * (z[:, 0] - c) ** 2,
                        derivatives=derivs, vectorized=True)


def test_optimal_depth_of_a_closed_form_minimum():
    a, c, x = 0.7, 2.0, 1.0
    res = optimal_depth(growth_problem(a, c), [x], (-2.0, 0.0), n=21, **TIGHT)
    p_star = -np.log(c / x) / a                # x e^{-a p} = c
    assert res.success and res.interior
    assert abs(res.p - p_star) < 1e-8
    assert abs(res.value) < 1e-9 and abs(res.depth_grad) < 1e-7
    np.testing.assert_allclose(res.grid_value, 0.5 * (x * np.exp(-a * res.grid) - c) ** 2,
                               rtol=1e-8, atol=1e-9)
    assert res.grid.shape == res.grid_value.shape == res.grid_depth_grad.shape == (21,)


def test_optimal_depth_picks_the_lowest_of_several_minima():
    """dz/dt = cos t, R = rho, T = (z - c)^2 / 2, q = 0, x = 0:
    J(p) = rho (q - p) + (sin q - sin p - c)^2 / 2 has a local minimum near each
    solution of sin p = -c; the running loss makes the shallowest the lowest."""
    rho, c = 0.05, 0.5
    derivs = {"f_z": lambda t, z, th: np.zeros((len(z), 1, 1)),
              "f_zz": lambda t, z, th: np.zeros((len(z), 1, 1, 1)),
              "f_zzz": lambda t, z, th: np.zeros((len(z), 1, 1, 1, 1)),
              "R_z": lambda t, z, th: np.zeros((len(z), 1)),
              "R_zz": lambda t, z, th: np.zeros((len(z), 1, 1)),
              "R_zzz": lambda t, z, th: np.zeros((len(z), 1, 1, 1)),
              "T_z": lambda z: z - c, "T_zz": lambda z: np.ones((len(z), 1, 1)),
              "T_zzz": lambda z: np.zeros((len(z), 1, 1, 1))}
    problem = BolzaProblem(lambda t, z, th: np.full_like(z, np.cos(t)),
                           running_loss=lambda t, z, th: np.full(len(z), rho),
                           terminal_loss=lambda z: 0.5 * (z[:, 0] - c) ** 2,
                           derivatives=derivs, vectorized=True)

    def dJ(p):   # closed-form derivative of J(p)
        return -rho + (-np.sin(p) - c) * (-np.cos(p))

    p_star = brentq(dJ, -np.pi / 6 - 0.3, -np.pi / 6 + 0.3)
    res = optimal_depth(problem, [0.0], (-8.0, 0.0), n=81, **TIGHT)
    assert len(res.candidates) >= 3
    assert abs(res.p - p_star) < 1e-7
    # every bracket is refined to a root of the closed-form dJ/dp, all in the same solves
    interior = res.candidates[(res.candidates > -8.0) & (res.candidates < 0.0)]
    assert len(interior) >= 3
    np.testing.assert_allclose([dJ(p) for p in interior], 0.0, atol=1e-9)
    assert res.nsolve <= 15, res.nsolve
    J_star = rho * (-p_star) + 0.5 * (-np.sin(p_star) - c) ** 2
    assert abs(res.value - J_star) < 1e-8


def test_monotone_loss_returns_the_grid_end():
    # J(p) = (x e^{-a p})^2 / 2 decreases in p: the shallowest depth is optimal
    res = optimal_depth(growth_problem(0.7, 0.0), [1.0], (-2.0, -0.5), n=11, **TIGHT)
    assert res.p == -0.5 and not res.interior
    # and with c far above, J increases in p: the deepest depth
    res = optimal_depth(growth_problem(0.7, 50.0), [1.0], (-2.0, -0.5), n=11, **TIGHT)
    assert res.p == -2.0


def test_optimal_depth_batch_mean_and_plot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    a, c = 0.7, 2.0
    xs = np.array([[1.0], [1.2]])
    res = optimal_depth(growth_problem(a, c), xs, (-2.0, 0.0), n=21, **TIGHT)

    def dJ(p):   # d/dp of the mean of (x e^{-a p} - c)^2 / 2
        e = xs[:, 0] * np.exp(-a * p)
        return np.mean(-(e - c) * a * e)

    assert abs(res.p - brentq(dJ, -2.0, 0.0)) < 1e-8
    ax_v, ax_g = res.plot()
    assert ax_v.get_ylabel() == "J(p, x)" and ax_g.get_xlabel() == "depth p"
    fig, ax = plt.subplots()
    res.plot(ax)
    plt.close("all")


@pytest.mark.parametrize("p_range, kwargs, match", [
    ((0.0, -1.0), {}, "p_low < p_high"),
    ((-1.0, 0.5), {}, "below q"),
    ((-1.0,), {}, "pair"),
    ((-1.0, 0.0), dict(n=1), "`n`"),
])
def test_optimal_depth_bad_input(p_range, kwargs, match):
    with pytest.raises(ValueError, match=match):
        optimal_depth(growth_problem(), [1.0], p_range, **kwargs)


def test_optimal_depth_value_is_the_true_cost_nonlinear():
    """A pendulum under a constant control: J(p) and dJ/dp are exact at the returned
    depth, which is a stationary point of the true J."""
    fns = pendulum_functions()
    x = np.array([1.0, 0.5])
    theta = np.array([-0.8, 0.2])
    res = optimal_depth(fns.problem(), x, (-2.5, 0.0), control=Constant(theta), n=26,
                        rtol=1e-10, atol=1e-12)
    assert res.success and res.interior and res.warnings == []

    def J(p):
        return brute_force(fns, x[None], p, theta)[1][0]

    assert abs(res.value - J(res.p)) <= 1e-8 * abs(J(res.p))
    h = 1e-4
    assert abs((J(res.p + h) - J(res.p - h)) / (2 * h)) < 1e-6
    assert abs(res.depth_grad) < 1e-8
    # the grid values are exact too
    k = np.arange(0, 26, 5)
    np.testing.assert_allclose(res.grid_value[k], [J(p) for p in res.grid[k]], rtol=1e-8)


def test_optimal_depth_accepts_sweep_settings_but_says_they_are_not_used():
    res = optimal_depth(growth_problem(0.7, 2.0), [[1.0], [0.5]], (-4.0, 0.0), n=41,
                        closure="jet", order=2, **TIGHT)
    assert res.success
    assert any(w.startswith("closure, order") and "not used" in w for w in res.warnings)
    assert "not used" in res.message


# -- argument validation: types, and keywords that would have vanished ----------------------
@pytest.mark.parametrize("kwargs, error, match", [
    (dict(p="0.5"), TypeError, "`p`"),
    (dict(p=np.nan), ValueError, "`p`"),
    (dict(progress="yes"), TypeError, "`progress`"),
    (dict(trajectory_points=2.5), TypeError, "`trajectory_points`"),
    (dict(method="bogus"), ValueError, "`method`"),
    (dict(method=3), TypeError, "`method`"),
    (dict(gradient=None), ValueError, "`gradient`"),
    (dict(rtol="1e-6"), TypeError, "`rtol`"),
    (dict(atol=0.0), ValueError, "`atol`"),
    (dict(rtoll=1e-6), TypeError, r"'rtoll' \(did you mean 'rtol'\?\)"),
])
def test_optimize_control_argument_errors_name_the_argument(kwargs, error, match):
    with pytest.raises(error, match=match):
        optimize_control(lq(), [1.0, 0.0], PiecewiseConstant(KNOTS, np.zeros(K)), **kwargs)


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(n=2.5), TypeError, "`n`"),
    (dict(xtol=-1.0), ValueError, "`xtol`"),
    (dict(xtol="small"), TypeError, "`xtol`"),
    (dict(rtol="1e-6"), TypeError, "`rtol`"),
    (dict(atoll=1e-9), TypeError, r"'atoll' \(did you mean 'atol'\?\)"),
    (dict(p_range=(-1.0, np.inf)), ValueError, "`p_range`"),
])
def test_optimal_depth_argument_errors_name_the_argument(kwargs, error, match):
    p_range = kwargs.pop("p_range", (-1.0, 0.0))
    with pytest.raises(error, match=match):
        optimal_depth(growth_problem(), [1.0], p_range, **kwargs)
