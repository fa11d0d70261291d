"""Structural zeros of the shooting rows' sensitivities (invimbed._control.ocp.sparsity):
the second-order columns left out are exactly zero, and the Hessian of the Lagrangian
equals the one of every column carried (docs/optimization.md, "Which Hessian")."""

from __future__ import annotations

import numpy as np
import pytest

import invimbed
from invimbed._control.ocp.constraints import Defects, Path
from invimbed._control.ocp.exact_hessian import LagrangianHessian
from invimbed._control.ocp.nlp import ShootingNLP
from invimbed._control.ocp.second_order import SecondOrderRows
from invimbed._control.ocp.shooting import Shooting
from invimbed._control.ocp.sparsity import row_pattern
from test_ocp import every_block_nlp

sp = pytest.importorskip("sympy")


def _nlp(problem, x, m, tau, free, horizon, backend, path=None, seed=4):
    """The shooting NLP of ``problem`` (defects, and ``path`` at the nodes and inside)
    and a random point, its horizon ``horizon`` when free."""
    sh = Shooting(problem.provider(len(x), m), np.asarray(x, dtype=float), horizon, tau,
                  free_horizon=free, horizon=horizon, m=m, rtol=1e-10, atol=1e-12,
                  backend=backend)
    blocks = [Defects(sh)] + ([Path(sh, path, 1, "g")] if path is not None else [])
    nlp = ShootingNLP(sh, blocks, np.full(sh.n_vars, -np.inf), np.full(sh.n_vars, np.inf))
    w = np.random.default_rng(seed).normal(scale=0.5, size=sh.n_vars)
    if free:
        w[-1] = horizon
    return nlp, w


def double_integrator(free: bool, backend: str = "auto"):
    """The 2-D obstacle's dynamics (linear, x and y decoupled), a cost quadratic in u,
    a disc constraint at the nodes and inside."""
    t, x, y, vx, vy, ax, ay = sp.symbols("t x y vx vy ax ay")
    problem = invimbed.from_sympy(t, [x, y, vx, vy], [ax, ay], [vx, vy, ax, ay],
                                  (ax ** 2 + ay ** 2) / 2, q=2.0)
    return _nlp(problem, np.zeros(4), 2, np.linspace(0, 1, 4), free, 2.0, backend,
                lambda t, z, u: np.array([1.0 - (z[0] - 1) ** 2 - z[1] ** 2]))


def coupled(free: bool, backend: str = "auto"):
    """A time-dependent problem coupling every state: ``z1' = sin(z2) + t u``, ``z2' =
    z1 z2 - u^2``, with the running cost ``z1^2 + t u^2``."""
    t, a, b, u = sp.symbols("t a b u")
    problem = invimbed.from_sympy(t, [a, b], [u], [sp.sin(b) + t * u, a * b - u ** 2],
                                  a ** 2 + t * u ** 2, q=1.0)
    return _nlp(problem, [0.3, -0.2], 1, np.array([0.0, 0.4, 1.0]), free, 1.1, backend,
                seed=7)


def _every_block(free: bool, backend: str = "auto"):
    nlp, w = every_block_nlp(free, rtol=1e-10, atol=1e-12)
    nlp.sh.backend = backend
    return nlp, w


def test_linear_dynamics_carry_two_second_order_columns():
    """The double integrator: Y_pp of the state is structurally zero, the cost's only in
    (a_x, a_x) and (a_y, a_y); the x and y axes decoupled in Y_p."""
    nlp, _ = double_integrator(False)
    pat = row_pattern(nlp.sh.prov)
    assert not pat.Y_pp[:4].any()
    assert np.argwhere(pat.Y_pp[4]).tolist() == [[4, 4], [5, 5]]
    assert pat.Y_p[0].tolist() == [True, False, True, False, True, False]   # x: x, vx, ax
    assert pat.Y_p[1].tolist() == [False, True, False, True, False, True]   # y: y, vy, ay
    rows = SecondOrderRows(nlp.sh)
    rows.solve(np.zeros(nlp.sh.n_vars))
    assert rows.active.tolist() == [4] and rows.columns.size == 2            # not 36


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("build", [double_integrator, coupled, _every_block],
                         ids=["linear", "coupled", "every-block"])
@pytest.mark.parametrize("free", [False, True], ids=["fixed", "free"])
def test_sparse_hessian_equals_every_column_carried(build, free, backend):
    """The Hessian with only the structurally nonzero columns integrated equals the one
    with every entry of Y_pp[active] integrated (the same steps: 1e-12), and the
    dense solve's entries outside the pattern are exactly zero."""
    if backend == "numba":
        pytest.importorskip("numba")
    nlp, w = build(free, backend)
    y = np.random.default_rng(3).normal(size=nlp.m)
    sparse = LagrangianHessian(nlp)
    H = sparse.values(w, y, 0.7)
    dense = LagrangianHessian(nlp)
    dense.rows_so = SecondOrderRows(nlp.sh, structural_zeros=False)
    H_dense = dense.values(w, y, 0.7)
    assert dense.rows_so.columns.size >= sparse.rows_so.columns.size
    np.testing.assert_allclose(H, H_dense, rtol=0, atol=1e-12 * max(1.0, np.abs(H).max()))
    out = dense.rows_so.solve(w)[0]
    P = dense.rows_so.P
    full = out.y[:, dense.rows_so.i2:].reshape(-1, dense.rows_so.active.size, P, P)
    pat = row_pattern(nlp.sh.prov).Y_pp[dense.rows_so.active]
    assert np.all(full[:, ~pat] == 0.0)


