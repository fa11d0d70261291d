"""`solve_ocp`: multiple shooting on the ensemble, its exact derivatives, the NLP solvers
(IPOPT and the scipy fallbacks), constraints, free horizon and warm starts.

References are independent of the code under test: finite differences of the objective
and of the constraints, and the exact optimum of a linear-quadratic problem with
piecewise-constant controls (a discrete Riccati recursion on the zero-order-hold
discretisation, Van Loan's matrix exponential).
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import invimbed
from invimbed._control.ocp.constraints import Defects, FinalState, Path, Terminal
from invimbed._control.ocp.nlp import ShootingNLP, kkt_check
from invimbed._control.ocp.solvers import have_ipopt
from invimbed._control.ocp.shooting import Shooting

needs_ipopt = pytest.mark.skipif(not have_ipopt(), reason="cyipopt is not installed")


# -- problems ---------------------------------------------------------------------------
def nonautonomous_problem(q=1.0):
    """A nonlinear, time-dependent problem with running and terminal losses (sympy)."""
    sp = pytest.importorskip("sympy")
    t, z1, z2, u = sp.symbols("t z1 z2 u")
    return invimbed.from_sympy(
        t, [z1, z2], [u], [z2 + 0.3 * sp.sin(t) * z1, -sp.sin(z1) + u * (1 + t)],
        0.5 * u ** 2 + z1 ** 2 * (1 + 0.5 * t) + 0.1 * z2 * u, 0.3 * z1 ** 2 + z2 ** 4, q=q)


def lq_problem(A, B, Q, R, PT, q):
    return invimbed.BolzaProblem(
        lambda t, z, u: z @ A.T + u @ B.T,
        lambda t, z, u: 0.5 * (np.einsum("bi,ij,bj->b", z, Q, z) + np.einsum("bi,ij,bj->b", u, R, u)),
        lambda z: 0.5 * np.einsum("bi,ij,bj->b", z, PT, z), q=q, vectorized=True,
        autonomous=True,
        derivatives={"f_z": lambda t, z, u: np.broadcast_to(A, (len(z),) + A.shape),
                     "f_theta": lambda t, z, u: np.broadcast_to(B, (len(z),) + B.shape),
                     "R_z": lambda t, z, u: z @ Q, "R_theta": lambda t, z, u: u @ R,
                     "T_z": lambda z: z @ PT})


def _example(name):
    import importlib.util
    from pathlib import Path
    path = Path(__file__).resolve().parents[1] / "examples" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def zoh_lq_optimum(A, B, Q, R, PT, h, K, x0):
    """The exact optimum of ``J = 1/2 int (x'Qx + u'Ru) + 1/2 x(T)'PT x(T)`` over controls
    constant on K intervals of length h (Van Loan's integrals and a Riccati recursion, in
    examples/_ocp_gallery.py)."""
    return 0.5 * _example("_ocp_gallery").sampled_lq_optimum(A, B, Q, R, PT, h, K, x0)


LQ = dict(A=np.array([[0.0, 1.0], [-2.0, -0.3]]), B=np.array([[0.0], [1.0]]),
          Q=np.diag([1.0, 0.5]), R=np.array([[0.2]]), PT=np.diag([2.0, 1.0]))


# -- the transcription's derivatives ---------------------------------------------------
def _fd_check(nlp: ShootingNLP, w: np.ndarray, step: float = 1e-6):
    g = nlp.gradient(w)
    Jc = nlp.jacobian(w).toarray()
    g_fd = np.zeros_like(g)
    J_fd = np.zeros_like(Jc)
    for i in range(w.size):
        e = np.zeros_like(w)
        e[i] = step * max(1.0, abs(w[i]))
        g_fd[i] = (nlp.objective(w + e) - nlp.objective(w - e)) / (2 * e[i])
        J_fd[:, i] = (nlp.constraints(w + e) - nlp.constraints(w - e)) / (2 * e[i])
    return g, g_fd, Jc, J_fd


def every_block_nlp(free, rtol=1e-9, atol=1e-11):
    """A nonlinear NLP with every kind of constraint block, and a point ``w``."""
    problem = nonautonomous_problem(q=1.0)
    x = np.array([0.4, -0.2])
    sh = Shooting(problem.provider(2, 1), x, 1.0, np.array([0.0, 0.3, 0.6, 1.0]),
                  free_horizon=free, horizon=1.3, m=1, rtol=rtol, atol=atol)
    blocks = [Defects(sh), FinalState(sh, np.array([np.nan, 0.1])),
              Terminal(sh, lambda z: np.array([z[0] ** 2 + z[1] - 0.3]), False, "t", x),
              Path(sh, lambda t, z, u: np.array([z[0] * z[1] + 0.1 * t - u[0] ** 2]), 2, "g")]
    nlp = ShootingNLP(sh, blocks, np.full(sh.n_vars, -np.inf), np.full(sh.n_vars, np.inf))
    w = np.random.default_rng(1).normal(scale=0.5, size=sh.n_vars)
    if free:
        w[-1] = 1.3
    return nlp, w


@pytest.mark.parametrize("free", [False, True], ids=["fixed-horizon", "free-horizon"])
def test_gradient_and_jacobian_match_finite_differences(free):
    nlp, w = every_block_nlp(free)
    g, g_fd, Jc, J_fd = _fd_check(nlp, w)
    assert np.max(np.abs(g - g_fd)) <= 1e-6 * max(1.0, np.max(np.abs(g)))
    assert np.max(np.abs(Jc - J_fd)) <= 1e-6 * max(1.0, np.max(np.abs(Jc)))
    # the structure is sparse: the defects of interval k touch only (s_k, u_k, s_(k+1), H)
    assert nlp.rows.size < 0.5 * Jc.size


def test_one_ensemble_solve_per_point():
    problem = lq_problem(**LQ, q=1.0)
    sh = Shooting(problem.provider(2, 1), np.array([1.0, 0.0]), 1.0, np.linspace(0, 1, 6),
                  free_horizon=False, horizon=1.0, m=1)
    nlp = ShootingNLP(sh, [Defects(sh)], np.full(sh.n_vars, -np.inf), np.full(sh.n_vars, np.inf))
    w = np.zeros(sh.n_vars)
    nlp.objective(w), nlp.gradient(w), nlp.constraints(w), nlp.jacobian(w)
    assert nlp.n_solves == 1


@pytest.mark.parametrize("free", [False, True], ids=["fixed-horizon", "free-horizon"])
def test_points_solved_together_equal_each_solved_alone(free):
    nlp, w = every_block_nlp(free)
    sh = nlp.sh
    ws = w + np.random.default_rng(2).normal(scale=0.05, size=(3, w.size))
    together = sh.solve_points(ws, record=True)
    for wj, sol in zip(ws, together):
        alone = sh.solve(wj, record=True)
        for name in ("F", "C", "Fs", "Fu", "Cs", "Cu", "FH", "CH", "nsteps"):
            np.testing.assert_array_equal(getattr(sol, name), getattr(alone, name), err_msg=name)
        frac = np.array([0.25, 0.5])
        for a, b in zip(sh.interior(wj, sol, frac), sh.interior(wj, alone, frac)):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("free", [False, True], ids=["fixed-horizon", "free-horizon"])
def test_colored_hessian_matches_dense_differences_in_one_solve(free):
    """The colored Hessian of the Lagrangian against central differences of its exact
    gradient in one variable at a time; all its perturbed points cost one ensemble solve."""
    from invimbed._control.ocp.hessian import ColoredHessian

    nlp, w = every_block_nlp(free, rtol=1e-11, atol=1e-13)
    y = np.random.default_rng(3).normal(size=nlp.m)
    sigma = 0.7
    hess = ColoredHessian(nlp)
    before = nlp.n_solves
    vals = hess.values(w, y, sigma)
    assert nlp.n_solves == before + 1
    H = np.zeros((nlp.n, nlp.n))
    H[hess.rows, hess.cols] = vals
    H = H + np.tril(H, -1).T

    def lagrangian_gradient(v):
        return sigma * nlp.gradient(v) + nlp.jacobian(v).T @ y

    ref = np.zeros_like(H)
    for i in range(w.size):
        e = np.zeros_like(w)
        e[i] = 1e-4 * max(1.0, abs(w[i]))
        ref[:, i] = (lagrangian_gradient(w + e) - lagrangian_gradient(w - e)) / (2 * e[i])
    ref = 0.5 * (ref + ref.T)
    assert np.max(np.abs(H - ref)) <= 1e-5 * np.max(np.abs(ref))


# -- the optimum against an exact reference -------------------------------------------
SOLVERS = ["slsqp", "trust-constr", pytest.param("ipopt", marks=needs_ipopt)]


@pytest.mark.parametrize("solver", SOLVERS)
def test_lq_optimum_matches_discrete_riccati(solver):
    K, T = 8, 1.5
    problem = lq_problem(**LQ, q=T)
    x0 = np.array([1.0, -0.5])
    res = invimbed.solve_ocp(problem, x0, p=0.0, intervals=K, solver=solver, n_controls=1)
    ref = zoh_lq_optimum(**LQ, h=T / K, K=K, x0=x0)
    assert res.success, res.message
    assert res.solver == solver
    assert abs(res.fun - ref) <= 1e-7 * abs(ref)
    assert res.kkt["stationarity"] <= 1e-6 and res.constraint_violation <= 1e-6
    # the result's control reproduces the objective through the adjoint method
    adj = invimbed.solve_adjoint(problem, x0, [0.0], control=res.control, rtol=1e-10,
                                 atol=1e-12)
    assert abs(adj.value[0] - res.fun) <= 1e-7 * abs(ref)


def test_fallback_without_ipopt(monkeypatch):
    """``solver="auto"`` runs SLSQP where cyipopt cannot be imported."""
    import invimbed._control.ocp.solve as ocp_module
    monkeypatch.setattr(ocp_module, "have_ipopt", lambda: False)
    problem = lq_problem(**LQ, q=1.0)
    res = invimbed.solve_ocp(problem, [1.0, 0.0], p=0.0, intervals=5, n_controls=1)
    assert res.solver == "slsqp" and res.success
    with pytest.raises(ValueError, match="solver='ipopt' needs cyipopt"):
        invimbed.solve_ocp(problem, [1.0, 0.0], p=0.0, intervals=5, n_controls=1,
                           solver="ipopt")


def test_not_optimal_is_not_success():
    """An iteration limit reached away from the optimum: the solver's status is passed
    through and our KKT check refuses success."""
    problem = lq_problem(**LQ, q=1.0)
    res = invimbed.solve_ocp(problem, [1.0, 0.0], p=0.0, intervals=6, n_controls=1,
                             solver="slsqp", max_iter=2)
    assert not res.success and res.status == -2 and res.status is invimbed.Status.NOT_CONVERGED
    assert res.solver_status != 0
    assert res.kkt["stationarity"] > 1e-6
    assert "Not optimal" in res.message


# -- what engineers pose --------------------------------------------------------------
def double_integrator(q=1.0, running=None):
    sp = pytest.importorskip("sympy")
    t, z1, z2, u = sp.symbols("t z1 z2 u")
    return invimbed.from_sympy(t, [z1, z2], [u], [z2, u],
                               u ** 2 / 2 if running is None else running, q=q)


def _simulate(problem, x0, res, points=400, fractions=None):
    """The returned control simulated by scipy alone: z on a fine grid (or at the given
    fractions of every interval)."""
    from scipy.integrate import solve_ivp
    prov = problem.provider(len(x0), res.controls.shape[1])
    ts, zs, z = [], [], np.asarray(x0, dtype=float)
    for k in range(len(res.controls)):
        a, b = res.times[k], res.times[k + 1]
        sol = solve_ivp(lambda t, y: prov.derivative("f", t, y[None], res.controls[k][None])[0],
                        (a, b), z, rtol=1e-11, atol=1e-12, dense_output=True)
        tt = (np.linspace(a, b, max(2, points // len(res.controls))) if fractions is None
              else a + np.asarray(fractions) * (b - a))
        ts.append(tt)
        zs.append(sol.sol(tt).T)
        z = sol.y[:, -1]
    return np.concatenate(ts), np.concatenate(zs)


@pytest.mark.parametrize("solver", ["slsqp", pytest.param("ipopt", marks=needs_ipopt)])
def test_state_bound_terminal_state_and_path_points(solver):
    """Bryson-Denham on a coarse grid: x1 <= 1/9 at the nodes and, with path_points, inside
    the intervals, checked by simulating the returned control with scipy."""
    problem = double_integrator()
    limit = 1 / 9
    res = invimbed.solve_ocp(problem, [0.0, 1.0], p=0.0, intervals=8, final_state=[0, -1],
                             state_bounds=(None, [limit, np.inf]), path_points=3,
                             solver=solver)
    assert res.success, res.message
    t, z = _simulate(problem, [0.0, 1.0], res, fractions=[0.0, 0.25, 0.5, 0.75, 1.0])
    assert np.max(z[:, 0]) <= limit + 1e-6          # at the nodes and the 3 inner points
    assert np.allclose(z[-1], [0, -1], atol=1e-6)
    assert np.max(res.states[:, 0]) <= limit + 1e-6
    # the unconstrained optimum (J = 2, x1 up to 1/4) is cut off: J rises towards 4
    assert 3.9 < res.fun < 4.5


def test_path_constraint_and_terminal_inequality():
    problem = double_integrator()
    res = invimbed.solve_ocp(
        problem, [0.0, 1.0], p=0.0, intervals=8, solver="slsqp",
        path_constraints=lambda t, z, u: np.array([z[0] - 0.1 - 0.05 * t]), path_points=1,
        terminal_inequality=lambda z: np.array([z[0] ** 2 + (z[1] + 1) ** 2 - 0.01]))
    assert res.success, res.message
    t, z = _simulate(problem, [0.0, 1.0], res, fractions=[0.0, 0.5])
    assert np.max(z[:, 0] - 0.1 - 0.05 * t) <= 1e-6
    assert res.states[-1, 0] ** 2 + (res.states[-1, 1] + 1) ** 2 <= 0.01 + 1e-6


@pytest.mark.parametrize("solver", ["slsqp", pytest.param("ipopt", marks=needs_ipopt)])
def test_free_horizon_minimum_time(solver):
    """Bang-bang minimum time from (1, 0) to rest: H = 2, exact on an even grid."""
    sp = pytest.importorskip("sympy")
    problem = double_integrator(q=0.0, running=sp.Integer(1))
    res = invimbed.solve_ocp(problem, [1.0, 0.0], p=-1.5, intervals=6, final_state=[0, 0],
                             control_bounds=(-1, 1), free_horizon=True, solver=solver)
    assert res.success, res.message
    assert abs(res.horizon - 2.0) <= 1e-6 and abs(res.fun - 2.0) <= 1e-6
    assert res.p == pytest.approx(-2.0, abs=1e-6)
    assert np.allclose(res.controls[:3, 0], -1, atol=1e-6)
    assert np.allclose(res.controls[3:, 0], 1, atol=1e-6)


def test_warm_start_from_a_previous_solution():
    problem = lq_problem(**LQ, q=1.0)
    coarse = invimbed.solve_ocp(problem, [1.0, 0.0], p=0.0, intervals=5, n_controls=1,
                                solver="slsqp")
    cold = invimbed.solve_ocp(problem, [1.0, 0.0], p=0.0, intervals=5, n_controls=1,
                              solver="slsqp", initial_guess={"states": np.zeros((6, 2))})
    warm = invimbed.solve_ocp(problem, [1.0, 0.0], p=0.0, intervals=5, n_controls=1,
                              solver="slsqp", initial_guess=coarse)
    assert warm.success and warm.nit <= 2 < cold.nit
    assert abs(warm.fun - coarse.fun) <= 1e-9
    finer = invimbed.solve_ocp(problem, [1.0, 0.0], p=0.0, intervals=10, solver="slsqp",
                               initial_guess=coarse)     # M from the guess's controls
    assert finer.success and finer.fun <= coarse.fun + 1e-9


def test_misuse_raises_clear_errors():
    problem = lq_problem(**LQ, q=1.0)
    x = [1.0, 0.0]
    with pytest.raises(ValueError, match="`p` .* is required"):
        invimbed.solve_ocp(problem, x, n_controls=1)
    with pytest.raises(ValueError, match="`grid` must end at the problem's q"):
        invimbed.solve_ocp(problem, x, grid=[0, 0.5, 0.9], n_controls=1)
    with pytest.raises(ValueError, match="control size M is unknown"):
        invimbed.solve_ocp(problem, x, p=0.0)
    with pytest.raises(ValueError, match="`control_bounds` is infeasible"):
        invimbed.solve_ocp(problem, x, p=0.0, control_bounds=(1, -1))
    with pytest.raises(ValueError, match="`horizon_bounds` is given but `free_horizon`"):
        invimbed.solve_ocp(problem, x, p=0.0, n_controls=1, horizon_bounds=(0.5, 2))
    with pytest.raises(ValueError, match="`final_state` must have shape"):
        invimbed.solve_ocp(problem, x, p=0.0, n_controls=1, final_state=[0.0])
    with pytest.raises(ValueError, match="`p` must be < q"):
        invimbed.solve_ocp(problem, x, p=2.0, n_controls=1)
    with pytest.raises(ValueError, match="`solver` must be one of"):
        invimbed.solve_ocp(problem, x, p=0.0, n_controls=1, solver="snopt")
    with pytest.raises(ValueError, match="`x` must be one initial state"):
        invimbed.solve_ocp(problem, [[1.0, 0.0]], p=0.0, n_controls=1)
    with pytest.raises(TypeError, match="`path_constraints` must be callable"):
        invimbed.solve_ocp(problem, x, p=0.0, n_controls=1, path_constraints=3)


# -- the gallery on its full grids (the coarse grids run in tests/test_examples.py) -----
@pytest.mark.slow
@pytest.mark.parametrize("name", ["ocp_rayleigh", "ocp_vanderpol", "ocp_min_time",
                                  "ocp_bryson_denham"])
def test_gallery_full_grid_against_published_optimum(name):
    ex = _example(name)
    res = ex.solve(100)
    assert res.success, res.message
    tol = ex.TOLERANCE[100] if isinstance(ex.TOLERANCE, dict) else ex.TOLERANCE
    assert abs(res.fun - ex.PUBLISHED) <= tol * ex.PUBLISHED


@pytest.mark.slow
@needs_ipopt
def test_gallery_hypersensitive_against_published_optimum():
    ex = _example("ocp_hypersensitive")
    res = ex.solve()
    assert res.success, res.message
    assert abs(res.fun - ex.PUBLISHED) <= ex.TOLERANCE * ex.PUBLISHED
    assert abs(res.states[-1, 0] - 1.5) <= 1e-6


@pytest.mark.slow
def test_gallery_lq_tracking_against_riccati():
    ex = _example("ocp_lq_tracking")
    res = ex.solve(40)
    assert res.success, res.message
    assert abs(res.fun - ex.riccati_discrete(40)) <= 1e-7 * res.fun


# -- issue 35: no right answer refused (the check scaled as IPOPT scales its own) --------
def obstacle_problem(double, L, T):
    """A point in the plane (single integrator ``z' = u``, or double ``z'' = u``) from the
    origin to ``(L, 0)`` at rest, ``J = int |u|^2 / 2``, around the disc of radius
    ``0.2 L`` centred at ``(0.5 L, 0.05 L)``: ``g = r^2 - |z - c|^2 <= 0``."""
    sp = pytest.importorskip("sympy")
    t, x, y, vx, vy, ax, ay = sp.symbols("t x y vx vy ax ay")
    if double:
        problem = invimbed.from_sympy(t, [x, y, vx, vy], [ax, ay], [vx, vy, ax, ay],
                                      (ax ** 2 + ay ** 2) / 2, q=T)
        x0, target = [0, 0, 0, 0], [L, 0, 0, 0]
    else:
        problem = invimbed.from_sympy(t, [x, y], [ax, ay], [ax, ay], (ax ** 2 + ay ** 2) / 2,
                                      q=T)
        x0, target = [0, 0], [L, 0]
    c, r = np.array([0.5, 0.05]) * L, 0.2 * L

    def obstacle(t, z, u):
        return np.array([r ** 2 - (z[0] - c[0]) ** 2 - (z[1] - c[1]) ** 2])
    return problem, x0, target, obstacle


@needs_ipopt
@pytest.mark.parametrize("double, L, T, K, points", [(False, 10.0, 5.0, 40, 3),
                                                     (True, 5.0, 10.0, 30, 2)],
                         ids=["single-integrator", "double-integrator"])
def test_obstacle_avoidance_converged_is_success(double, L, T, K, points):
    """IPOPT converges on both (its own scaled check) and our check agrees: before
    issue 35 it refused them (stationarity 1.0e-6 and 1.7e-6), because the small
    multipliers of either sign that an interior-point method leaves on the inactive
    obstacle constraints were zeroed, which moved their sum into ``A^T y``. The path
    is checked by simulating the control with scipy, and SLSQP (multipliers fitted by
    us) finds the same J."""
    problem, x0, target, obstacle = obstacle_problem(double, L, T)
    kw = dict(p=0.0, intervals=K, final_state=target, path_constraints=obstacle,
              path_points=points)
    res = invimbed.solve_ocp(problem, x0, solver="ipopt", **kw)
    assert res.success, res.message
    assert res.solver_status == 0
    t, z = _simulate(problem, x0, res, fractions=np.arange(points + 2) / (points + 1))
    assert np.max([obstacle(ti, zi, None)[0] for ti, zi in zip(t, z)]) <= 1e-6
    assert np.allclose(z[-1], target, atol=1e-6)
    ref = invimbed.solve_ocp(problem, x0, solver="ipopt", initial_guess=res, tol=1e-9, **kw)
    assert abs(res.fun - ref.fun) <= 1e-6 * abs(ref.fun)


def test_kkt_check_reads_inactive_multipliers_through_their_slacks():
    """The check of a point with given multipliers, against hand-made cases: a wrong-
    signed multiplier on an inequality far from its limit counts as its size (not
    zeroed into ``A^T y``), a right-signed one on an inactive limit is shared with the
    slack, and large multipliers scale the residuals as IPOPT's ``s_d``, ``s_c`` do."""
    problem = lq_problem(**LQ, q=1.0)
    sh = Shooting(problem.provider(2, 1), np.array([1.0, 0.0]), 1.0, np.linspace(0, 1, 3),
                  free_horizon=False, horizon=1.0, m=1)
    lb, ub = np.full(sh.n_vars, -np.inf), np.full(sh.n_vars, np.inf)
    ub[sh.u_index(0)] = 10.0                           # an inactive bound, distance ~10
    nlp = ShootingNLP(sh, [Defects(sh)], lb, ub)
    w = np.zeros(sh.n_vars)
    g = nlp.gradient(w)
    J = nlp.jacobian(w).toarray()
    y = np.linalg.lstsq(J.T, -g, rcond=None)[0]
    zb = -(g + J.T @ y)                                # the rest on the variables
    i = sh.u_index(0)[0]
    # zb on variables without bounds (all but u_0): sign errors, counted at their size
    # (u_0 may only push on its upper bound: its negative part is one too)
    bad = kkt_check(nlp, w, tol=1e-6, constraint_tol=1e-6, multipliers=(y, zb))
    wrong = np.abs(np.where(np.arange(w.size) == i, np.minimum(zb, 0), zb))
    assert bad.stationarity == pytest.approx(wrong.max() / max(1.0, np.abs(g).max()), rel=1e-12)
    # a multiplier 1e-9 pushing on the inactive upper bound: a / s_d far from it
    z1 = np.zeros_like(w)
    z1[i] = 1e-9
    tiny = kkt_check(nlp, w, tol=1e-6, constraint_tol=1e-6, multipliers=(y, z1))
    d = 10.0 - w[i]
    assert tiny.complementarity == pytest.approx(1e-9 * d / (1 + d), rel=1e-9)
    assert tiny.stationarity == pytest.approx(
        np.abs(g + J.T @ y + z1).max() / max(1.0, np.abs(g).max()), rel=1e-12)
    # multipliers of mean size 1e4: s_d = (sum |y| + |zb|) / (m + m_ineq + n) / 100
    big = kkt_check(nlp, w, tol=1e-6, constraint_tol=1e-6, multipliers=(y + 1e4, z1))
    s_d = (np.abs(y + 1e4).sum() + 1e-9 * 2) / (nlp.m + 0 + nlp.n) / 100
    assert big.scale_d == pytest.approx(s_d, rel=1e-12)
    r = np.abs(g + J.T @ (y + 1e4) + z1).max()
    assert big.stationarity == pytest.approx(r / s_d / max(1.0, np.abs(g).max()), rel=1e-9)


@needs_ipopt
def test_fixed_control_under_ipopt_is_success():
    """A control pinned by equal bounds: IPOPT removes it and returns no multiplier for
    it; before issue 35 our check then read stationarity 9e-2 and refused the optimum.
    SLSQP (fitted multipliers) agrees on J."""
    sp = pytest.importorskip("sympy")
    t, x, y, ax, ay = sp.symbols("t x y ax ay")
    problem = invimbed.from_sympy(t, [x, y], [ax, ay], [ax + 0.3 * ay, ay - x],
                                  (ax ** 2 + ay ** 2) / 2 + x ** 2, q=1.0)
    kw = dict(p=0.0, intervals=6, control_bounds=([-np.inf, 0.2], [np.inf, 0.2]))
    res = invimbed.solve_ocp(problem, [1.0, 0.5], solver="ipopt", **kw)
    ref = invimbed.solve_ocp(problem, [1.0, 0.5], solver="slsqp", **kw)
    assert res.success and ref.success, (res.message, ref.message)
    assert np.all(res.controls[:, 1] == 0.2)
    assert abs(res.fun - ref.fun) <= 1e-8 * abs(ref.fun)


# -- issue 35: the defects -------------------------------------------------------------
GEOMETRIC = 2.0 * np.concatenate([[0.0], np.cumsum(np.geomspace(0.01, 1, 6))]) / np.sum(
    np.geomspace(0.01, 1, 6))                          # 6 intervals from 0.012 to 1.2


def test_warm_start_dict_on_a_nonuniform_grid_keeps_its_nodes():
    """A dict of states and controls with as many nodes as the non-uniform grid is taken
    node for node, as the same guess given with its ``times`` (or as a result) is: the
    first iterate is the same. Before issue 35 the dict was spread at uniform fractions
    (from the grid's solution: 37 SLSQP iterations instead of 1; on the docs'
    hypersensitive grid 117 IPOPT iterations instead of 4)."""
    from scipy.optimize import OptimizeResult
    problem = lq_problem(**LQ, q=2.0)
    kw = dict(n_controls=1, solver="slsqp", max_iter=1)
    t = GEOMETRIC
    states = np.stack([np.exp(-t) * np.cos(2 * t), -np.exp(-t) * np.sin(2 * t)], axis=1)
    controls = np.sin(3 * t[:-1])[:, None]
    starts = {}
    for name, guess in [("dict", {"states": states, "controls": controls}),
                        ("times", {"states": states, "controls": controls, "times": t}),
                        ("result", OptimizeResult(states=states, controls=controls, times=t))]:
        starts[name] = invimbed.solve_ocp(problem, [1.0, 0.0], grid=t, **kw,
                                          initial_guess=guess).x
    np.testing.assert_array_equal(starts["dict"], starts["result"])
    np.testing.assert_array_equal(starts["times"], starts["result"])
    # on another grid the guess is placed by its times, in fractions of their span
    shifted = {"states": states, "controls": controls, "times": t + 5.0}
    fine = np.sort(np.concatenate([t, 0.5 * (t[1:] + t[:-1])]))
    a = invimbed.solve_ocp(problem, [1.0, 0.0], grid=fine, **kw, initial_guess=shifted).x
    b = invimbed.solve_ocp(problem, [1.0, 0.0], grid=fine, **kw, initial_guess=OptimizeResult(
        states=states, controls=controls, times=t)).x
    np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)     # (t + 5) - 5: rounding


