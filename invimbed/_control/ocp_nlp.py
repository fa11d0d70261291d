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
        """The ensemble solve at ``w`` (cached: the last ``w`` only)."""
        w = np.asarray(w, dtype=float)
        key = w.tobytes()
        if key != self._key:
            sol = self.sh.solve(w, record=self.record)
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
            parts = [b.evaluate(w, sol) for b in self.blocks]
            self._cons = (np.concatenate([p[0] for p in parts]),
                          np.concatenate([p[1] for p in parts]))
        return self._cons

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


def kkt_check(nlp: ShootingNLP, w: np.ndarray, *, tol: float, constraint_tol: float) -> KKT:
    """First-order optimality of ``w``, judged by us.

    The active set: every equality, and every inequality or bound within ``active`` of
    its limit, ``active = max(constraint_tol, 1e-8 * scale)``. Multipliers for them are
    fitted by bounded least squares (`scipy.optimize.lsq_linear`): free for equalities,
    of the sign that pushes back into the feasible set for the others. Then

    - ``stationarity = ||grad J + A^T y||_inf / max(1, ||grad J||_inf)``,
    - ``complementarity = max |y_i| * slack_i`` over the active inequalities,

    and ``ok`` is ``stationarity <= tol``, ``complementarity <= tol`` and
    ``violation <= constraint_tol``.
    """
    w = np.asarray(w, dtype=float)
    g = nlp.gradient(w)
    c = nlp.constraints(w)
    Jc = nlp.jacobian(w)
    viol = nlp.violation(w)
    act = max(constraint_tol, 0.0)
    eq = nlp.cl == nlp.cu
    # inequalities: lower active (multiplier <= 0 in grad + A^T y = 0 convention: the
    # gradient of the Lagrangian J + y^T c vanishes with y <= 0 at an active lower bound)
    lo_act = ~eq & np.isfinite(nlp.cl) & (c - nlp.cl <= act)
    up_act = ~eq & np.isfinite(nlp.cu) & (nlp.cu - c <= act)
    blo_act = np.isfinite(nlp.lb) & (w - nlp.lb <= act)
    bup_act = np.isfinite(nlp.ub) & (nlp.ub - w <= act)
    fixed = blo_act & bup_act
    sel_c = eq | lo_act | up_act
    rows_c = np.flatnonzero(sel_c)
    A_parts = [Jc[rows_c]]
    lo_b = [np.where(eq[rows_c], -np.inf, np.where(up_act[rows_c], 0.0, -np.inf))]
    hi_b = [np.where(eq[rows_c], np.inf, np.where(lo_act[rows_c] & ~up_act[rows_c], 0.0,
                                                  np.inf))]
    idx_b = np.flatnonzero(blo_act | bup_act)
    if idx_b.size:
        A_parts.append(identity(nlp.n, format="csr")[idx_b])
        lo_b.append(np.where(fixed[idx_b], -np.inf, np.where(bup_act[idx_b], 0.0, -np.inf)))
        hi_b.append(np.where(fixed[idx_b], np.inf, np.where(blo_act[idx_b], 0.0, np.inf)))
    A = vstack(A_parts).tocsr()
    scale = max(1.0, float(np.max(np.abs(g), initial=0.0)))
    if A.shape[0]:
        lo_all, hi_all = np.concatenate(lo_b), np.concatenate(hi_b)
        fit = lsq_linear(A.T.tocsr(), -g, bounds=(lo_all, hi_all), lsmr_tol="auto",
                         tol=1e-14, max_iter=2000)
        y = fit.x
        resid = g + A.T @ y
        slack = np.concatenate([
            np.where(eq[rows_c], 0.0, np.minimum(np.abs(c[rows_c] - nlp.cl[rows_c]),
                                                 np.abs(nlp.cu[rows_c] - c[rows_c]))),
            np.where(fixed[idx_b], 0.0, np.minimum(np.abs(w[idx_b] - nlp.lb[idx_b]),
                                                   np.abs(nlp.ub[idx_b] - w[idx_b])))])
        comp = float(np.max(np.abs(y) * np.where(np.isfinite(slack), slack, 0.0), initial=0.0))
    else:
        resid, comp = g, 0.0
    stat = float(np.max(np.abs(resid), initial=0.0)) / scale
    return KKT(stationarity=stat, complementarity=comp / scale, violation=viol,
               ok=bool(stat <= tol and comp / scale <= tol and viol <= constraint_tol))

