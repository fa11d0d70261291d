"""`solve_ocp`: multiple shooting on the ensemble, its exact derivatives, the NLP solvers
(IPOPT and the scipy fallbacks), constraints, free horizon and warm starts.

References are independent of the code under test: finite differences of the objective
and of the constraints, and the exact optimum of a linear-quadratic problem with
piecewise-constant controls (a discrete Riccati recursion on the zero-order-hold
discretisation, Van Loan's matrix exponential).
"""

from __future__ import annotations

import numpy as np
import pytest

import invimbed
from invimbed._control.ocp_constraints import Defects, FinalState, Path, Terminal
from invimbed._control.ocp_nlp import ShootingNLP, kkt_check
from invimbed._control.ocp_solvers import have_ipopt
from invimbed._control.shooting import Shooting

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
    from invimbed._control.ocp_hessian import ColoredHessian

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
    import invimbed._control.ocp as ocp_module
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