def test_warm_start_refuses_unknown_keys_and_bad_times():
    problem = lq_problem(**LQ, q=1.0)
    kw = dict(p=0.0, intervals=3, n_controls=1, solver="slsqp")
    with pytest.raises(ValueError, match=r"unknown key\(s\) 'control', 'state'; the keys are "
                                         r"'states', 'controls', 'horizon', 'times'"):
        invimbed.solve_ocp(problem, [1.0, 0.0], **kw,
                           initial_guess={"state": np.zeros((4, 2)), "control": np.zeros(3)})
    with pytest.raises(ValueError, match=r"`initial_guess\['times'\]` has 3 node times but "
                                         r"`initial_guess\['states'\]` has 4 rows"):
        invimbed.solve_ocp(problem, [1.0, 0.0], **kw,
                           initial_guess={"states": np.zeros((4, 2)), "times": [0, 0.5, 1]})
    with pytest.raises(ValueError, match="strictly increasing"):
        invimbed.solve_ocp(problem, [1.0, 0.0], **kw,
                           initial_guess={"states": np.zeros((3, 2)), "times": [0, 1, 1]})


def _recommended(text):
    """The ``keyword=value`` pairs a message recommends (``'a' or 'b'``: both values;
    ``...`` or a name: the keyword alone, value None)."""
    import re
    out = []
    for m in re.finditer(r"\b([a-z_][a-z0-9_]*)=('[^']*'|\"[^\"]*\"|True|False|None|"
                         r"-?\d[\w.+-]*|\.\.\.|[A-Za-z_]\w*)((?:\s+or\s+'[^']*')*)", text):
        name, value, more = m.groups()
        values = [value] + [v.strip() for v in more.split(" or ")[1:]]
        for v in values:
            literal = v[0] in "'\"-0123456789" or v in ("True", "False", "None")
            import ast as _ast
            out.append((name, _ast.literal_eval(v) if literal else None))
    return out


