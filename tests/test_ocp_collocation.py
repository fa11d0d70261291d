"""`solve_ocp(transcription="collocation")`: Radau IIA collocation for stiff intervals.

References are independent of the code under test: scipy's Radau IIA constants and the
closed-form weights, finite differences of the objective, the constraints and the
Lagrangian gradient, the exact optimum over piecewise-constant controls of a
linear-quadratic problem (a discrete Riccati recursion), scipy's `solve_ivp` (Radau)
re-simulating the returned control, and CasADi's collocation of the same problem.
"""

from __future__ import annotations

import numpy as np
import pytest

import invimbed
from invimbed._control.ocp.collocation import Collocation, radau_iia
from invimbed._control.ocp.collocation_hessian import CollocationHessian
from invimbed._control.ocp.constraints import Defects, FinalState, Path, Terminal
from invimbed._control.ocp.nlp import ShootingNLP
from invimbed._control.ocp.solvers import have_ipopt

from test_ocp import LQ, lq_problem, nonautonomous_problem, zoh_lq_optimum

needs_ipopt = pytest.mark.skipif(not have_ipopt(), reason="cyipopt is not installed")


def hypersensitive(q):
    sp = pytest.importorskip("sympy")
    t, x, u = sp.symbols("t x u")
    return invimbed.from_sympy(t, [x], [u], [-x ** 3 + u], (x ** 2 + u ** 2) / 2, q=q)


def resimulate(f, f_x, R, x0, res):
    """The returned control integrated by scipy's Radau alone (the scalar dynamics
    ``f(x, u)``, its ``f_x`` and the running cost ``R(x, u)`` written out here, not taken
    from the problem): the node states and the exact running cost of that control."""
    from scipy.integrate import solve_ivp
    z, J, nodes = float(x0), 0.0, [float(x0)]
    for k, (u,) in enumerate(res.controls):
        sol = solve_ivp(lambda t, y, u=u: [f(y[0], u), R(y[0], u)],
                        (res.times[k], res.times[k + 1]), [z, 0.0], method="Radau",
                        rtol=1e-11, atol=1e-13,
                        jac=lambda t, y, u=u: [[f_x(y[0]), 0.0], [y[0], 0.0]])
        z, J = sol.y[0, -1], J + sol.y[1, -1]
        nodes.append(z)
    return np.array(nodes)[:, None], J


def test_radau_iia_data():
    """The points are scipy's Radau IIA points, the weights the closed form, and the
    quadrature is exact to degree 2 d - 2."""
    from scipy.integrate._ivp.radau import C as scipy_c
    c, C, b, _ = radau_iia(3)
    s6 = np.sqrt(6.0)
    assert np.allclose(c, scipy_c, rtol=0, atol=1e-15)
    assert np.allclose(b, [(16 - s6) / 36, (16 + s6) / 36, 1 / 9], rtol=0, atol=1e-15)
    for d in (1, 2, 3, 4, 5):
        c, C, b, basis = radau_iia(d)
        assert c[-1] == 1.0 and np.all(np.diff(c) > 0) and c[0] > 0
        for k in range(2 * d - 1):                # int_0^1 a^k = 1 / (k + 1)
            assert abs(b @ c ** k - 1.0 / (k + 1)) <= 1e-14
        nodes = np.concatenate([[0.0], c])        # C differentiates degree-d polynomials
        for k in range(d + 1):
            assert np.allclose(nodes ** k @ C, k * c ** max(k - 1, 0) if k else 0.0,
                               atol=1e-12)


