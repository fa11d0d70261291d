"""The exact Hessian of the Lagrangian of multiple shooting (``solve_ocp(...,
hessian="exact")``, docs/optimization.md, "Which Hessian").

The Lagrangian ``sigma J + y^T c`` is a sum of terms of one interval's ``e_k = (s_k, u_k[,
H])``, of the last node and of the horizon:

- ``sigma C_k - y_k^T F_k`` (the interval's cost and continuity defect): the second
  derivatives of the row's end, from the second-order sensitivities of ONE ensemble
  solve (`invimbed._control.ocp.second_order`), contracted with ``(-y_k, sigma)``;
- ``sigma T(s_K)``: the provider's ``T_zz``;
- the user's terminal and path constraints ``y^T h(z(q))``, ``y^T g(t, z, u)``: their
  second derivatives in ``(t, z, u)`` by central differences of the user function (as
  their first derivatives, `invimbed._control.ocp.constraints`), chained with the
  state's first and second sensitivities where the point lies inside an interval.

The sparsity is that of `invimbed._control.ocp.hessian.ColoredHessian` (blocks per
interval, a dense row for ``H``), fixed for the whole solve.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from .constraints import _H_REL, Defects, Path, Terminal, _finite, _jacobian
from .hessian import ColoredHessian
from .nlp import ShootingNLP
from .second_order import SecondOrderRows

_H2_REL = np.finfo(float).eps ** (1.0 / 4.0)


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
        self._reads: dict[int, np.ndarray] = {}      # per path block: the (t, z, u) it reads

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
                hz = _weighted_derivatives(b.fn, [z], yb, np.ones(n, dtype=bool),
                                           gradient=False)[1]
                _finite(b.name, f"the last node (node {K}, t = q)", np.zeros(1), [hz], (z,),
                        "z")
                entries.append((sh.s_index(K), hz))
            elif isinstance(b, Path):
                entries.extend(self._path(b, w, yb, solved))
        blocks = np.einsum("ki,kixy->kxy", weights, ends.d2)
        entries.append((np.stack([self._index(k) for k in range(K)]), blocks))
        S_K = w[sh.s_index(K)][None, :]
        T_zz = sh.prov.derivative("T", sh.q, S_K, None, dz=2)[0]
        entries.append((sh.s_index(K), sigma * T_zz))
        return self._gather(entries)

    def _path(self, b: Path, w: np.ndarray, yb: np.ndarray, solved
              ) -> list[tuple[np.ndarray, np.ndarray]]:
        """The terms ``y^T g`` of a path-constraint block at its points."""
        sh = self.nlp.sh
        n, m, K = sh.n, sh.m, sh.K
        S, U, H = sh.unpack(w)
        t_nodes = sh.times(H)
        inside = None
        if b.points:
            inside = self.rows_so.inside(w, solved, b.fractions)
        out = []
        free = sh.free_horizon
        for i, (k, a) in enumerate(b.where):
            yk = yb[i * b.k:(i + 1) * b.k]
            if not np.any(yk):
                continue
            if a in (0.0, 1.0):                      # a node: (t, z, u) affine in w
                node = k + int(a == 1.0)
                t, z, u = float(t_nodes[node]), S[node], U[k]
                idx = np.concatenate([sh.s_index(node) if node else np.full(n, -1),
                                      sh.u_index(k)]
                                     + ([np.array([sh.h_index])] if free else []))
                dt = np.zeros(idx.size)
                if free:
                    dt[-1] = sh.tau[node] - 1.0
                Jz = np.eye(n, idx.size)
                d2z = None
            else:
                tt, pts = inside
                j = int(np.argmin(np.abs(b.fractions - a)))
                t, z, u = float(tt[k, j]), pts.y[k, j, :n], U[k]
                idx = self._index(k)
                dt = np.zeros(idx.size)
                if free:
                    dt[-1] = sh.tau[k] + a * (sh.tau[k + 1] - sh.tau[k]) - 1.0
                Jz, d2z = pts.d1[k, j, :n], pts.d2[k, j, :n]
            Ju = np.zeros((m, idx.size))
            Ju[:, n:n + m] = np.eye(m)
            J = np.vstack(([dt[None, :]] if free else []) + [Jz, Ju])   # d(t, z, u)/de
            if b.linear:                               # state bounds: g_vv = 0
                block = np.zeros((idx.size, idx.size))
                if d2z is not None:
                    gz = _jacobian(b.fn, [t, z, u], [1], b.k, b.name)[0]
                    block += np.einsum("i,ixy->xy", yk @ gz, d2z)
                out.append((idx, block))
                continue
            fn, args = b.fn, [t, z, u]
            if not free:                               # t fixed: (z, u) only
                fn, args = (lambda zz, uu, t=t, fn=b.fn: fn(t, zz, uu)), [z, u]
            if id(b) not in self._reads:
                self._reads[id(b)] = _reads(fn, args)
            grad, hess = _weighted_derivatives(fn, args, yk, self._reads[id(b)],
                                               gradient=d2z is not None)
            where = (f"node {k + int(a == 1.0)}" if a in (0.0, 1.0) else
                     f"a point inside interval {k}") + f", t = {t:.6g}"
            _finite(b.name, where, np.zeros(1), [grad, hess], (z, u), "z u")
            block = J.T @ hess @ J
            if d2z is not None:                        # z inside: its second derivatives
                block += np.einsum("i,ixy->xy", grad[int(free):int(free) + n], d2z)
            out.append((idx, block))
        return out

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


def _flat(args: list) -> tuple[np.ndarray, Callable]:
    """The arguments ``args`` (scalars and vectors) as one vector, and its inverse."""
    sizes = [int(np.size(a)) for a in args]
    scalar = [np.ndim(a) == 0 for a in args]
    cuts = np.cumsum([0] + sizes)
    v0 = np.concatenate([np.atleast_1d(np.asarray(a, dtype=float)) for a in args])

    def unflat(v):
        return tuple(float(v[cuts[i]]) if scalar[i] else v[cuts[i]:cuts[i + 1]]
                     for i in range(len(args)))
    return v0, unflat


def _reads(fn: Callable, args: list) -> np.ndarray:
    """Which entries of the flattened ``args`` the function reads: those whose change
    (by two random steps of relative size 1e-3 from a random point near ``args``)
    changes its value; all where a value is not finite or the function raises. (A
    wrong answer would only make the Hessian inexact: optimality is judged from the
    exact gradients.)"""
    v0, unflat = _flat(args)
    rng = np.random.default_rng(0)
    v = v0 + 1e-3 * np.maximum(1.0, np.abs(v0)) * rng.uniform(-1, 1, v0.size)
    try:
        with np.errstate(all="ignore"):
            base = np.asarray(fn(*unflat(v)), dtype=float)
            out = np.zeros(v0.size, dtype=bool)
            for i in range(v0.size):
                for step in (0.37e-2, -0.61e-2):
                    vi = v.copy()
                    vi[i] += step * max(1.0, abs(v[i]))
                    val = np.asarray(fn(*unflat(vi)), dtype=float)
                    out[i] |= bool(not (np.all(np.isfinite(val)) and np.all(np.isfinite(base)))
                                   or np.any(val != base))
    except Exception:                      # noqa: BLE001 - any failure: read everything
        return np.ones(v0.size, dtype=bool)
    return out


def _weighted_derivatives(fn: Callable, args: list, weights: np.ndarray,
                          reads: np.ndarray, gradient: bool = True
                          ) -> tuple[np.ndarray, np.ndarray]:
    """The gradient and Hessian of ``weights . fn(*args)`` in all its arguments together
    (scalars and vectors, flattened in order), by central differences in the entries
    that ``fn`` reads (zero in the others): step ``eps**(1/3) max(1, |v|)`` for the
    gradient (where ``gradient``; zero otherwise), ``eps**(1/4) max(1, |v|)`` for the Hessian (errors ``O(1e-10)`` and
    ``O(1e-8)`` relative for the smooth algebraic functions they are)."""
    v0, unflat = _flat(args)

    def phi(v):
        return float(weights @ np.asarray(fn(*unflat(v)), dtype=float).ravel())

    d = v0.size
    grad, Hm = np.zeros(d), np.zeros((d, d))
    h1 = _H_REL * np.maximum(1.0, np.abs(v0))
    h = _H2_REL * np.maximum(1.0, np.abs(v0))
    f0 = phi(v0)
    idx = np.flatnonzero(reads)
    for a, i in enumerate(idx):
        ei, gi = np.zeros(d), np.zeros(d)
        ei[i], gi[i] = h[i], h1[i]
        if gradient:
            grad[i] = (phi(v0 + gi) - phi(v0 - gi)) / (2 * h1[i])
        Hm[i, i] = (phi(v0 + 2 * ei) - 2 * f0 + phi(v0 - 2 * ei)) / (4 * h[i] ** 2)
        for j in idx[:a]:
            ej = np.zeros(d)
            ej[j] = h[j]
            Hm[i, j] = Hm[j, i] = (phi(v0 + ei + ej) - phi(v0 + ei - ej) - phi(v0 - ei + ej)
                                   + phi(v0 - ei - ej)) / (4 * h[i] * h[j])
    return grad, Hm
