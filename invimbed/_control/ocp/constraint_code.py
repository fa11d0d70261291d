"""Exact derivatives of the user's constraint functions of `solve_ocp`, at every point at
once (docs/optimization.md, "Path constraints").

A path constraint ``g(t, z, u)`` (a terminal constraint ``h(z)``) is a Python function of
one point. It is traced once, as the problem's own functions are
(`invimbed._core.derivatives.tracing`: called with arrays of traced scalars, ``np`` and
``math`` seen through proxies), into sympy expressions of the point's variables ``v = (t,
z, u)`` (``v = z`` for a terminal constraint). sympy differentiates them (first and
second derivatives, almost everywhere as the problem's, `diff_almost_everywhere`), and
``lambdify`` prints two numpy functions of columns ``v`` of many points: the values with
the Jacobian ``dg/dv``, and the Hessians ``d^2 g_i / dv^2``, their common subexpressions
shared. One call evaluates every node and interior point of an iterate.

Nothing is trusted unverified: the generated values are compared with the function at
random points near the first guess (`verify`, `AGREEMENT` relative); a trace that
disagrees, a function that needs a value (``if z[0] > 0``, ``float(t)``) or sympy
missing: the constraint is differentiated by central differences, as before
(`Differenced`), and the result's ``constraint_derivatives`` says so and why.
"""

from __future__ import annotations

import warnings
import weakref
from typing import Any, Callable

import numpy as np

from ..._core.inputs.validation import returned_reals
from ..._core.derivatives._sympy_input import (diff_almost_everywhere, numpy_printer,
                                               real_variables)
from ..._core.derivatives.symbolic import _lambdify_options
from ..._core.derivatives.tracing import (AGREEMENT, MAX_OPERATIONS, TraceError, _STATE,
                                          _sympy, rebind, traced_expressions, traced_vector)

#: the traced code of each constraint function, per (n, m) (`trace_constraint`)
_KEPT: "weakref.WeakKeyDictionary[Callable, dict]" = weakref.WeakKeyDictionary()
#: ``constraint_derivatives`` of a traced constraint
EXACT = "exact: traced into sympy"
#: ... and of one differenced (followed by the reason)
DIFFERENCED = "central differences"


