"""The constraints of `solve_ocp` beyond the continuity defects (docs/optimization.md).

Every constraint is a `Block`: values ``c(w)`` with bounds ``lower <= c <= upper``
(equal bounds: an equality), and a sparse Jacobian given as fixed COO positions and
values. Bounds on controls, on the node states and on the horizon are bounds on the
decision variables, not blocks (the NLP solvers keep them exactly).

User functions (terminal and path constraints) are traced into sympy and differentiated
exactly, at every point of an iterate in one call (`invimbed._control.ocp.constraint_code`);
where a function does not trace they are differentiated by central differences with the
step ``eps**(1/3) max(1, |v|)``: for the smooth algebraic functions they are, the error
is ``O(1e-10)`` relative, far below the tolerances of the optimality check. Everything
from the dynamics is exact (`invimbed._control.ocp.shooting`).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..._core.inputs.validation import describe
from ..options import SolverFailure
from .constraint_code import (DIFFERENCED, ConstraintCode, Differenced, _call,
                              trace_constraint)
from .shooting import IntervalSolve, Shooting

class Block:
    """A block of constraints ``lower <= c(w) <= upper`` with a sparse Jacobian."""

    name: str
    lower: np.ndarray
    upper: np.ndarray
    rows: np.ndarray
    cols: np.ndarray
    needs_dense: bool = False

    def evaluate(self, w: np.ndarray, sol: IntervalSolve) -> tuple[np.ndarray, np.ndarray]:
        """``(c(w), Jacobian values in the order of rows, cols)``."""
        raise NotImplementedError  # pragma: no cover - abstract

    @property
    def size(self) -> int:
        return int(self.lower.size)

    def shifted_rows(self, shift: int) -> np.ndarray:
        """For each row, the row whose multiplier it takes when the solution moves
        ``shift`` intervals on (`invimbed.OCPSolver`): itself, unless the block is per
        interval."""
        return np.arange(self.size)


class Defects(Block):
    """The continuity defects ``s_(k+1) - F_k = 0`` (the equations of the transcription:
    `invimbed._control.ocp.collocation` gives its collocation equations)."""

    name = "continuity defects"

    def __init__(self, sh: Shooting) -> None:
        self.sh = sh
        self.name = sh.defect_name            # collocation: its collocation equations
        self.lower = self.upper = np.zeros(sh.n_defects)
        self.rows, self.cols = sh.defect_structure()

    def evaluate(self, w, sol):
        return self.sh.defects(w, sol), self.sh.defect_jacobian(sol)

    def shifted_rows(self, shift: int) -> np.ndarray:
        return shift_index(self.sh.K, self.sh.n_defects // self.sh.K, shift)   # per interval


class FinalState(Block):
    """``s_K[i] = target[i]`` for the entries of ``target`` that are not NaN."""

    name = "final_state"

    def __init__(self, sh: Shooting, target: np.ndarray) -> None:
        self.idx = np.flatnonzero(~np.isnan(target))
        self.lower = self.upper = target[self.idx]
        self.rows = np.arange(self.idx.size)
        self.cols = sh.s_index(sh.K)[self.idx]
        self.sh = sh

    def evaluate(self, w, sol):
        return np.asarray(w)[self.cols], np.ones(self.idx.size)


def _finite(name: str, where: str, c: np.ndarray, jac: list[np.ndarray], args: tuple,
            labels: str, how: str = DIFFERENCED) -> None:
    """A `SolverFailure` naming the constraint function and the point where it (or its
    derivative, ``how`` it was computed) is not finite."""
    if np.all(np.isfinite(c)) and all(np.all(np.isfinite(J)) for J in jac):
        return
    what = (f"returned {np.array2string(c, precision=6)}" if not np.all(np.isfinite(c))
            else f"has a derivative ({how}) that is not finite")
    point = ", ".join(f"{lab} = {np.array2string(np.asarray(a, dtype=float), precision=6)}"
                      for lab, a in zip(labels.split(), args))
    raise SolverFailure(f"`{name}` {what} at {where} ({point}); it must be finite wherever "
                        f"the solver may look (near the iterates)")


def constraint_code(fn: Callable, v0: np.ndarray, n: int, m: int | None, name: str
                    ) -> ConstraintCode | Differenced:
    """The derivatives of the constraint ``fn``: traced (`trace_constraint`), else
    central differences saying why."""
    code, why = trace_constraint(fn, v0, n, m)
    return code if code is not None else Differenced(fn, n, m, name, why)


class Terminal(Block):
    """``h(z(q)) = 0`` (equality) or ``h(z(q)) <= 0`` (inequality) on the last node."""

    def __init__(self, sh: Shooting, fn: Callable, equality: bool, name: str,
                 z_guess: np.ndarray) -> None:
        self.sh, self.fn, self.name = sh, fn, name
        z_guess = np.asarray(z_guess, dtype=float)
        k = _call(fn, (z_guess,), name, None).size
        if k == 0:
            raise ValueError(f"`{name}` returned no values")
        self.k = k
        self.code = constraint_code(fn, z_guess, sh.n, None, name)
        self.code.k = k
        self.lower = np.zeros(k) if equality else np.full(k, -np.inf)
        self.upper = np.zeros(k)
        self.rows = np.repeat(np.arange(k), sh.n)
        self.cols = np.tile(sh.s_index(sh.K), k)

    def evaluate(self, w, sol):
        z = np.asarray(w)[self.sh.s_index(self.sh.K)]
        c, J = self.code.first(z[None, :])
        self.check(c[0], [J[0]], z)
        return c[0], J[0].ravel()

    def check(self, c: np.ndarray, jac: list[np.ndarray], z: np.ndarray) -> None:
        """`_finite` at the last node."""
        _finite(self.name, f"the last node (node {self.sh.K}, t = q)", c, jac, (z,), "z",
                how=self.code.how)


class Path(Block):
    """``g(t, z, u) <= 0`` at the nodes ``t_0..t_K`` and, with ``points > 0``, at
    ``points`` equally spaced times inside every interval (from the dense output).

    ``g`` may also be given as state bounds (``fn=None``, ``lo``/``hi``): then
    ``g = (lo - z, z - hi)`` for the finite entries, inside the intervals only (at the
    nodes they are variable bounds).

    ``g`` is evaluated and differentiated at every point at once by its traced code
    (`invimbed._control.ocp.constraint_code`), or point by point by central differences
    where it does not trace (``code.source`` says which).
    """

    needs_dense = True

    def __init__(self, sh: Shooting, fn: Callable | None, points: int, name: str, *,
                 nodes: bool = True, lo: np.ndarray | None = None,
                 hi: np.ndarray | None = None, u_guess: np.ndarray | None = None) -> None:
        self.sh, self.name, self.points = sh, name, points
        n, m, K = sh.n, sh.m, sh.K
        if fn is None:
            lo_i, hi_i = np.flatnonzero(np.isfinite(lo)), np.flatnonzero(np.isfinite(hi))

            def fn(t, z, u, lo=lo, hi=hi, lo_i=lo_i, hi_i=hi_i):
                return np.concatenate([lo[lo_i] - z[lo_i], z[hi_i] - hi[hi_i]])
            self.linear = True
        else:
            self.linear = False
        self.fn = fn
        u0 = np.zeros(m) if u_guess is None else np.asarray(u_guess, dtype=float)
        t0 = float(sh.times(sh.horizon)[0])
        self.k = _call(fn, (t0, sh.x, u0), name, None).size
        self.code = constraint_code(fn, np.concatenate([[t0], sh.x, u0]), n, m, name)
        self.code.k = self.k
        self.needs_dense = points > 0
        self.fractions = np.arange(1, points + 1) / (points + 1.0)
        # the points: (interval k, fraction); nodes first (k, 0) and the end (K-1, 1)
        where = []
        if nodes:
            where += [(k, 0.0) for k in range(K)] + [(K - 1, 1.0)]
        where += [(k, a) for k in range(K) for a in self.fractions]
        self.where = where
        n_pts = len(where)
        self.lower = np.full(n_pts * self.k, -np.inf)
        self.upper = np.zeros(n_pts * self.k)
        # per point: its interval, node (-1 inside), place inside, dt/dH = tau - 1
        self.interval = np.array([k for k, _ in where], dtype=int)
        self.node = np.array([k + int(a == 1.0) if a in (0.0, 1.0) else -1
                              for k, a in where], dtype=int)
        self.inner = np.array([0 if a in (0.0, 1.0) else
                               int(np.argmin(np.abs(self.fractions - a))) for k, a in where])
        self.dt = np.array([sh.tau[k] + a * (sh.tau[k + 1] - sh.tau[k]) - 1.0
                            for k, a in where])
        # per point: the positions in w of its e = (s, u_k[, H]) (-1: s_0, fixed)
        s_of = [sh.s_index(int(node)) if node > 0 else sh.s_index(k) if node < 0 < k
                else np.full(n, -1) for node, k in zip(self.node, self.interval)]
        self.positions = np.array(
            [np.concatenate([s, sh.u_index(k)] + ([[sh.h_index]] if sh.free_horizon else []))
             for s, k in zip(s_of, self.interval)], dtype=int).reshape(n_pts, -1)
        # the Jacobian's columns per point: (u_k, s, H), s_0 (fixed) left out; at a node
        # only those the traced function reads (inside, z depends on all of them)
        free = int(sh.free_horizon)
        columns = np.concatenate([self.positions[:, n:n + m], self.positions[:, :n],
                                  self.positions[:, n + m:]], axis=1)
        keep = np.broadcast_to((columns >= 0)[:, None, :], (n_pts, self.k, columns.shape[1]))
        pattern = getattr(self.code, "pattern", None)         # (k, 1 + n + m): t, z, u
        if pattern is not None:
            read = np.concatenate([pattern[:, 1 + n:], pattern[:, 1:1 + n],
                                   pattern[:, :free]], axis=1)
            keep = keep & np.where((self.node >= 0)[:, None, None], read[None], True)
        self._keep = np.ascontiguousarray(keep)
        self.rows = np.broadcast_to(np.arange(n_pts * self.k).reshape(n_pts, self.k, 1),
                                    keep.shape)[self._keep]
        self.cols = np.broadcast_to(columns[:, None, :], keep.shape)[self._keep]

    def shifted_rows(self, shift: int) -> np.ndarray:
        K = self.sh.K
        at = {where: i for i, where in enumerate(self.where)}
        src = np.array([at[(min(k + shift, K - 1), a)] for k, a in self.where], dtype=int)
        return (src[:, None] * self.k + np.arange(self.k)[None, :]).ravel()

    def label(self, i: int, t: float) -> str:
        """Where point ``i`` is, for messages."""
        node = int(self.node[i])
        return (f"node {node}" if node >= 0 else
                f"a point inside interval {self.interval[i]}") + f", t = {t:.6g}"

    def check(self, c: np.ndarray, jac: list[np.ndarray], V: np.ndarray,
              which: np.ndarray | None = None) -> None:
        """`_finite` at the first point (rows of ``V``, ``c`` and the arrays ``jac``: the
        points ``which``, default all) where a value or derivative is not finite."""
        bad = ~np.all(np.isfinite(c.reshape(len(V), -1)), axis=1)
        for J in jac:
            bad |= ~np.all(np.isfinite(J.reshape(len(V), -1)), axis=1)
        if np.any(bad):
            i = int(np.flatnonzero(bad)[0])
            n = self.sh.n
            at = i if which is None else int(which[i])
            _finite(self.name, self.label(at, float(V[i, 0])), c[i], [J[i] for J in jac],
                    (V[i, 1:1 + n], V[i, 1 + n:]), "z u",
                    how=self.code.how)

    def variables(self, w: np.ndarray, sol) -> tuple[np.ndarray, ...]:
        """The points' variables ``V = (t, z, u)`` (P, 1 + n + m) and the sensitivities
        of ``z`` in ``(s_k, u_k, H)``: (P, n, n), (P, n, m), (P, n)."""
        sh = self.sh
        n, m = sh.n, sh.m
        S, U, H = sh.unpack(w)
        P = len(self.where)
        V = np.empty((P, 1 + n + m))
        zs, zu, zH = np.zeros((P, n, n)), np.zeros((P, n, m)), np.zeros((P, n))
        at = self.node >= 0
        V[at, 0] = sh.times(H)[self.node[at]]
        V[at, 1:1 + n] = S[self.node[at]]
        zs[at] = np.eye(n)
        if self.points:
            tt, zz, zzs, zzu, zzH = sh.interior(w, sol, self.fractions)
            k, j = self.interval[~at], self.inner[~at]
            V[~at, 0], V[~at, 1:1 + n] = tt[k, j], zz[k, j]
            zs[~at], zu[~at], zH[~at] = zzs[k, j], zzu[k, j], zzH[k, j]
        V[:, 1 + n:] = U[self.interval]
        return V, zs, zu, zH

    def hessian_pattern(self, Y_p: np.ndarray | None, Y_pp: np.ndarray | None
                        ) -> np.ndarray:
        """Which entries of each point's `hessian_terms` block can be nonzero, (P', E,
        E): ``J^T g_vv J`` from the traced ``g_vv``'s symbolic zeros (every entry of a
        differenced function's variables) and ``J``'s (at a node ``z`` is the node's
        ``s``; inside, ``Y_p``'s pattern of the state, `invimbed._control.ocp.sparsity`),
        plus ``(y^T g_z) . z_ee``: ``Y_pp``'s pattern of the states ``g`` reads. ``Y_p``
        (n + 1, n + m) and ``Y_pp`` (n + 1, n + m, n + m) None: every entry inside."""
        sh = self.sh
        n, m, free = sh.n, sh.m, sh.free_horizon
        E, d = self.positions.shape[1], 1 + n + m
        full = np.ones((d, d), dtype=bool)
        g_vv = (np.zeros((d, d), dtype=bool) if self.linear
                else getattr(self.code, "hessian_pattern", full))
        g_z = getattr(self.code, "pattern", np.ones((1, d), dtype=bool)).any(axis=0)[1:1 + n]
        out = np.zeros((len(self.where), E, E), dtype=bool)
        for i, node in enumerate(self.node):
            J = np.zeros((d, E), dtype=bool)
            if free:
                J[0, E - 1] = True
            J[1 + n:, n:n + m] = np.eye(m, dtype=bool)
            if node >= 0:
                J[1:1 + n, :n] = np.eye(n, dtype=bool)
            else:
                J[1:1 + n, :n + m] = True if Y_p is None else Y_p[:n]
                J[1:1 + n, E - 1] |= free
            block = (J.T.astype(int) @ g_vv.astype(int) @ J.astype(int)) > 0
            if node < 0:
                inner = np.ones((n + m, n + m), dtype=bool) if Y_pp is None \
                    else Y_pp[:n][g_z].any(axis=0)
                block[:n + m, :n + m] |= inner
                if free:
                    block[E - 1] = block[:, E - 1] = True
            out[i] = block
        return out

    def hessian_terms(self, w: np.ndarray, yb: np.ndarray, inside: Callable | None = None
                      ) -> list[tuple[np.ndarray, np.ndarray]]:
        """The terms ``y^T g`` of the Hessian of the Lagrangian at the points whose
        multipliers ``yb`` are not all zero, at once: ``J^T (y^T g_vv) J`` with ``J =
        dv/de`` of each point's ``v = (t, z, u)`` in its ``e = (s, u_k[, H])``, plus
        ``(y^T g_z) . z_ee`` inside the intervals.

        ``inside()`` gives, for points inside the intervals, ``(t (K, Q), z (K, Q, n),
        dz/de (K, Q, n, E), d^2 z/de^2 (K, Q, n, E, E))`` (from the second-order
        sensitivities, `invimbed._control.ocp.exact_hessian`); at the nodes ``z`` is a
        variable. Returns ``[(positions (P', E), blocks (P', E, E))]`` (`positions`)."""
        sh = self.sh
        n, m, free = sh.n, sh.m, sh.free_horizon
        Y = yb.reshape(-1, self.k)
        on = np.flatnonzero(np.any(Y != 0, axis=1))
        if on.size == 0:
            return []
        S, U, H = sh.unpack(w)
        P, E, d = len(self.where), self.positions.shape[1], 1 + n + m
        V = np.empty((P, d))
        J = np.zeros((P, d, E))                           # d(t, z, u)/de
        d2z = np.zeros((P, n, E, E))
        at = self.node >= 0
        V[at, 0] = sh.times(H)[self.node[at]]
        V[at, 1:1 + n] = S[self.node[at]]
        J[at, 1:1 + n, :n] = np.eye(n)
        within = self.points and not np.all(at)
        if within:
            tt, z, dz, d2 = inside()
            k, j = self.interval[~at], self.inner[~at]
            V[~at, 0], V[~at, 1:1 + n] = tt[k, j], z[k, j]
            J[~at, 1:1 + n], d2z[~at] = dz[k, j], d2[k, j]
        V[:, 1 + n:] = U[self.interval]
        J[:, 1 + n:, n:n + m] = np.eye(m)
        if free:
            J[:, 0, -1] = self.dt
        V, J, d2z, Y = V[on], J[on], d2z[on], Y[on]
        if self.linear:                                   # state bounds: g_vv = 0
            Hv = np.zeros((on.size, d, d))
        else:
            mask = None if free else np.arange(d) > 0     # t fixed: no differences in t
            Hv = self.code.second(V, Y, mask)
        grad = np.zeros((on.size, d))
        if within:
            grad = np.einsum("pk,pkd->pd", Y, self.code.first(V)[1])
        self.check(np.zeros(on.size), [Hv, grad], V, on)
        block = np.einsum("pax,pab,pby->pxy", J, Hv, J)
        block += np.einsum("pi,pixy->pxy", grad[:, 1:1 + n], d2z)
        return [(self.positions[on], block)]

    def evaluate(self, w, sol):
        sh = self.sh
        n = sh.n
        V, zs, zu, zH = self.variables(w, sol)
        c, G = self.code.first(V)
        self.check(c, [G], V)
        gt, gz, gu = G[:, :, 0], G[:, :, 1:1 + n], G[:, :, 1 + n:]
        parts = [gu + gz @ zu, gz @ zs]
        if sh.free_horizon:
            parts.append((np.einsum("pki,pi->pk", gz, zH) + gt * self.dt[:, None])[..., None])
        return c.ravel(), np.concatenate(parts, axis=2)[self._keep]


def shift_index(K: int, block: int, shift: int, tail: int = 0) -> np.ndarray:
    """For each entry of ``K`` blocks of ``block`` entries (and ``tail`` entries after
    them), the entry it takes when moved ``shift`` blocks on: block ``k`` takes block
    ``min(k + shift, K - 1)`` (the last one repeated), the tail stays."""
    src = np.minimum(np.arange(K) + shift, K - 1)
    idx = (src[:, None] * block + np.arange(block)[None, :]).ravel()
    return np.concatenate([idx, K * block + np.arange(tail)])


def as_pair(value: Any, size: int, name: str) -> tuple[np.ndarray, np.ndarray]:
    """``(lo, hi)`` arrays of ``size`` from the bounds ``value`` (``None`` or NaN: no
    bound):

    - ``scipy.optimize.Bounds(lb, ub)``;
    - a ``(low, high)`` pair of scalars or arrays of length ``size``;
    - one ``(low, high)`` pair per variable, shape ``(size, 2)`` (scipy's
      ``minimize(bounds=...)`` style), for ``size != 2``.

    For ``size == 2`` a 2 x 2 array of numbers reads both ways (``[(-2, 2), (-2, 2)]``:
    ``low = (-2, 2), high = (-2, 2)``, or ``-2 <= v_i <= 2`` for each variable): where
    the two readings differ and both are feasible (``low <= high``) it is refused, with
    both readings and the way to say which (``Bounds``); where only one is feasible, that
    one is taken.
    """
    from scipy.optimize import Bounds

    if isinstance(value, Bounds):              # scalars as scipy stores them: shape (1,)
        value = tuple(b.item() if np.size(b) == 1 else b for b in (value.lb, value.ub))
    else:
        value = _per_variable(value, size, name)
    try:
        lo, hi = value
    except (TypeError, ValueError) as exc:
        raise ValueError(f"`{name}` must be a (low, high) pair of scalars or arrays of "
                         f"length {size} (None for no bound), one (low, high) pair per "
                         f"variable, or scipy.optimize.Bounds(lb, ub), but got "
                         f"{describe(value)}") from exc
    out = []
    for part, default in ((lo, -np.inf), (hi, np.inf)):
        if part is None:
            arr = np.full(size, default)
        else:
            try:
                arr = np.array(part, dtype=float)
            except (TypeError, ValueError) as exc:
                raise TypeError(f"`{name}` must hold real numbers or None, but got "
                                f"{describe(part)}") from exc
            arr = np.where(np.isnan(arr), default, arr) if arr.ndim else arr
            if arr.ndim == 0:
                arr = np.full(size, default if np.isnan(arr) else float(arr))
            if arr.shape != (size,):
                raise ValueError(f"`{name}`: each bound must be a scalar or have length "
                                 f"{size}, but got shape {arr.shape}")
        out.append(arr)
    lo, hi = out
    bad = np.flatnonzero(lo > hi)
    if bad.size:
        i = int(bad[0])
        raise ValueError(f"`{name}` is infeasible: low > high for entry {i} ({lo[i]} > {hi[i]})")
    return lo, hi


def _per_variable(value: Any, size: int, name: str) -> Any:
    """``value`` as a ``(low, high)`` pair: one pair per variable (shape ``(size, 2)``,
    ``size != 2``) transposed; a 2 x 2 whose two readings differ refused."""
    try:
        arr = np.array(value, dtype=float)
    except (TypeError, ValueError):
        return value                       # None entries or ragged: a (low, high) pair
    if arr.shape != (size, 2):
        return value
    if size != 2:
        return arr[:, 0], arr[:, 1]
    if np.array_equal(arr, arr.T, equal_nan=True):
        return value                       # both readings agree
    feasible = [not np.any(a[0] > a[1]) for a in (arr, arr.T)]
    if feasible == [True, False]:
        return value                       # low > high read per variable: (low, high)
    if feasible == [False, True]:
        return arr[:, 0], arr[:, 1]
    fmt = lambda a: str(a.tolist())  # noqa: E731
    raise ValueError(
        f"`{name}` = {fmt(arr)} is ambiguous for 2 variables: as a (low, high) pair it "
        f"means low = {fmt(arr[0])}, high = {fmt(arr[1])}; as one (low, high) pair per "
        f"variable it means low = {fmt(arr[:, 0])}, high = {fmt(arr[:, 1])}. Say which "
        f"with scipy.optimize.Bounds(lb, ub): Bounds({fmt(arr[0])}, {fmt(arr[1])}) or "
        f"Bounds({fmt(arr[:, 0])}, {fmt(arr[:, 1])})")


def bounds_size(value: Any) -> int | None:
    """The number of variables that the bounds ``value`` (as `as_pair` reads them) are
    for (1 for scalars), or None where their parts disagree."""
    from scipy.optimize import Bounds

    if isinstance(value, Bounds):
        sizes = {np.size(value.lb), np.size(value.ub)}
    else:
        try:
            arr = np.array(value, dtype=float)
        except (TypeError, ValueError):
            arr = None
        if arr is not None and arr.ndim == 2 and arr.shape[1] == 2 and arr.shape[0] != 2:
            return int(arr.shape[0])                 # one (low, high) pair per variable
        try:
            lo, hi = value
            sizes = {np.size(b) for b in (lo, hi) if b is not None}
        except (TypeError, ValueError):
            return None
    sizes = sizes - {1} or sizes
    return int(sizes.pop()) if len(sizes) == 1 else None
