"""The exact Hessian of the Lagrangian of Radau collocation
(`invimbed._control.ocp.collocation`; docs/optimal-control.md, "Stiff intervals").

The Lagrangian ``sigma J + lambda^T G`` of the collocation NLP is a sum over the
collocation points ``(k, j)`` of ``h_k (sigma b_j R + lambda_kj . f)`` at ``(t_kj, X_kj,
u_k)`` (the linear part of ``G`` has no curvature), plus ``sigma T(s_K)``: its Hessian is
one ``(n + m) x (n + m)`` block per point over ``(X_kj, u_k)`` from the problem's exact
second derivatives (``f_zz``, ``f_ztheta``, ``f_thetatheta`` and the same of ``R``), and
``sigma T_zz`` over ``s_K``; the user's terminal and path constraints add ``y^T h_zz``
over ``s_K`` and ``y^T g_vv`` over each node's ``(s_k, u_k[, H])``. Blocks that meet (``u_k`` is shared by the ``d`` points of
its interval) are summed into one lower triangle, the sparsity IPOPT is given once.
"""

from __future__ import annotations

import numpy as np

from ..options import SolverFailure
from .collocation import Collocation, time_derivative
from .constraints import Path, Terminal
from .nlp import ShootingNLP


class CollocationHessian:
    """Lower-triangle structure and values of the collocation Lagrangian's Hessian.

    Parameters
    ----------
    col : Collocation
        The transcription.
    nlp : ShootingNLP
        The NLP over it: its first block is the collocation equations; the others are
        linear (``final_state``) or the user's constraint functions (``terminal_*``,
        ``path_constraints`` at the nodes), whose second derivatives come from their
        traced code (`invimbed._control.ocp.constraint_code`; central differences where
        a function does not trace).
    """

    def __init__(self, col: Collocation, nlp: ShootingNLP) -> None:
        self.col, self.nlp = col, nlp
        n, m, K, d = col.n, col.m, col.K, col.d
        u_pos = col.block * np.arange(K)[:, None] + np.arange(m)[None, :]      # (K, m)
        v = np.concatenate([col.x_index[:, 1:],
                            np.broadcast_to(u_pos[:, None, :], (K, d, m))], axis=2)
        a = np.repeat(v, n + m, axis=2).ravel()            # (K, d, (n + m)^2) row-major
        b = np.tile(v, (1, 1, n + m)).ravel()
        s_K = col.s_index(K)
        a = np.concatenate([a, np.repeat(s_K, n)])
        b = np.concatenate([b, np.tile(s_K, n)])
        if col.free_horizon:                # the row of H: every point's (X_kj, u_k), H
            a = np.concatenate([a, np.full(v.size + 1, col.h_index)])
            b = np.concatenate([b, v.ravel(), [col.h_index]])
        for pos in self._constraint_positions():    # the user's constraint functions
            E = pos.shape[1]
            a = np.concatenate([a, np.repeat(pos, E, axis=1).ravel()])
            b = np.concatenate([b, np.tile(pos, (1, E)).ravel()])
        self._lower = (a >= b) & (b >= 0)           # -1: the fixed s_0
        pairs, self._slot = np.unique(np.stack([a[self._lower], b[self._lower]]), axis=1,
                                      return_inverse=True)
        self.rows, self.cols = pairs[0], pairs[1]
        self._second = None

    def structure(self) -> tuple[np.ndarray, np.ndarray]:
        return self.rows, self.cols

    def _constraint_positions(self) -> list[np.ndarray]:
        """Per terminal or path block (in order), the positions (P, E) in ``w`` of each
        point's variables: ``s_K`` for a terminal constraint, ``(s_k, u_k[, H])`` at a
        node (`Path.positions`)."""
        out = []
        for b in self.nlp.blocks:
            if isinstance(b, Terminal):
                out.append(self.col.s_index(self.col.K)[None, :])
            elif isinstance(b, Path):
                out.append(b.positions)
        return out

    def _constraint_values(self, w: np.ndarray, y: np.ndarray) -> list[np.ndarray]:
        """The blocks ``y^T h_zz`` and ``y^T g_vv`` (chained to the node's variables) in
        the order of `_constraint_positions`, all their points (zero where ``y`` is)."""
        out = []
        offsets = np.cumsum([0] + [b.size for b in self.nlp.blocks])
        for b, o in zip(self.nlp.blocks, offsets):
            yb = y[o:o + b.size]
            if isinstance(b, Terminal):
                z = w[self.col.s_index(self.col.K)]
                hz = b.code.second(z[None, :], yb[None, :])
                b.check(np.zeros(1), [hz], z)
                out.append(hz.ravel())
            elif isinstance(b, Path):
                P, E = b.positions.shape
                full = np.zeros((P, E, E))
                for idx, blocks in b.hessian_terms(w, yb):
                    full[np.any(yb.reshape(P, -1) != 0, axis=1)] = blocks
                out.append(full.ravel())
        return out

    def _evaluators(self) -> tuple:
        if self._second is None:
            prov = self.col.prov
            self._second = tuple(prov.evaluator(which, dz, dth) for which in ("f", "R")
                                 for dz, dth in ((2, 0), (1, 1), (0, 2)))
        return self._second

    def values(self, w: np.ndarray, y: np.ndarray, sigma: float) -> np.ndarray:
        """The lower triangle of ``sigma grad^2 J + sum_i y_i grad^2 c_i`` at ``w``."""
        col = self.col
        n, m, K, d = col.n, col.m, col.K, col.d
        w = np.asarray(w, dtype=float)
        _, U, Hor = col.unpack(w)
        z = col.states(w)[:, 1:].reshape(-1, n)
        u = np.repeat(U, d, axis=0)
        t = col.point_times(Hor).ravel()
        f_zz, f_zu, f_uu, R_zz, R_zu, R_uu = (g(t, z, u) for g in self._evaluators())
        lam = np.asarray(y[:col.n_defects], dtype=float).reshape(-1, n)     # (K d, n)
        h = np.repeat(Hor * col.dtau, d)
        hb = h * np.tile(col.b, K) * sigma                                   # (K d,)
        H = np.empty((K * d, n + m, n + m))
        H[:, :n, :n] = hb[:, None, None] * R_zz + h[:, None, None] * np.einsum(
            "pi,pijk->pjk", lam, f_zz)
        H[:, :n, n:] = hb[:, None, None] * R_zu.reshape(-1, n, m) + h[:, None, None] * \
            np.einsum("pi,pijk->pjk", lam, f_zu.reshape(-1, n, n, m))
        H[:, n:, :n] = np.swapaxes(H[:, :n, n:], 1, 2)
        H[:, n:, n:] = hb[:, None, None] * R_uu.reshape(-1, m, m) + h[:, None, None] * \
            np.einsum("pi,pijk->pjk", lam, f_uu.reshape(-1, n, m, m))
        S_K = w[col.s_index(K)][None, :]
        T_zz = col.prov.derivative("T", col.q, S_K, None, dz=2)[0] * sigma
        bad = np.flatnonzero(~np.all(np.isfinite(H), axis=(1, 2)))
        if bad.size or not np.all(np.isfinite(T_zz)):
            p = int(bad[0]) if bad.size else -1
            where = (f"collocation point {p % d + 1} of interval {p // d} (t = {t[p]:.6g})"
                     if bad.size else "the last node (the terminal loss)")
            raise SolverFailure(f"a second derivative of the dynamics or the losses is not "
                                f"finite at {where}")
        parts = [H.ravel(), T_zz.ravel()]
        if col.free_horizon:
            parts += self._horizon_row(t, z, u, lam, sigma, Hor)
        parts += self._constraint_values(w, y)
        vals = np.concatenate(parts)[self._lower]
        return np.bincount(self._slot, weights=vals, minlength=self.rows.size)

    def _horizon_row(self, t, z, u, lam, sigma, Hor) -> list[np.ndarray]:
        """The row of ``H`` (the entries over every point's ``(X_kj, u_k)``, then
        ``(H, H)``): with ``h_k = H dtau_k``, ``t_kj = q - H (1 - theta_kj)`` and ``phi =
        sigma b_j R + lambda_kj . f`` at each point, ``d^2 L / dH dv = dtau_k (phi_v + H
        (theta_kj - 1) phi_tv)`` and ``d^2 L / dH^2 = sum dtau_k (theta_kj - 1) (2 phi_t +
        H (theta_kj - 1) phi_tt)``; the derivatives in ``t`` by `time_derivative`."""
        col = self.col
        n, K, d = col.n, col.K, col.d
        f, f_z, f_u, R, R_z, R_u = col._evaluators()
        sb = sigma * np.tile(col.b, K)                                       # (K d,)
        dt = np.repeat(col.dtau, d)
        tp = (col.theta - 1.0).ravel()

        def phi(ev_f, ev_R, diff=None):
            """sigma b R + lam . f (its z- or u-gradient), or their t-derivative."""
            F, Rv = ((ev_f(t, z, u), ev_R(t, z, u)) if diff is None else
                     (time_derivative(ev_f, t, z, u, second=diff == 2),
                      time_derivative(ev_R, t, z, u, second=diff == 2)))
            F = F.reshape(K * d, n, -1)
            return sb[:, None] * Rv.reshape(K * d, -1) + np.einsum("pi,pij->pj", lam, F)

        row = [dt[:, None] * (phi(g, r) + Hor * tp[:, None] * phi(g, r, 1))
               for g, r in ((f_z, R_z), (f_u, R_u))]
        HH = np.sum(dt * tp * (2.0 * phi(f, R, 1)[:, 0] + Hor * tp * phi(f, R, 2)[:, 0]))
        return [np.concatenate(row, axis=1).ravel(), np.array([HH])]
