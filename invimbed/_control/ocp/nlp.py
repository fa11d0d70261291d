"""The nonlinear program of multiple shooting, and our own check of its optimality.

`ShootingNLP` is what every NLP solver sees (`invimbed._control.ocp.solvers`): the
objective, its gradient, the stacked constraints ``cl <= c(w) <= cu`` with their sparse
Jacobian, and the bounds ``lb <= w <= ub``. Each distinct ``w`` costs one ensemble solve
(`invimbed._control.ocp.shooting.Shooting.solve`), shared by the objective, the gradient, the
constraints and the Jacobian.

`kkt_check` judges a point independently of the solver that produced it: the constraint
violation, and the first-order (KKT) residual with multipliers that *we* fit to the
active constraints by bounded least squares (equalities free, inequalities of the right
sign), so that a solver's "converged" is never taken on trust.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import lsq_linear
from scipy.sparse import coo_matrix, csr_matrix, identity, vstack

from .constraints import Block
from ..options import SolverFailure
from .shooting import IntervalSolve, Shooting


class ShootingNLP:
    """``min J(w)`` s.t. ``cl <= c(w) <= cu``, ``lb <= w <= ub`` (multiple shooting)."""

    def __init__(self, sh: Shooting, blocks: list[Block], lb: np.ndarray,
                 ub: np.ndarray) -> None:
        self.sh = sh
        self.blocks = blocks
        self.lb, self.ub = lb, ub
        self.cl = np.concatenate([b.lower for b in blocks])
        self.cu = np.concatenate([b.upper for b in blocks])
        offsets = np.cumsum([0] + [b.size for b in blocks])
        self.rows = np.concatenate([b.rows + o for b, o in zip(blocks, offsets)])
        self.cols = np.concatenate([b.cols for b in blocks])
        self.record = any(b.needs_dense for b in blocks)
        self.n_solves = 0
        self.nfev = 0
        self._key: bytes | None = None
        self._sol: IntervalSolve | None = None
        self._cons: tuple[np.ndarray, np.ndarray] | None = None

    @property
    def n(self) -> int:
        return self.sh.n_vars

    def set_initial_state(self, x: np.ndarray) -> None:
        """Solve from ``s_0 = x`` from now on (the cached solve forgotten)."""
        self.sh.x = np.array(x, dtype=float)
        self._key = self._sol = self._cons = None

    def shifted_rows(self, shift: int) -> np.ndarray:
        """For each constraint, the one whose multiplier it takes when the solution
        moves ``shift`` intervals on (`Block.shifted_rows`)."""
        offsets = np.cumsum([0] + [b.size for b in self.blocks])
        return np.concatenate([b.shifted_rows(shift) + o
                               for b, o in zip(self.blocks, offsets)])

    @property
    def m(self) -> int:
        return int(self.cl.size)

    def solution(self, w: np.ndarray) -> IntervalSolve:
        """The ensemble solve at ``w`` (cached: the last ``w`` only), with its dense
        output: the result's trajectory at the last point reads it."""
        w = np.asarray(w, dtype=float)
        key = w.tobytes()
        if key != self._key:
            sol = self.sh.solve(w, record=True)
            self.n_solves += 1
            self.nfev += sol.nfev
            if sol.failure is not None:
                raise SolverFailure(sol.failure)
            self._key, self._sol, self._cons = key, sol, None
        return self._sol

    def objective(self, w: np.ndarray) -> float:
        return self.sh.objective(w, self.solution(w))

    def gradient(self, w: np.ndarray) -> np.ndarray:
        return self.sh.gradient(w, self.solution(w))

    def _constraints(self, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        sol = self.solution(w)
        if self._cons is None:
            self._cons = self._evaluate_blocks(w, sol)
        return self._cons

    def _evaluate_blocks(self, w: np.ndarray, sol: IntervalSolve
                         ) -> tuple[np.ndarray, np.ndarray]:
        parts = [b.evaluate(w, sol) for b in self.blocks]
        return (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))

    def lagrangian_gradients(self, ws: np.ndarray, y: np.ndarray, sigma: float) -> np.ndarray:
        """``sigma grad J + J_c^T y`` at each row of ``ws`` (P, n), from ONE ensemble
        solve of all ``P K`` intervals (`Shooting.solve_points`); the cache of
        `solution` is left alone."""
        ws = np.asarray(ws, dtype=float)
        sols = self.sh.solve_points(ws, record=self.record)
        self.n_solves += 1
        self.nfev += sols[0].nfev
        out = np.empty(ws.shape)
        weights = y[self.rows]
        for j, (w, sol) in enumerate(zip(ws, sols)):
            if sol.failure is not None:
                raise SolverFailure(sol.failure)
            jac = self._evaluate_blocks(w, sol)[1]
            out[j] = sigma * self.sh.gradient(w, sol) + np.bincount(
                self.cols, weights=jac * weights, minlength=self.n)
        return out

    def constraints(self, w: np.ndarray) -> np.ndarray:
        return self._constraints(w)[0]

    def jacobian_values(self, w: np.ndarray) -> np.ndarray:
        return self._constraints(w)[1]

    def jacobian(self, w: np.ndarray) -> csr_matrix:
        """The constraints' Jacobian, sparse (m, n)."""
        return coo_matrix((self.jacobian_values(w), (self.rows, self.cols)),
                          shape=(self.m, self.n)).tocsr()

    def violation(self, w: np.ndarray) -> float:
        """The largest violation of a constraint or a bound (absolute)."""
        c = self.constraints(w)
        parts = [np.maximum(self.cl - c, 0), np.maximum(c - self.cu, 0),
                 np.maximum(self.lb - w, 0), np.maximum(w - self.ub, 0)]
        return float(max(np.max(p, initial=0.0) for p in parts))

    def violation_by_block(self, w: np.ndarray) -> dict[str, float]:
        c = self.constraints(w)
        out, o = {}, 0
        for b in self.blocks:
            cb = c[o:o + b.size]
            o += b.size
            v = np.maximum(np.maximum(b.lower - cb, 0), np.maximum(cb - b.upper, 0))
            out[b.name] = max(out.get(b.name, 0.0), float(np.max(v, initial=0.0)))
        return out