def _message_strings(module):
    """Every string constant of ``module`` outside docstrings (the messages' texts,
    f-strings by their literal parts)."""
    import ast
    import inspect
    tree = ast.parse(inspect.getsource(module))
    docs = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef)) and node.body and \
                isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant):
            docs.add(id(node.body[0].value))
    texts = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            texts.append("".join(v.value if isinstance(v, ast.Constant) else "{}"
                                 for v in node.values))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                id(node) not in docs:
            texts.append(node.value)
    return texts


def _accepted(fn, name, value, call):
    """Whether ``fn`` takes the keyword ``name`` (and, for a literal, the value): a call
    with it raises no error that names it."""
    import inspect
    params = inspect.signature(fn).parameters
    extra = getattr(__import__(fn.__module__, fromlist=["KEYWORDS"]), "KEYWORDS", ())
    if name not in params and name not in extra:
        return False
    if value is None and name not in ("linear_quadratic",):
        return True
    try:
        call(**{name: value})
    except (TypeError, ValueError) as exc:
        return f"`{name}`" not in str(exc) and f"{name}=" not in str(exc)
    return True


def test_no_message_recommends_an_option_its_function_rejects():
    """Every ``keyword=value`` that a message of `solve_ocp` or `solve_optimal` recommends
    is taken by that function: the messages' templates (every string of the modules
    that build them, and the shared templates as each function fills them in) and the
    messages of real failures. Before issue 35 `solve_ocp` recommended
    ``method='Radau'`` (it takes "RK45", "RK23") and `solve_optimal`
    ``fallback='adjoint'`` (it has no fallback)."""
    import importlib
    from invimbed._core.results import failures
    from invimbed._control.ocp import shooting
    problem = lq_problem(**LQ, q=1.0)

    def ocp_call(**kw):
        base = dict(p=0.0, intervals=2, n_controls=1, solver="slsqp", max_iter=1)
        if kw.get("solver") == "ipopt" and not have_ipopt():
            kw["solver"] = "slsqp"               # the value is known; the library is not
        base.update(kw)
        return invimbed.solve_ocp(problem, [1.0, 0.0], **base)

    def optimal_call(**kw):
        return invimbed.solve_optimal(problem, [1.0, 0.0], [-0.1], n_controls=1, **kw)

    stiff = invimbed.BolzaProblem(lambda t, z, u: -1e5 * z + u, lambda t, z, u: z[:, 0] ** 2,
                                  q=1.0, vectorized=True, autonomous=True)
    with pytest.raises(ValueError, match="looks stiff") as stiff_res:
        invimbed.solve_ocp(stiff, [1.0], p=0.0, intervals=1, n_controls=1, solver="slsqp",
                           max_steps=2000)
    sp = pytest.importorskip("sympy")
    t, x, u = sp.symbols("t x u")
    hyper = invimbed.from_sympy(t, [x], [u], [-x ** 3 + u], (x ** 2 + u ** 2) / 2,
                                50 * (x - 1) ** 2)
    not_converged = invimbed.solve_optimal(hyper, [1.5], [-0.5], n_controls=1,
                                           control_affine=True, closed_loop=False)
    assert not_converged.status == -2
    cases = {
        invimbed.solve_ocp: (ocp_call, ["ocp.solve", "ocp.nlp", "ocp.solvers",
                                        "ocp.constraints", "ocp.hessian", "ocp.shooting",
                                        "ocp.collocation", "ocp.collocation_hessian",
                                        "ocp.guess", "ocp.outcome"],
                             [str(stiff_res.value)] + [failures.row_failure_reason(
                                 code, 10, h, shooting.STIFF_REMEDY)
                                 for code in (failures.MAX_STEPS, failures.NONFINITE,
                                              failures.UNDERFLOW) for h in (0.0, 10.0)]),
        invimbed.solve_optimal: (optimal_call, ["optimal", "feedback", "closed_loop",
                                                "policy", "riccati", "simulate"],
                                 [not_converged.message] + [failures.row_failure_reason(
                                     failures.MAX_STEPS, 10, 10.0)]),
    }
    for fn, (call, modules, messages) in cases.items():
        texts = list(messages)
        for name in modules:
            texts += _message_strings(importlib.import_module(f"invimbed._control.{name}"))
        pairs = {pair for text in texts for pair in _recommended(text)}
        assert pairs, fn.__name__
        rejected = [p for p in sorted(pairs, key=str) if not _accepted(fn, *p, call)]
        assert not rejected, f"{fn.__name__} messages recommend {rejected}"