def _collocation_nlp(problem, x0, K, q, d=3, free=False, functions=False):
    col = Collocation(problem.provider(len(x0), 1), np.asarray(x0, float), q,
                      np.linspace(0.0, 1.0, K + 1) ** 1.3, horizon=q, m=1, degree=d,
                      free_horizon=free)
    blocks = [Defects(col), FinalState(col, np.array([0.2, np.nan]))]
    if functions:                  # the user's constraint functions, nonlinear, t too
        blocks += [Terminal(col, lambda z: np.array([z[0] ** 2 * z[1] - 0.3]), False, "h",
                            np.asarray(x0, float)),
                   Path(col, lambda t, z, u: np.array([z[0] * z[1] + 0.1 * t ** 2 * u[0]
                                                       - u[0] ** 2, np.sin(z[1] * u[0])]),
                        0, "g")]
    lb, ub = np.full(col.n_vars, -np.inf), np.full(col.n_vars, np.inf)
    return col, ShootingNLP(col, blocks, lb, ub)


@pytest.mark.parametrize("functions", [False, True], ids=["", "constraint-functions"])
@pytest.mark.parametrize("free", [False, True], ids=["fixed-horizon", "free-horizon"])
def test_derivatives_and_hessian_match_finite_differences(free, functions):
    """The gradient, the constraints' Jacobian and the exact Hessian of the Lagrangian
    against central differences, on a nonlinear time-dependent problem with a terminal
    loss, at a random point (relative 1e-6), with the horizon fixed and free (its
    derivatives in t by differences inside); with ``functions`` also a terminal and a
    time-dependent path constraint of the user's (their traced second derivatives)."""
    problem = nonautonomous_problem(q=1.2)
    col, nlp = _collocation_nlp(problem, [0.4, -0.3], K=4, q=1.2, free=free,
                                functions=functions)
    rng = np.random.default_rng(0)
    w = rng.normal(scale=0.5, size=nlp.n)
    if free:
        w[-1] = 1.1
    y = rng.normal(size=nlp.m)
    sigma, eps = 0.7, 1e-6
    E = np.eye(nlp.n)
    g_fd = np.array([(nlp.objective(w + eps * e) - nlp.objective(w - eps * e)) / (2 * eps)
                     for e in E])
    J_fd = np.array([(nlp.constraints(w + eps * e) - nlp.constraints(w - eps * e)) / (2 * eps)
                     for e in E]).T
    assert np.max(np.abs(nlp.gradient(w) - g_fd)) <= 1e-6 * np.max(np.abs(g_fd))
    assert np.max(np.abs(nlp.jacobian(w).toarray() - J_fd)) <= 1e-6 * np.max(np.abs(J_fd))

    def lagrangian_gradient(v):
        return sigma * nlp.gradient(v) + nlp.jacobian(v).T @ y

    step = 1e-4       # the gradient's d/dH holds differences in t: noise 1e-12 / step
    H_fd = np.array([(lagrangian_gradient(w + step * e) - lagrangian_gradient(w - step * e))
                     / (2 * step) for e in E])
    hess = CollocationHessian(col, nlp)
    rows, cols = hess.structure()
    assert np.all(rows >= cols)
    H = np.zeros((nlp.n, nlp.n))
    H[rows, cols] = hess.values(w, y, sigma)
    H = H + np.tril(H, -1).T
    assert np.max(np.abs(H - H_fd)) <= 1e-6 * np.max(np.abs(H_fd))


@pytest.mark.parametrize("solver", [pytest.param("ipopt", marks=needs_ipopt), "slsqp"])
def test_lq_converges_to_the_piecewise_constant_optimum(solver):
    """The collocation optimum approaches the exact optimum over piecewise-constant
    controls with the method's order 2 d - 1: relative error 4e-4, 3.4e-7, 1.5e-10 for
    d = 2, 3, 4 at K = 8 (measured; SLSQP, slower on the same NLP, d = 3, 4)."""
    K, T = 8, 1.5
    problem = lq_problem(**LQ, q=T)
    x0 = np.array([1.0, -0.5])
    ref = zoh_lq_optimum(**LQ, h=T / K, K=K, x0=x0)
    for d, bound in ((2, 1e-3), (3, 1e-6), (4, 1e-9))[solver == "slsqp":][:2]:
        res = invimbed.solve_ocp(problem, x0, p=0.0, intervals=K, n_controls=1, solver=solver,
                                 transcription="collocation", collocation_degree=d)
        assert res.success, res.message
        assert abs(res.fun - ref) <= bound * ref, (d, res.fun, ref)