#: IPOPT's ``s_max``: the multipliers' mean size beyond which the KKT residuals are
#: scaled down (Wachter & Biegler 2006, eq. (5)).
S_MAX = 100.0


@dataclass
class KKT:
    """Our check of a point: residuals and whether they are within the tolerances."""

    stationarity: float       # max(||grad J + A^T y + zb||_inf, sign errors) / (scale s_d)
    complementarity: float    # max multiplier * distance / (s_c + s_d distance) / scale
    violation: float          # largest constraint or bound violation
    ok: bool
    scale_d: float = 1.0      # IPOPT's s_d
    scale_c: float = 1.0      # IPOPT's s_c
    residual: np.ndarray | None = None    # grad J + A^T y + zb, per variable


def kkt_check(nlp: ShootingNLP, w: np.ndarray, *, tol: float, constraint_tol: float,
              multipliers: tuple[np.ndarray, np.ndarray] | None = None) -> KKT:
    """First-order optimality of ``w``, judged by us, scaled as IPOPT scales its own.

    The Lagrangian is ``J + y^T c + zb^T w``: a multiplier ``> 0`` pushes on an upper
    limit, ``< 0`` on a lower one, free for equalities and fixed variables. Each
    inequality (a constraint, or a bound on a variable) is read as IPOPT reads it:
    ``c - s = 0`` with a slack ``lo <= s <= hi`` at ``s = c``, whose own multiplier
    ``mu >= 0`` on the limit that ``y`` pushes on should equal ``y``. Then

    - ``stationarity = max(||grad J + A^T y + zb||_inf / s_d, e) / scale``, ``e`` the
      largest part of a multiplier that pushes on a limit that does not exist (a sign
      error: the slack's stationarity ``|y - mu|`` with ``mu = 0``), over ``s_d``;
    - ``complementarity = max a d / (s_c + s_d d) / scale`` over the parts ``a`` of the
      multipliers that push on a finite limit at distance ``d``: ``a`` shared between
      the slack's stationarity and the complementarity ``mu d`` as evenly as the scales
      allow, which reads ``a d / s_c`` at an active limit and ``a / s_d`` far from it;

    with ``scale = max(1, ||grad J||_inf)`` and IPOPT's multiplier scales (Wachter &
    Biegler 2006, eq. (5), the "scaled NLP error" that IPOPT's option ``tol`` bounds),
    ``s_d = max(s_max, (||y||_1 + ||y_ineq||_1 + ||zb||_1) / (m + m_ineq + n)) / s_max``
    and ``s_c = max(s_max, (||y_ineq||_1 + ||zb||_1) / (m_ineq + n)) / s_max``, ``s_max
    = 100``: the residuals are relative to the multipliers where those are large on
    average, absolute up to a mean size of 100. ``ok`` is both ``<= tol`` and
    ``violation <= constraint_tol``.

    The multipliers are the solver's (``multipliers = (y, zb)``, IPOPT) as they come: an
    interior-point method ends with small multipliers of either sign on inactive
    inequalities, which are measured as above, not zeroed (zeroing them moves their sum
    into ``A^T y``). A fixed variable (equal bounds), which IPOPT removes from the
    problem and returns no multiplier for, takes the multiplier that its stationarity
    row asks. Without them (the scipy solvers) the multipliers are fitted by us by
    bounded least squares (`scipy.optimize.lsq_linear`) to the constraints and bounds
    within ``constraint_tol`` of their limits, with the right signs.
    """
    w = np.asarray(w, dtype=float)
    g = nlp.gradient(w)
    c = nlp.constraints(w)
    Jc = nlp.jacobian(w)
    viol = nlp.violation(w)
    scale = max(1.0, float(np.max(np.abs(g), initial=0.0)))
    eq = nlp.cl == nlp.cu
    fixed = nlp.lb == nlp.ub
    if multipliers is not None:
        y = np.asarray(multipliers[0], dtype=float).copy()
        zb = np.asarray(multipliers[1], dtype=float).copy()
        zb[fixed] = -(g + Jc.T @ y)[fixed]
    else:
        y, zb = _fitted(nlp, w, g, c, Jc, eq, fixed, constraint_tol)
    r = g + Jc.T @ y + zb
    resid = float(np.max(np.abs(r), initial=0.0))
    slack = np.sum(np.abs(y[~eq])) + np.sum(np.abs(zb))      # the slacks' multipliers
    m_ineq = int(np.count_nonzero(~eq))
    s_d = max(S_MAX, (np.sum(np.abs(y)) + slack) / max(1, nlp.m + m_ineq + nlp.n)) / S_MAX
    s_c = max(S_MAX, slack / max(1, m_ineq + nlp.n)) / S_MAX
    sign_c, comp_c = _sides(y, c, nlp.cl, nlp.cu, eq, s_d, s_c)
    sign_w, comp_w = _sides(zb, w, nlp.lb, nlp.ub, fixed, s_d, s_c)
    stat = max(resid / s_d, sign_c, sign_w) / scale
    comp = max(comp_c, comp_w) / scale
    return KKT(stationarity=stat, complementarity=comp, violation=viol,
               ok=bool(stat <= tol and comp <= tol and viol <= constraint_tol),
               scale_d=float(s_d), scale_c=float(s_c), residual=r)


