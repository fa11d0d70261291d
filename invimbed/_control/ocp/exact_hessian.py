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

The declared sparsity (fixed for the whole solve) is that of
`invimbed._control.ocp.hessian.ColoredHessian` (blocks per interval, a dense row for
``H``) less the entries that are structurally zero for a sympy provider
(`invimbed._control.ocp.sparsity`): in an interval's block only the pairs of ``Y_pp``'s
pattern of some row, and the path constraints' ``J^T g_vv J`` and ``(y^T g_z) . z_ee``
from their symbolic zeros (`Path.hessian_pattern`). The linear 2-D obstacle declares 20
entries per interval instead of 21, the cost's ``(a_x, a_x)``, ``(a_y, a_y)`` and the disc's
position blocks of x and y, not their products.
"""

from __future__ import annotations

import numpy as np

from .constraints import Defects, Path, Terminal
from .hessian import ColoredHessian
from .nlp import ShootingNLP
from .second_order import SecondOrderRows
from .sparsity import row_pattern

class LagrangianHessian:
    """``sigma grad^2 J + sum_i y_i grad^2 c_i`` of a `ShootingNLP`, exactly.

    Parameters
    ----------
    nlp : ShootingNLP
        The shooting NLP; its provider must give second derivatives (exact ones for an
        exact Hessian: `invimbed._control.ocp.second_order.has_exact_second_derivatives`).
    structural_zeros : bool, optional
        Leave the structurally zero entries out of the second-order solve and of the
        declared structure (default; `invimbed._control.ocp.sparsity`). False: every
        entry of `ColoredHessian`'s blocks (the values are the same).
    """

    def __init__(self, nlp: ShootingNLP, *, structural_zeros: bool = True) -> None:
        self.nlp = nlp
        self.rows_so = SecondOrderRows(nlp.sh, structural_zeros=structural_zeros)
        self.n_solves = 0
        self._e = np.stack([self._index(k) for k in range(nlp.sh.K)])   # (K, E)
        pattern = row_pattern(nlp.sh.prov) if structural_zeros else None
        if pattern is None:
            self.rows, self.cols = ColoredHessian(nlp).structure()
        else:
            self.rows, self.cols = self._structure(pattern)
        keys = self.rows * nlp.n + self.cols                 # (row, col) -> its position
        self._order = np.argsort(keys)
        self._keys = keys[self._order]

    def _structure(self, pattern) -> tuple[np.ndarray, np.ndarray]:
        """The lower triangle's positions that can be nonzero, from the rows'
        `invimbed._control.ocp.sparsity.RowPattern`: each interval's ``Y_pp`` pairs (any
        row: the defects' multipliers weigh them all), the path constraints'
        `Path.hessian_pattern`, the last node's block (``T_zz``, terminal constraints)
        and, for a free horizon, its whole row."""
        sh = self.nlp.sh
        n, K, P, E = sh.n, sh.K, self.rows_so.P, self.rows_so.E
        block = np.zeros((E, E), dtype=bool)
        block[:P, :P] = pattern.Y_pp.any(axis=0)
        block[P:, :] = block[:, P:] = True                    # the horizon (free)
        masks = [(self._e, np.broadcast_to(block, (K, E, E))),
                 (sh.s_index(K), np.ones((n, n), dtype=bool))]
        masks += [(b.positions, b.hessian_pattern(pattern.Y_p, pattern.Y_pp))
                  for b in self.nlp.blocks if isinstance(b, Path)]
        rows, cols = [], []
        for idx, mask in masks:
            a, b, keep = _pairs(idx)
            keep &= np.asarray(mask).reshape(a.shape)
            rows.append(a[keep])
            cols.append(b[keep])
        if sh.free_horizon:
            rows.append(np.full(sh.n_vars, sh.h_index))
            cols.append(np.arange(sh.n_vars))
        pairs = np.unique(np.stack([np.concatenate(rows), np.concatenate(cols)]), axis=1)
        return pairs[0], pairs[1]

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
        solved = self.rows_so.solve(w, record=nlp.record, first_order=(
            nlp.solution if self.rows_so.structural_zeros else None))
        if solved[0].nfev:                  # 0: the NLP's first-order solve served
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
            a, b, keep = _pairs(idx)
            rr.append(a[keep])
            cc.append(b[keep])
            vv.append(np.asarray(block).reshape(a.shape)[keep])
        keys = np.concatenate(rr) * self.nlp.n + np.concatenate(cc)
        at = np.minimum(np.searchsorted(self._keys, keys), self._keys.size - 1)
        declared = self._keys[at] == keys        # the others are structural zeros
        return np.bincount(self._order[at[declared]], weights=np.concatenate(vv)[declared],
                           minlength=self.rows.size)


def _pairs(idx: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(a, b, keep)`` of the positions ``idx`` (E,) or (B, E) of dense blocks: the
    row and column of every entry (B, E, E) and which lie in the lower triangle of
    the NLP's variables (``s_0``, at -1, left out)."""
    idx = np.atleast_2d(idx)
    a = np.broadcast_to(idx[:, :, None], idx.shape + idx.shape[1:])
    b = np.swapaxes(a, 1, 2)
    return a, b, (a >= b) & (b >= 0)