STIFF = 1e5


def stiff_problem():
    """``x' = -1e5 x + u``, ``J = int (x^2 + u^2) / 2``, ``x(1) = 0.5`` (a stiff interval
    for an explicit method: steps of 3e-5 over the whole horizon)."""
    sp = pytest.importorskip("sympy")
    t, x, u = sp.symbols("t x u")
    return invimbed.from_sympy(t, [x], [u], [-STIFF * x + u], (x ** 2 + u ** 2) / 2, q=1.0)


@needs_ipopt
def test_stiff_intervals_solved_by_collocation():
    """Shooting stops at the explicit method's stability limit and recommends the
    collocation transcription; collocation solves the problem (4 intervals, ``h lambda =
    25000``). scipy's Radau re-simulating its control agrees within the closed-form
    error of Radau IIA on a stiff interval: its stability function ``R(z) = (1 + 2 z / 5 +
    z^2 / 20) / (1 - 3 z / 5 + 3 z^2 / 20 - z^3 / 60)`` damps the transient to ``R(-h
    lambda) ~ 3 / (h lambda) = 1.2e-4`` of its size instead of ``exp(-h lambda) = 0``.
    With ``u`` constant, ``x -> u / 1e5`` at once: ``x(1) = 0.5`` needs ``u = 5e4``."""
    problem = stiff_problem()
    with pytest.raises(ValueError, match="looks stiff.*transcription='collocation'"):
        invimbed.solve_ocp(problem, [1.0], p=0.0, intervals=4, final_state=[0.5],
                           max_steps=300)
    res = invimbed.solve_ocp(problem, [1.0], p=0.0, intervals=4, final_state=[0.5],
                             transcription="collocation")
    assert res.success, res.message
    nodes, J = resimulate(lambda x, u: -STIFF * x + u, lambda x: -STIFF,
                          lambda x, u: (x ** 2 + u ** 2) / 2, 1.0, res)
    z = -STIFF * 0.25
    damping = (1 + 2 * z / 5 + z ** 2 / 20) / (1 - 3 * z / 5 + 3 * z ** 2 / 20 - z ** 3 / 60)
    # each node: the collocation state is the exact one plus R(z) times the transient
    # ``s_k - u_k / lambda`` of its interval
    transient = res.states[:-1, 0] - res.controls[:, 0] / STIFF
    exact = res.controls[:, 0] / STIFF + np.exp(z) * transient
    assert np.allclose(res.states[1:, 0], exact + damping * transient, rtol=0, atol=1e-9)
    assert np.allclose(nodes[1:, 0], exact, rtol=0, atol=1e-9)
    assert abs(res.states[-1, 0] - 0.5) <= 1e-9
    assert abs(res.controls[-1, 0] - 0.5 * STIFF) <= 1e-3 * STIFF
    assert abs(J - res.fun) <= 1e-4 * J


