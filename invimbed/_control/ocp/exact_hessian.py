"""The exact Hessian of the Lagrangian of multiple shooting (``solve_ocp(...,
hessian="exact")``, docs/optimization.md, "Which Hessian").

The Lagrangian ``sigma J + y^T c`` is a sum of terms of one interval's ``e_k = (s_k, u_k[,
H])``, of the last node and of the horizon:

- ``sigma C_k - y_k^T F_k`` (the interval's cost and continuity defect): the second
  derivatives of the row's end, from the second-order sensitivities of ONE ensemble
  solve (`invimbed._control.ocp.second_order`), contracted with ``(-y_k, sigma)``;
- ``sigma T(s_K)``: the provider's ``T_zz``;
- the user's terminal and path constraints ``y^T h(z(q))``, ``y^T g(t, z, u)``: their
  second derivatives in ``(t, z, u)`` from their traced code at every point at once
  (central differences of the user function where it does not trace; as their first
  derivatives, `invimbed._control.ocp.constraint_code`), chained with the state's first
  and second sensitivities where the point lies inside an interval.

The sparsity is that of `invimbed._control.ocp.hessian.ColoredHessian` (blocks per
interval, a dense row for ``H``), fixed for the whole solve.
"""

from __future__ import annotations

import numpy as np

from .constraints import Defects, Path, Terminal
from .hessian import ColoredHessian
from .nlp import ShootingNLP
from .second_order import SecondOrderRows

class LagrangianHessian:
    """``sigma grad^2 J + sum_i y_i grad^2 c_i`` of a `ShootingNLP`, exactly.

    Parameters
    ----------
    nlp : ShootingNLP
        The shooting NLP; its provider must give second derivatives (exact ones for an
        exact Hessian: `invimbed._control.ocp.second_order.has_exact_second_derivatives`).
    """

    def __init__(self, nlp: ShootingNLP) -> None:
        self.nlp = nlp
        self.rows_so = SecondOrderRows(nlp.sh)
        self.rows, self.cols = ColoredHessian(nlp).structure()
        keys = self.rows * nlp.n + self.cols                 # (row, col) -> its position
        self._order = np.argsort(keys)
        self._keys = keys[self._order]
        self.n_solves = 0
        self._e = np.stack([self._index(k) for k in range(nlp.sh.K)])   # (K, E)

    def structure(self) -> tuple[np.ndarray, np.ndarray]:
        """The lower triangle's positions ``(rows, cols)`` (fixed)."""
        return self.rows, self.cols

    def _index(self, k: int) -> np.ndarray:
        """The positions in ``w`` of interval ``k``'s ``e = (s_k, u_k[, H])`` (-1: ``s_0``,
        not a variable)."""
        sh = self.nlp.sh
        parts = [sh.s_index(k) if k else np.full(sh.n, -1), sh.u_index(k)]
        if sh.free_horizon:
            parts.append(np.array([sh.h_index]))
        return np.concatenate(parts)

    def values(self, w: np.ndarray, y: np.ndarray, sigma: float) -> np.ndarray:
        """The lower triangle of the Hessian of the Lagrangian, in the order of
        `structure` (IPOPT's ``hessian`` callback; docs/optimization.md, "Which Hessian").

        Parameters
        ----------
        w : ndarray, shape (n_vars,)
            The decision vector.
        y : ndarray, shape (m,)
            The constraints' multipliers, in the order of the NLP's blocks.
        sigma : float
            The objective's factor.

        Returns
        -------
        ndarray, shape (len(rows),)
            ``sigma grad^2 J + sum_i y_i grad^2 c_i`` at the positions of `structure`.

        Raises
        ------
        SolverFailure
            Where a row's integration fails, or a constraint's second derivatives are
            not finite (naming the function and the node).
        """
        nlp, sh = self.nlp, self.nlp.sh
        w = np.asarray(w, dtype=float)
        y = np.asarray(y, dtype=float)
        n, K = sh.n, sh.K
        solved = self.rows_so.solve(w, record=nlp.record)
        self.n_solves += 1
        nlp.n_solves += 1
        nlp.nfev += solved[0].nfev
        ends = self.rows_so.ends(w, solved)
        entries: list[tuple[np.ndarray, np.ndarray]] = []
        offsets = np.cumsum([0] + [b.size for b in nlp.blocks])
        weights = np.zeros((K, n + 1))
        weights[:, n] = sigma
        for b, o in zip(nlp.blocks, offsets):
            yb = y[o:o + b.size]
            if isinstance(b, Defects):
                weights[:, :n] -= yb.reshape(K, n)
            elif isinstance(b, Terminal) and np.any(yb):
                z = w[sh.s_index(K)]
                hz = b.code.second(z[None, :], yb[None, :])[0]
                b.check(np.zeros(1), [hz], z)
                entries.append((sh.s_index(K), hz))
            elif isinstance(b, Path):
                entries.extend(self._path(b, w, yb, solved))
        blocks = np.einsum("ki,kixy->kxy", weights, ends.d2)
        entries.append((self._e, blocks))
        S_K = w[sh.s_index(K)][None, :]
        T_zz = sh.prov.derivative("T", sh.q, S_K, None, dz=2)[0]
        entries.append((sh.s_index(K), sigma * T_zz))
        return self._gather(entries)

    def _path(self, b: Path, w: np.ndarray, yb: np.ndarray, solved
              ) -> list[tuple[np.ndarray, np.ndarray]]:
        """The terms ``y^T g`` of a path-constraint block (`Path.hessian_terms`), with
        the states inside the intervals and their sensitivities from the same solve."""
        n = self.nlp.sh.n

        def inside():
            tt, pts = self.rows_so.inside(w, solved, b.fractions)
            return tt, pts.y[..., :n], pts.d1[..., :n, :], pts.d2[..., :n, :, :]
        return b.hessian_terms(w, yb, inside)

    def _gather(self, entries: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
        """Sum the dense blocks ``(positions, block)`` (or stacks of them, positions
        (B, E) and blocks (B, E, E)) into the lower triangle's values in the order of
        `structure`."""
        rr, cc, vv = [], [], []
        for idx, block in entries:
            idx = np.atleast_2d(idx)
            a = np.broadcast_to(idx[:, :, None], idx.shape + idx.shape[1:])
            b = np.swapaxes(a, 1, 2)
            keep = (a >= b) & (b >= 0)
            rr.append(a[keep])
            cc.append(b[keep])
            vv.append(np.asarray(block).reshape(a.shape)[keep])
        keys = np.concatenate(rr) * self.nlp.n + np.concatenate(cc)
        pos = self._order[np.searchsorted(self._keys, keys)]
        return np.bincount(pos, weights=np.concatenate(vv), minlength=self.rows.size)