def _sides(y: np.ndarray, v: np.ndarray, lo: np.ndarray, hi: np.ndarray, eq: np.ndarray,
           s_d: float, s_c: float) -> tuple[float, float]:
    """``(sign error / s_d, complementarity)`` of the multipliers ``y`` of ``lo <= v <= hi``
    (equalities ``eq`` excluded), each inequality written ``v - s = 0``, ``lo <= s <=
    hi``, with the slack's own multiplier ``mu >= 0`` on the limit that ``y`` pushes on.

    The positive part of ``y`` pushes on ``hi``, the negative part on ``lo``. A part
    whose limit is infinite must be carried by the slack's stationarity row, ``|y - mu|``
    with ``mu = 0``: a sign error. Otherwise the part ``a`` is shared between that row
    and the complementarity ``mu d`` (``d`` the distance to the limit) as evenly as the
    scales allow, ``mu = a s_c / (s_c + s_d d)``: both then read ``a d / (s_c + s_d d)``,
    ``a d / s_c`` at an active limit and ``a / s_d`` far from it."""
    up, down = np.maximum(y, 0.0), np.maximum(-y, 0.0)
    has_hi, has_lo = np.isfinite(hi) & ~eq, np.isfinite(lo) & ~eq
    sign = np.concatenate([up[~eq & ~has_hi], down[~eq & ~has_lo]]) / s_d
    part = np.concatenate([up[has_hi], down[has_lo]])
    dist = np.concatenate([np.abs(hi[has_hi] - v[has_hi]), np.abs(v[has_lo] - lo[has_lo])])
    comp = part * dist / (s_c + s_d * dist)
    return float(np.max(sign, initial=0.0)), float(np.max(comp, initial=0.0))