@needs_ipopt
def test_same_optimum_as_casadi_collocation():
    """CasADi's direct collocation (Radau, degree 3) of the hypersensitive problem with
    tf = 20 on 10 intervals, from the same start: J and the node states agree."""
    ca = pytest.importorskip("casadi")
    K, tf = 10, 20.0
    tau = np.append(0, ca.collocation_points(3, "radau"))
    _, C, b, _ = radau_iia(3)
    x, u = ca.SX.sym("x"), ca.SX.sym("u")
    f = ca.Function("f", [x, u], [-x ** 3 + u, (x ** 2 + u ** 2) / 2])
    h = tf / K
    w, g, J, nodes = [], [], 0, [ca.MX(1.5)]
    for k in range(K):
        Uk = ca.MX.sym(f"U{k}")
        Xc = [ca.MX.sym(f"X{k}{j}") for j in range(3)]
        w += [Uk] + Xc
        for j in range(3):
            fj, qj = f(Xc[j], Uk)
            g.append(h * fj - C[0, j] * nodes[-1] - sum(C[r + 1, j] * Xc[r] for r in range(3)))
            J = J + b[j] * h * qj
        nodes.append(Xc[-1])
    g.append(nodes[-1] - 1.0)
    solver = ca.nlpsol("S", "ipopt", {"f": J, "x": ca.vertcat(*w), "g": ca.vertcat(*g)},
                       {"print_time": False, "ipopt.print_level": 0, "ipopt.sb": "yes",
                        "ipopt.tol": 1e-10})
    line = 1.5 - 0.5 * np.arange(1, K + 1) / K        # solve_ocp's start
    w0 = np.concatenate([[0.0, s, s, s] for s in line])
    sol = solver(x0=w0, lbg=0, ubg=0)
    assert solver.stats()["success"]
    ref = np.array(sol["x"]).ravel().reshape(K, 4)
    res = invimbed.solve_ocp(hypersensitive(tf), [1.5], p=0.0, intervals=K,
                             final_state=[1.0], transcription="collocation", tol=1e-10)
    assert res.success, res.message
    assert abs(res.fun - float(sol["f"])) <= 1e-8 * float(sol["f"])
    assert np.max(np.abs(res.states[1:, 0] - ref[:, 3])) <= 1e-7
    assert np.max(np.abs(res.controls[:, 0] - ref[:, 0])) <= 1e-7


@pytest.mark.slow
@needs_ipopt
def test_hypersensitive_on_the_docs_grid_without_a_guess():
    """tf = 10^4 on the gallery's grid (K = 164): no initial guess, the default (exact)
    Hessian; J = 1.333019, shooting's value on that grid (docs/optimal-control.md), and
    scipy's re-simulation of the control gives the same cost and end state."""
    import importlib.util
    from pathlib import Path
    path = Path(__file__).resolve().parents[1] / "examples" / "ocp_hypersensitive.py"
    spec = importlib.util.spec_from_file_location("ocp_hypersensitive", path)
    ex = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ex)
    problem = hypersensitive(1e4)
    res = invimbed.solve_ocp(problem, [1.5], grid=ex.grid(), final_state=[1.0],
                             transcription="collocation")
    assert res.success, res.message
    assert abs(res.fun - 1.333019) <= 1e-6
    nodes, J = resimulate(lambda x, u: -x ** 3 + u, lambda x: -3 * x ** 2,
                          lambda x, u: (x ** 2 + u ** 2) / 2, 1.5, res)
    assert abs(J - res.fun) <= 1e-6 * J and abs(nodes[-1, 0] - 1.0) <= 1e-6


def test_collocation_misuse_refused():
    problem = hypersensitive(2.0)
    base = dict(p=0.0, intervals=3, final_state=[1.0], solver="slsqp")
    cases = [
        (dict(transcription="radau"), "`transcription`"),
        (dict(transcription="collocation", collocation_degree=0), "`collocation_degree`"),
        (dict(transcription="collocation", path_points=2), "path_points = 2"),
        (dict(transcription="collocation", hessian="finite-differences"),
         "has its exact Hessian"),
    ]
    for kw, match in cases:
        with pytest.raises(ValueError, match=match):
            invimbed.solve_ocp(problem, [1.5], **{**base, **kw})