def test_bool_constraint_results_refused():
    """``lambda z: z[0] == 1.0`` (a bool) was read as 0.0 and the target ignored: an
    "optimum" that misses it."""
    problem = double_integrator()
    for kw in (dict(terminal_equality=lambda z: z[0] == 1.0),
               dict(terminal_inequality=lambda z: [z[0] <= 1.0]),
               dict(path_constraints=lambda t, z, u: np.array([z[0] > 0.1]))):
        name = next(iter(kw))
        with pytest.raises(TypeError, match=f"`{name}` must return real numbers, but "
                                            f"returned a bool .*Return the residual"):
            invimbed.solve_ocp(problem, [0.0, 1.0], p=0.0, intervals=3, solver="slsqp", **kw)


def test_bounds_shapes_read_and_ambiguous_form_refused():
    """``(low, high)``, one pair per variable and ``scipy.optimize.Bounds`` are read as
    they say; a 2 x 2 array for two variables whose readings differ is refused with both
    (it was read as (low, high), pinning both controls: SLSQP "succeeded" at J = 54
    against 0.909)."""
    from scipy.optimize import Bounds
    from invimbed._control.ocp.constraints import as_pair
    for value, size in [((-1, 2), 3), ([(-1, 2)] * 3, 3), (Bounds([-1] * 3, [2] * 3), 3),
                        (Bounds(-1, 2), 3), ([(-1, 2)], 1), ([[-1, -1], [-1, 2]], 2),
                        (([-1, -1], [3, 2]), 2), ([[-1, 3], [-1, 2]], 2)]:   # one feasible
        lo, hi = as_pair(value, size, "b")
        assert np.all(lo == -1) and np.all(hi[-1] == 2), value
    lo, hi = as_pair(([-1, -np.inf, 0], [np.nan, 3, 1]), 3, "b")     # NaN: no bound
    assert lo.tolist() == [-1, -np.inf, 0] and hi.tolist() == [np.inf, 3, 1]
    sp = pytest.importorskip("sympy")
    t, x, y, a, b = sp.symbols("t x y a b")
    problem = invimbed.from_sympy(t, [x, y], [a, b], [a, b], (a ** 2 + b ** 2) / 2, q=1.0)
    for name in ("control_bounds", "state_bounds"):
        with pytest.raises(ValueError, match=(
                rf"`{name}` = \[\[-2.0, 2.0\], \[-2.0, 2.0\]\] is ambiguous for 2 variables: "
                r"as a \(low, high\) pair it means low = \[-2.0, 2.0\], high = \[-2.0, 2.0\]; "
                r"as one \(low, high\) pair per variable it means low = \[-2.0, -2.0\], "
                r"high = \[2.0, 2.0\]. Say which with scipy.optimize.Bounds")):
            invimbed.solve_ocp(problem, [0.0, 0.0], p=0.0, intervals=2, solver="slsqp",
                               **{name: [(-2, 2), (-2, 2)]})
    res = invimbed.solve_ocp(problem, [1.0, 1.0], p=0.0, intervals=2, solver="slsqp",
                             final_state=[0, 0], control_bounds=Bounds([-2, -2], [2, 2]))
    assert res.success and abs(res.fun - 1.0) <= 1e-8       # u = -1 throughout: J = 1