def _dense(hess: LagrangianHessian, vals: np.ndarray) -> np.ndarray:
    H = np.zeros((hess.nlp.n, hess.nlp.n))
    H[hess.rows, hess.cols] = vals
    return H + np.tril(H, -1).T


@pytest.mark.parametrize("build", [double_integrator, coupled, _every_block],
                         ids=["linear", "coupled", "every-block"])
@pytest.mark.parametrize("free", [False, True], ids=["fixed", "free"])
def test_declared_hessian_structure_leaves_out_only_zeros(build, free):
    """The declared structure (lower triangle) from the symbolic zeros: the Hessian on
    it equals the one on every entry of the blocks (1e-12), which is exactly zero off
    it; the linear problem declares fewer entries."""
    nlp, w = build(free, "numpy")
    y = np.random.default_rng(3).normal(size=nlp.m)
    sparse = LagrangianHessian(nlp)
    blocks = LagrangianHessian(nlp, structural_zeros=False)
    H = _dense(sparse, sparse.values(w, y, 0.7))
    H_blocks = _dense(blocks, blocks.values(w, y, 0.7))
    np.testing.assert_allclose(H, H_blocks, rtol=0,
                               atol=1e-12 * max(1.0, np.abs(H_blocks).max()))
    declared = np.zeros_like(H, dtype=bool)
    declared[sparse.rows, sparse.cols] = declared[sparse.cols, sparse.rows] = True
    assert np.all(H_blocks[~declared] == 0.0)
    assert sparse.rows.size <= blocks.rows.size
    if build is double_integrator:
        assert sparse.rows.size < 0.6 * blocks.rows.size       # fixed: 36 of 79


@pytest.mark.parametrize("build", [double_integrator, coupled, _every_block],
                         ids=["linear", "coupled", "every-block"])
@pytest.mark.parametrize("free", [False, True], ids=["fixed", "free"])
def test_defect_jacobian_declares_only_reachable_sensitivities(build, free):
    """The defects' Jacobian declares F_s, F_u only where Y_p's pattern reaches: the
    sensitivities left out are exactly zero in the solve, and the Jacobian matches
    central differences of the constraints (1e-6)."""
    from test_ocp import _fd_check

    nlp, w = build(free, "auto")
    sh = nlp.sh
    sol = nlp.solution(w)
    pat = row_pattern(sh.prov).Y_p[:sh.n]
    assert np.all(sol.Fs[:, ~pat[:, :sh.n]] == 0.0)
    assert np.all(sol.Fu[:, ~pat[:, sh.n:]] == 0.0)
    _, _, Jc, J_fd = _fd_check(nlp, w)
    assert np.max(np.abs(Jc - J_fd)) <= 1e-6 * max(1.0, np.max(np.abs(Jc)))
    rows, _ = sh.defect_structure()
    per = sh.n + int(free) * sh.n
    if build is double_integrator:       # x: x, vx, a_x; vx: vx, a_x (and y alike)
        assert rows.size == sh.K * (per + 4 + 6) - 6          # s_0 fixed: no F_s
    elif build is coupled:               # every state reaches every other
        assert rows.size == sh.K * (per + 2 + 4) - 4


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("free", [False, True], ids=["fixed", "free"])
def test_linear_problem_takes_no_second_order_solve(free, backend):
    """f and R linear in (z, u) (a double integrator, R = 1 + u: time-optimal-like):
    no entry of Y_pp can be nonzero, the Hessian comes from the NLP's own first-order
    solve at the same point (no solve of its own) and equals the one of a second-order
    solve (1e-12); the horizon's terms, from the ends' g and g_w, included."""
    if backend == "numba":
        pytest.importorskip("numba")
    t, x, v, u = sp.symbols("t x v u")
    problem = invimbed.from_sympy(t, [x, v], [u], [v, u], 1 + u, q=1.5)
    nlp, w = _nlp(problem, [0.2, 0.0], 1, np.linspace(0, 1, 5), free, 1.5, backend,
                  lambda t, z, u: np.array([z[0] ** 2 + z[1] ** 2 - 1.0]))
    y = np.random.default_rng(3).normal(size=nlp.m)
    hess = LagrangianHessian(nlp)
    nlp.constraints(w)
    before = nlp.n_solves
    H = _dense(hess, hess.values(w, y, 0.7))
    assert hess.rows_so.columns.size == 0 and nlp.n_solves == before
    own = LagrangianHessian(nlp, structural_zeros=False)
    H_own = _dense(own, own.values(w, y, 0.7))
    assert nlp.n_solves == before + 1
    np.testing.assert_allclose(H, H_own, rtol=0, atol=1e-12 * max(1.0, np.abs(H_own).max()))
    assert np.abs(H).max() > 0.1