def _fitted(nlp: ShootingNLP, w: np.ndarray, g: np.ndarray, c: np.ndarray, Jc,
            eq: np.ndarray, fixed: np.ndarray, constraint_tol: float
            ) -> tuple[np.ndarray, np.ndarray]:
    """Multipliers ``(y, zb)`` fitted by bounded least squares to ``-grad J`` over the
    constraints and bounds within ``constraint_tol`` of their limits, with their signs."""
    y_lo = np.where(eq | np.isfinite(nlp.cl), -np.inf, 0.0)
    y_hi = np.where(eq | np.isfinite(nlp.cu), np.inf, 0.0)
    z_lo = np.where(fixed | np.isfinite(nlp.lb), -np.inf, 0.0)
    z_hi = np.where(fixed | np.isfinite(nlp.ub), np.inf, 0.0)
    c_slack = np.where(eq, 0.0, np.minimum(np.where(np.isfinite(nlp.cl), c - nlp.cl, np.inf),
                                           np.where(np.isfinite(nlp.cu), nlp.cu - c, np.inf)))
    w_slack = np.where(fixed, 0.0, np.minimum(np.where(np.isfinite(nlp.lb), w - nlp.lb, np.inf),
                                              np.where(np.isfinite(nlp.ub), nlp.ub - w, np.inf)))
    act_c = np.flatnonzero(np.abs(c_slack) <= constraint_tol)
    act_w = np.flatnonzero(np.abs(w_slack) <= constraint_tol)
    A = vstack([Jc[act_c], identity(nlp.n, format="csr")[act_w]]).tocsr()
    lo = np.concatenate([y_lo[act_c], z_lo[act_w]])
    hi = np.concatenate([y_hi[act_c], z_hi[act_w]])
    y, zb = np.zeros(nlp.m), np.zeros(nlp.n)
    if A.shape[0]:
        bounds = _sided(lo, hi, act_c, act_w, c, nlp, w)
        if A.shape[0] * A.shape[1] <= 4_000_000:     # dense: the exact active-set method
            fit = lsq_linear(A.T.toarray(), -g, bounds=bounds, method="bvls", tol=1e-14)
        else:
            fit = lsq_linear(A.T.tocsr(), -g, bounds=bounds, lsmr_tol="auto", tol=1e-14,
                             max_iter=2000)
        y[act_c], zb[act_w] = fit.x[:act_c.size], fit.x[act_c.size:]
    return y, zb


def _sided(lo: np.ndarray, hi: np.ndarray, act_c: np.ndarray, act_w: np.ndarray,
           c: np.ndarray, nlp: ShootingNLP, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sign bounds of the fitted multipliers: an inequality with both limits finite takes
    the sign of the limit it is at."""
    near_lo = np.concatenate([c[act_c] - nlp.cl[act_c] < nlp.cu[act_c] - c[act_c],
                              w[act_w] - nlp.lb[act_w] < nlp.ub[act_w] - w[act_w]])
    eq = np.concatenate([nlp.cl[act_c] == nlp.cu[act_c], nlp.lb[act_w] == nlp.ub[act_w]])
    both = np.isinf(lo) & np.isinf(hi) & ~eq
    lo = np.where(both & ~near_lo, 0.0, lo)
    hi = np.where(both & near_lo, 0.0, hi)
    return lo, hi