def test_nonfinite_dynamics_named_with_its_collocation_point():
    """A running loss whose derivative is not finite at a collocation state (``sqrt`` at
    0, then of negative states, on the straight line from 1 to -1, the interior states at
    their interval's end node): the start is refused naming the interval, the point,
    ``t``, ``z`` and ``u``."""
    sp = pytest.importorskip("sympy")
    t, x, u = sp.symbols("t x u")
    problem = invimbed.from_sympy(t, [x], [u], [u], u ** 2 / 2 + sp.sqrt(x), q=1.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        with pytest.raises(ValueError, match=(
                r"initial guess cannot be integrated: the dynamics or the running loss \(or "
                r"a first derivative\) is not finite at collocation point 1 of interval 1 "
                r"\(t = 0\.288763, z = \[0\.\], u = \[0\.\]; 9 points\)")):
            invimbed.solve_ocp(problem, [1.0], p=0.0, intervals=4, final_state=[-1.0],
                               solver="slsqp", transcription="collocation")


def test_trust_constr_solves_the_collocation_nlp():
    """scipy's trust-constr on the same NLP: the LQ optimum over piecewise-constant
    controls (relative 1e-6 at d = 3, as with IPOPT)."""
    K, T = 6, 1.0
    problem = lq_problem(**LQ, q=T)
    x0 = np.array([1.0, -0.5])
    res = invimbed.solve_ocp(problem, x0, p=0.0, intervals=K, n_controls=1,
                             solver="trust-constr", transcription="collocation")
    assert res.success, res.message
    assert abs(res.fun - zoh_lq_optimum(**LQ, h=T / K, K=K, x0=x0)) <= 1e-6 * res.fun
    assert res.violations == {"collocation equations": pytest.approx(0.0, abs=1e-8)}
    assert np.max(np.abs(res.defects)) <= 1e-8


@pytest.mark.parametrize("solver", ["slsqp", pytest.param("ipopt", marks=needs_ipopt)])
def test_free_horizon_minimum_time(solver):
    """Bang-bang minimum time from (1, 0) to rest: H = 2, exact on an even grid (the
    collocation polynomial of degree 3 holds ``x'' = u`` exactly)."""
    sp = pytest.importorskip("sympy")
    t, z1, z2, u = sp.symbols("t z1 z2 u")
    problem = invimbed.from_sympy(t, [z1, z2], [u], [z2, u], sp.Integer(1), q=0.0)
    res = invimbed.solve_ocp(problem, [1.0, 0.0], p=-1.5, intervals=6, final_state=[0, 0],
                             control_bounds=(-1, 1), free_horizon=True, solver=solver,
                             transcription="collocation")
    assert res.success, res.message
    assert abs(res.horizon - 2.0) <= 1e-6 and abs(res.fun - 2.0) <= 1e-6
    assert res.p == pytest.approx(-2.0, abs=1e-6)
    assert np.allclose(res.controls[:, 0], [-1, -1, -1, 1, 1, 1], atol=1e-6)


@needs_ipopt
def test_constraint_functions_take_the_exact_hessian_and_reach_the_same_optimum():
    """With a constraint function (traced: exact second derivatives) the default Hessian
    is the exact one (it was L-BFGS); ``terminal_equality`` ``z - 1`` reaches the
    optimum that ``final_state`` reaches (same discrete problem), in Newton's iterations
    (6 and 5 measured), fewer than L-BFGS's (8); a function that does not trace is
    differenced and solves alike."""
    problem = hypersensitive(3.0)
    base = dict(p=0.0, intervals=6, transcription="collocation")
    exact = invimbed.solve_ocp(problem, [1.5], final_state=[1.0], **base)
    traced = invimbed.solve_ocp(problem, [1.5], terminal_equality=lambda z: z - 1.0, **base)
    lbfgs = invimbed.solve_ocp(problem, [1.5], terminal_equality=lambda z: z - 1.0,
                               hessian="limited-memory", **base)
    branchy = invimbed.solve_ocp(problem, [1.5], terminal_equality=lambda z: (
        z - 1.0 if z[0] > -100 else z), **base)
    for res in (exact, traced, lbfgs, branchy):
        assert res.success, res.message
        assert abs(res.fun - exact.fun) <= 1e-6 * exact.fun
    assert traced.hessian == branchy.hessian == "exact"
    assert traced.constraint_derivatives == {"terminal_equality": "exact: traced into sympy"}
    assert branchy.constraint_derivatives["terminal_equality"].startswith("central")
    assert lbfgs.nit > traced.nit > 0 and lbfgs.nit > exact.nit