@pytest.mark.parametrize("solver", ["slsqp", pytest.param(
    "ipopt", marks=[needs_ipopt, pytest.mark.slow])])     # IPOPT: 52 iterations, 30 s
def test_nonfinite_path_constraint_named_with_its_node(solver):
    """``sqrt`` of a negative number at an iterate: the message names the function, the
    node and the point (it was IPOPT's "invalid number" or a NaN KKT residual), and how
    the derivative was computed (traced: "exact")."""
    problem = double_integrator()
    res = invimbed.solve_ocp(problem, [0.0, 1.0], p=0.0, intervals=8, final_state=[0, -1],
                             solver=solver, max_iter=100, path_constraints=lambda t, z, u:
                             np.array([np.sqrt(0.2 - z[0]) - 0.5]))
    assert not res.success and res.status == -1
    assert re.search(r"`path_constraints` (returned \[nan\]|has a derivative \((central "
                     r"differences|exact)\) that is not finite) at node \d+, t = [\d.]+ "
                     r"\(z = \[", res.message), res.message


@needs_ipopt
def test_ipopt_option_error_names_the_option():
    problem = lq_problem(**LQ, q=1.0)
    for options, text in (({"tool": 1e-8}, "'tool' = 1e-08"),
                          ({"max_iter": "ten"}, "'max_iter' = 'ten'")):
        with pytest.raises(ValueError, match=f"IPOPT refused the option {text} of "
                                             f"`solver_options`"):
            invimbed.solve_ocp(problem, [1.0, 0.0], p=0.0, intervals=2, n_controls=1,
                               solver="ipopt", solver_options=options)


def test_runaway_free_horizon_points_to_horizon_bounds():
    """Minimum energy to rest with a free horizon: nothing prices time, the horizon
    grows without end; the message says so and names `horizon_bounds`."""
    problem = double_integrator(q=0.0)
    res = invimbed.solve_ocp(problem, [1.0, 0.0], p=-2.0, intervals=3, final_state=[0, 0],
                             free_horizon=True, solver="slsqp", max_iter=20)
    assert not res.success and res.horizon > 20
    assert re.search(r"The free horizon grew from 2 to [\d.]+: nothing in the problem prices "
                     r"time .* give `horizon_bounds=\(low, high\)`", res.message), res.message
    bounded = invimbed.solve_ocp(problem, [1.0, 0.0], p=-2.0, intervals=3, final_state=[0, 0],
                                 free_horizon=True, horizon_bounds=(1.0, 4.0), solver="slsqp")
    assert bounded.success and abs(bounded.horizon - 4.0) <= 1e-8
    assert "free horizon" not in bounded.message
