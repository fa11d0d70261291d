"""The nonlinear program of multiple shooting, and our own check of its optimality.

`ShootingNLP` is what every NLP solver sees (`invimbed._control.ocp_solvers`): the
objective, its gradient, the stacked constraints ``cl <= c(w) <= cu`` with their sparse
Jacobian, and the bounds ``lb <= w <= ub``. Each distinct ``w`` costs one ensemble solve
(`invimbed._control.shooting.Shooting.solve`), shared by the objective, the gradient, the
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

from .ocp_constraints import Block
from .options import SolverFailure
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


@dataclass
class KKT:
    """Our check of a point: residuals and whether they are within the tolerances."""

    stationarity: float       # ||grad J + J_c^T y + z||_inf / max(1, ||grad J||_inf)
    complementarity: float    # max |multiplier * slack| over the active set
    violation: float          # largest constraint or bound violation
    ok: bool


def kkt_check(nlp: ShootingNLP, w: np.ndarray, *, tol: float, constraint_tol: float,
              multipliers: tuple[np.ndarray, np.ndarray] | None = None) -> KKT:
    """First-order optimality of ``w``, judged by us.

    With the Lagrangian ``J + y^T c + zb^T w`` (``y_i >= 0`` where ``c_i`` is at its
    upper limit, ``<= 0`` at its lower limit, free for equalities; the same for the bound
    multipliers ``zb``):

    - ``stationarity = ||grad J + A^T y + zb||_inf / max(1, ||grad J||_inf)``,
    - ``complementarity = max |y_i| slack_i`` (and the same for the bounds), scaled alike,

    and ``ok`` is both ``<= tol`` and ``violation <= constraint_tol``. The multipliers are
    the solver's (``multipliers = (y, zb)``, IPOPT), with any entry of the wrong sign set
    to zero, or, without them, fitted by us by bounded least squares
    (`scipy.optimize.lsq_linear`) to the constraints and bounds within ``constraint_tol``
    of their limits.
    """
    w = np.asarray(w, dtype=float)
    g = nlp.gradient(w)
    c = nlp.constraints(w)
    Jc = nlp.jacobian(w)
    viol = nlp.violation(w)
    scale = max(1.0, float(np.max(np.abs(g), initial=0.0)))
    eq = nlp.cl == nlp.cu
    fixed = nlp.lb == nlp.ub
    # the sign each multiplier may take: [lo, hi] per constraint and per bound
    y_lo = np.where(eq | np.isfinite(nlp.cl), -np.inf, 0.0)
    y_hi = np.where(eq | np.isfinite(nlp.cu), np.inf, 0.0)
    z_lo = np.where(fixed | np.isfinite(nlp.lb), -np.inf, 0.0)
    z_hi = np.where(fixed | np.isfinite(nlp.ub), np.inf, 0.0)
    c_slack = np.where(eq, 0.0, np.minimum(np.where(np.isfinite(nlp.cl), c - nlp.cl, np.inf),
                                           np.where(np.isfinite(nlp.cu), nlp.cu - c, np.inf)))
    w_slack = np.where(fixed, 0.0, np.minimum(np.where(np.isfinite(nlp.lb), w - nlp.lb, np.inf),
                                              np.where(np.isfinite(nlp.ub), nlp.ub - w, np.inf)))
    c_slack, w_slack = np.abs(c_slack), np.abs(w_slack)
    if multipliers is not None:
        y = np.clip(multipliers[0], y_lo, y_hi)
        zb = np.clip(multipliers[1], z_lo, z_hi)
        # at a lower limit only a multiplier <= 0 is right, at an upper one >= 0
        y = np.where(~eq & np.isfinite(nlp.cl) & np.isfinite(nlp.cu),
                     np.where(c - nlp.cl < nlp.cu - c, np.minimum(y, 0), np.maximum(y, 0)), y)
        zb = np.where(~fixed & np.isfinite(nlp.lb) & np.isfinite(nlp.ub),
                      np.where(w - nlp.lb < nlp.ub - w, np.minimum(zb, 0), np.maximum(zb, 0)), zb)
    else:
        act_c = np.flatnonzero(c_slack <= constraint_tol)
        act_w = np.flatnonzero(w_slack <= constraint_tol)
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
    resid = g + Jc.T @ y + zb
    stat = float(np.max(np.abs(resid), initial=0.0)) / scale
    comp = max(float(np.max(np.abs(y) * np.where(np.isfinite(c_slack), c_slack, 0.0), initial=0.0)),
               float(np.max(np.abs(zb) * np.where(np.isfinite(w_slack), w_slack, 0.0),
                            initial=0.0))) / scale
    return KKT(stationarity=stat, complementarity=comp, violation=viol,
               ok=bool(stat <= tol and comp <= tol and viol <= constraint_tol))


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
