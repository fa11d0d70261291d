"""The Hessian of the Lagrangian of multiple shooting, by colored differences of exact
gradients (``solve_ocp(..., hessian="finite-differences")``).

The Lagrangian ``sigma J + y^T c`` of the shooting NLP is a sum of terms that each
depend on one interval's ``(s_k, u_k)`` (the interval's cost and end state, the path
constraints at its node and inside it), on the last node, and on the horizon ``H``. Its
Hessian is therefore block diagonal, with a dense row and column for ``H``. The
gradient of the Lagrangian is exact (forward sensitivities), so every block is found
at once by perturbing the same entry of every block together (Curtis, Powell & Reid's
colouring): ``2 (n + m)`` more points per Hessian (``2 (2 n + m)`` when path
constraints couple the last node with the last control, ``+2`` for a free horizon),
whose intervals are the rows of ONE ensemble solve; central differences with relative step ``1e-4``: an error of order ``1e-8`` from the
step and ``rtol / 1e-4`` from the integration, enough for Newton's method.
"""

from __future__ import annotations

import numpy as np

from .constraints import Path
from .nlp import ShootingNLP

STEP = 1e-4


class ColoredHessian:
    """Lower-triangle structure and values of the Lagrangian's Hessian."""

    def __init__(self, nlp: ShootingNLP) -> None:
        self.nlp = nlp
        sh = nlp.sh
        K, n, m = sh.K, sh.n, sh.m
        end_coupled = any(isinstance(b, Path) and (K - 1, 1.0) in b.where for b in nlp.blocks)
        self.groups: list[np.ndarray] = []            # variables of each Hessian block
        for k in range(K):
            parts = ([sh.s_index(k)] if k else []) + [sh.u_index(k)]
            if end_coupled and k == K - 1:
                parts.append(sh.s_index(K))
            self.groups.append(np.concatenate(parts))
        if not end_coupled:
            self.groups.append(sh.s_index(K))
        # colours: a set of variables perturbed together, none two in one group
        colours = []
        parity = (0, 1) if end_coupled else (None,)
        for i in range(n):
            for par in parity:
                ks = [k for k in range(1, K + 1) if par is None or k % 2 == par]
                colours.append(np.array([sh.s_index(k)[i] for k in ks], dtype=int))
        for j in range(m):
            colours.append(np.array([sh.u_index(k)[j] for k in range(K)], dtype=int))
        self.colours = [c for c in colours if c.size]
        self.h_index = sh.h_index
        rows, cols = [], []
        for g in self.groups:
            a, b = np.meshgrid(g, g, indexing="ij")
            keep = a >= b
            rows.append(a[keep])
            cols.append(b[keep])
        if self.h_index is not None:
            rows.append(np.full(sh.n_vars, self.h_index))
            cols.append(np.arange(sh.n_vars))
        pairs = np.unique(np.stack([np.concatenate(rows), np.concatenate(cols)]), axis=1)
        self.rows, self.cols = pairs[0], pairs[1]
        # which group a variable belongs to (the block whose rows it reads)
        self.group_of = np.full(sh.n_vars, -1)
        for gi, g in enumerate(self.groups):
            self.group_of[g] = gi

    def structure(self) -> tuple[np.ndarray, np.ndarray]:
        return self.rows, self.cols

    def values(self, w: np.ndarray, y: np.ndarray, sigma: float) -> np.ndarray:
        """The lower triangle of ``sigma grad^2 J + sum_i y_i grad^2 c_i`` at ``w``."""
        w = np.asarray(w, dtype=float)
        n_vars = w.size
        Hd: dict[tuple[int, int], float] = {}
        steps = STEP * np.maximum(1.0, np.abs(w))
        # every perturbed point, +d and -d per colour (and the horizon): one ensemble solve
        dirs = list(self.colours)
        if self.h_index is not None:
            dirs.append(np.array([self.h_index]))
        D = np.zeros((len(dirs), n_vars))
        for i, idx in enumerate(dirs):
            D[i, idx] = steps[idx]
        grads = self.nlp.lagrangian_gradients(np.concatenate([w + D, w - D]), y, sigma)
        diffs = grads[:len(dirs)] - grads[len(dirs):]
        for colour, diff in zip(self.colours, diffs):
            for v in colour:                       # column v, read in its own group
                g = self.groups[self.group_of[v]]
                col = diff[g] / (2 * steps[v])
                for r, val in zip(g, col):
                    Hd[(int(r), int(v))] = float(val)
        if self.h_index is not None:
            hi = self.h_index
            col = diffs[-1] / (2 * steps[hi])
            for r in range(n_vars):
                Hd[(hi, r)] = float(col[r])
                Hd[(r, hi)] = float(col[r])
        out = np.empty(self.rows.size)
        for i, (r, c) in enumerate(zip(self.rows, self.cols)):
            a, b = Hd.get((int(r), int(c))), Hd.get((int(c), int(r)))
            vals = [v for v in (a, b) if v is not None]
            out[i] = sum(vals) / len(vals) if vals else 0.0
        return out