class ConstraintCode:
    """The values, Jacobians and Hessians of traced constraint expressions at many points.

    Parameters
    ----------
    variables : list of sympy.Symbol
        The point's variables ``v`` (``t, z, u`` or ``z``), in the order of the columns.
    exprs : list of sympy.Expr
        The constraint's ``k`` outputs.
    """

    exact = True
    source = EXACT
    how = "exact"

    def __init__(self, variables: list, exprs: list) -> None:
        sp = _sympy()
        self.k, self.d = len(exprs), len(variables)
        real = real_variables(sp, variables, exprs)
        jac = [[diff_almost_everywhere(sp, e, v, real) for v in variables] for e in exprs]
        self._tri = np.tril_indices(self.d)
        hess = [diff_almost_everywhere(sp, jac[i][a], variables[b], real)
                for i in range(self.k) for a, b in zip(*self._tri)]
        flat_jac = [e for row in jac for e in row]
        self._first = _numpy_code(sp, variables, list(exprs) + flat_jac)
        self._second = _numpy_code(sp, variables, hess)
        #: which derivatives dg_i/dv_a are not identically zero (k, d)
        self.pattern = np.array([[e != 0 for e in row] for row in jac], dtype=bool)
        #: which second derivatives d^2 g_i / dv_a dv_b are not identically zero, for
        #: any output (d, d), symmetric
        low = np.array([e != 0 for e in hess], dtype=bool).reshape(self.k, -1).any(axis=0)
        self.hessian_pattern = np.zeros((self.d, self.d), dtype=bool)
        self.hessian_pattern[self._tri] = self.hessian_pattern[self._tri[::-1]] = low

    def first(self, V: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(g (P, k), dg/dv (P, k, d))`` at the points ``V`` (P, d)."""
        out = self._first(V)
        P = V.shape[0]
        return out[:, :self.k], out[:, self.k:].reshape(P, self.k, self.d)

    def second(self, V: np.ndarray, Y: np.ndarray, mask: np.ndarray | None = None
               ) -> np.ndarray:
        """``sum_i Y_i d^2 g_i / dv^2`` (P, d, d) at the points ``V`` (P, d), weights
        ``Y`` (P, k) (``mask``: for the interface of `Differenced`; all are exact)."""
        P = V.shape[0]
        tri = self._second(V).reshape(P, self.k, -1)
        low = np.einsum("pi,pij->pj", Y, tri)
        H = np.zeros((P, self.d, self.d))
        H[:, self._tri[0], self._tri[1]] = low
        H[:, self._tri[1], self._tri[0]] = low
        return H

    def verify(self, fn: Callable, split: Callable, v0: np.ndarray) -> str:
        """Compare the generated values with ``fn(*split(v))`` at ``v0`` and at random
        points around it; the reason to refuse the trace, or ``""``."""
        rng = np.random.default_rng(7)
        scale = np.maximum(1.0, np.abs(v0))
        V = np.vstack([v0, v0 + 0.3 * scale * rng.normal(size=(4, v0.size)),
                       rng.uniform(0.2, 1.3, (2, v0.size))])
        user, rows = [], []
        for i, v in enumerate(V):
            try:
                with np.errstate(all="ignore"):
                    user.append(np.atleast_1d(np.asarray(fn(*split(v)), dtype=float)))
            except Exception:                 # noqa: BLE001 - outside the function's domain
                continue
            rows.append(i)
        if not rows:
            return "no test point where the function could be evaluated"
        u = np.array(user)
        with np.errstate(all="ignore"):
            mine = self.first(V[rows])[0]
        if u.shape != mine.shape:
            return f"the trace gives {mine.shape[1]} values, the function {u.shape[1]}"
        finite = np.isfinite(u)
        if not np.any(finite):
            return "no test point where the function is finite"
        if not np.array_equal(finite, np.isfinite(mine)):
            return "the trace disagrees with the function (non-finite values)"
        err = float(np.max(np.abs(u[finite] - mine[finite])))
        scale = float(np.max(np.abs(u[finite])))
        if not err <= AGREEMENT * scale:
            return (f"the trace disagrees with the function by {err:.3g} (it depends on "
                    f"something tracing cannot see)")
        return ""


def _numpy_code(sp: Any, variables: list, exprs: list) -> Callable:
    """``code(V (P, d)) -> (P, len(exprs))``: the expressions, cse'd together, as one
    numpy function of the columns of ``V`` (entries that are zero are not printed)."""
    nonzero = [j for j, e in enumerate(exprs) if e != 0]
    fn = None
    if nonzero:
        repl, reduced = sp.cse([exprs[j] for j in nonzero], symbols=sp.numbered_symbols("_c"))
        fn = sp.lambdify(variables, list(reduced), modules="numpy",
                         cse=lambda _: (repl, reduced), printer=numpy_printer(sp),
                         **_lambdify_options(sp))

    def code(V: np.ndarray) -> np.ndarray:
        out = np.zeros((V.shape[0], len(exprs)))
        if fn is not None:           # a NaN is named by the caller (`Path.check`)
            with np.errstate(all="ignore"):
                values = fn(*np.ascontiguousarray(V.T))
            for j, value in zip(nonzero, values):
                out[:, j] = value        # broadcasts the constants lambdify returns
        return out
    return code


def trace_constraint(fn: Callable, v0: np.ndarray, n: int, m: int | None
                     ) -> tuple[ConstraintCode | None, str]:
    """Trace the constraint ``fn(t, z, u)`` (``m`` controls) or, with ``m=None``,
    ``fn(z)``, and verify the trace at ``v0`` (the first guess's point) and around it.

    Returns ``(code, "")``, or ``(None, reason)`` where tracing failed or was refused.
    The code is kept per function (while it lives) and reused by a later solver built
    with the same function, once verified again at ``v0`` and around it (a closure over
    an array changed since would be traced anew)."""
    split = splitter(n, m)
    v0 = np.asarray(v0, dtype=float)
    try:
        kept = _KEPT.get(fn, {}).get((n, m))
    except TypeError:                          # not weakly referable: not kept
        kept = None
    if kept is not None and not kept.verify(fn, split, v0):
        return kept, ""
    try:
        sp = _sympy()
    except ImportError:
        return None, "sympy is not installed"
    z = tuple(sp.Symbol(f"_z{i}", real=True) for i in range(n))
    if m is None:
        variables: list = list(z)
        args: tuple = (traced_vector(z),)
    else:
        t = sp.Symbol("_t", real=True)
        u = tuple(sp.Symbol(f"_u{j}", real=True) for j in range(m))
        variables = [t, *z, *u]
        args = (traced_vector((t,))[0], traced_vector(z), traced_vector(u))
    _STATE["left"] = MAX_OPERATIONS
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            exprs = traced_expressions(rebind(fn)(*args), None)
        if not exprs:
            return None, "it returned no values on traced arrays"
        code = ConstraintCode(variables, exprs)
    except TraceError as exc:
        return None, str(exc)
    except Exception as exc:          # noqa: BLE001 - the user's code on object arrays
        return None, f"{type(exc).__name__}: {exc}"
    reason = code.verify(fn, split, v0)
    if reason:
        return None, reason
    try:
        _KEPT.setdefault(fn, {})[(n, m)] = code
    except TypeError:
        pass
    return code, ""


def splitter(n: int, m: int | None) -> Callable:
    """``split(v) -> args``: a point's flat variables ``v`` as the constraint's
    arguments, ``(t, z, u)`` (t a float) or ``(z,)`` with ``m=None``."""
    if m is None:
        return lambda v: (np.asarray(v[:n], dtype=float),)
    return lambda v: (float(v[0]), np.asarray(v[1:1 + n], dtype=float),
                      np.asarray(v[1 + n:1 + n + m], dtype=float))


# -- the fallback: central differences of the function, point by point ----------------
_H_REL = np.finfo(float).eps ** (1.0 / 3.0)
_H2_REL = np.finfo(float).eps ** (1.0 / 4.0)


class Differenced:
    """`ConstraintCode`'s interface by central differences of the function ``fn`` at each
    point: step ``eps**(1/3) max(1, |v|)`` for the Jacobian, ``eps**(1/4) max(1, |v|)``
    for the Hessian, in the variables the function reads (`_reads`); errors ``O(1e-10)``
    and ``O(1e-8)`` relative for smooth algebraic functions."""

    exact = False
    how = DIFFERENCED

    def __init__(self, fn: Callable, n: int, m: int | None, name: str, why: str) -> None:
        self.fn, self.name = fn, name
        self.split = splitter(n, m)
        self.k: int | None = None
        self.source = f"{DIFFERENCED} (not traced: {why})"
        self._reads: np.ndarray | None = None

    def first(self, V: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        c, G = [], []
        for v in V:
            args = list(self.split(v))
            c.append(_call(self.fn, tuple(args), self.name, self.k))
            self.k = c[-1].size
            G.append(np.concatenate(_jacobian(self.fn, args, list(range(len(args))), self.k,
                                              self.name), axis=1))
        return np.array(c), np.array(G)

    def second(self, V: np.ndarray, Y: np.ndarray, mask: np.ndarray | None = None
               ) -> np.ndarray:
        """``sum_i Y_i d^2 g_i / dv^2`` (P, d, d), differenced in the variables of
        ``mask`` (default all) that the function reads."""
        if self._reads is None:
            self._reads = _reads(self.fn, list(self.split(V[0])))
        reads = self._reads if mask is None else self._reads & mask
        return np.array([_weighted_hessian(self.fn, list(self.split(v)), y, reads)
                         for v, y in zip(V, Y)])


def _call(fn: Callable, args: tuple, name: str, size: int | None) -> np.ndarray:
    out = np.atleast_1d(returned_reals(fn(*args), f"`{name}`"))
    if out.ndim != 1 or (size is not None and out.size != size):
        raise ValueError(f"`{name}` must return a 1-d array"
                         + (f" of {size} values" if size is not None else "")
                         + f", but returned shape {out.shape}")
    return out


def _jacobian(fn: Callable, args: list[np.ndarray], which: list[int], size: int,
              name: str) -> list[np.ndarray]:
    """Central-difference Jacobians of ``fn(*args)`` in the arguments ``which``."""
    out = []
    for a in which:
        v = np.atleast_1d(np.asarray(args[a], dtype=float))
        J = np.empty((size, v.size))
        for j in range(v.size):
            h = _H_REL * max(1.0, abs(v[j]))
            up, down = v.copy(), v.copy()
            up[j] += h
            down[j] -= h
            lo = list(args)
            hi = list(args)
            hi[a] = up if np.ndim(args[a]) else float(up[0])
            lo[a] = down if np.ndim(args[a]) else float(down[0])
            J[:, j] = (_call(fn, tuple(hi), name, size) - _call(fn, tuple(lo), name, size)) / (2 * h)
        out.append(J)
    return out


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


def _weighted_hessian(fn: Callable, args: list, weights: np.ndarray, reads: np.ndarray
                      ) -> np.ndarray:
    """The Hessian of ``weights . fn(*args)`` in all its arguments together (scalars and
    vectors, flattened in order), by central differences with step ``eps**(1/4) max(1,
    |v|)`` in the entries that ``fn`` reads (zero in the others)."""
    v0, unflat = _flat(args)

    def phi(v):
        return float(weights @ np.asarray(fn(*unflat(v)), dtype=float).ravel())

    d = v0.size
    Hm = np.zeros((d, d))
    h = _H2_REL * np.maximum(1.0, np.abs(v0))
    f0 = phi(v0)
    idx = np.flatnonzero(reads)
    for a, i in enumerate(idx):
        ei = np.zeros(d)
        ei[i] = h[i]
        Hm[i, i] = (phi(v0 + 2 * ei) - 2 * f0 + phi(v0 - 2 * ei)) / (4 * h[i] ** 2)
        for j in idx[:a]:
            ej = np.zeros(d)
            ej[j] = h[j]
            Hm[i, j] = Hm[j, i] = (phi(v0 + ei + ej) - phi(v0 + ei - ej) - phi(v0 - ei + ej)
                                   + phi(v0 - ei - ej)) / (4 * h[i] * h[j])
    return Hm
