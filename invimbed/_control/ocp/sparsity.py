"""The structural zeros of a shooting row's sensitivities, from the problem's symbolic
derivatives (docs/optimization.md, "Which Hessian"; the variational equations:
docs/theory.md, "The classical adjoint method").

A row of `invimbed._control.ocp.second_order` integrates, beside ``y = (z, c)`` (``dy/dt =
g = (f, R)``), its first and second derivatives in the row's parameters ``p = (s_k,
u_k)``:

```text
dY_p/dt  = g_w W,                      W = d(z, u)/dp = [Y_p[:n]; 0 | I]
dY_pp/dt = g_z Y_pp[:n] + W^T g_ww W
```

An entry of ``Y_p`` or ``Y_pp`` is identically zero over the whole interval when no
path of the dependency graph reaches it: where the symbolic ``g_w`` and ``g_ww`` (the
expressions of a sympy provider, `invimbed.from_sympy` or a traced problem) are the
exact zero ``0``, their products and sums with zero initial values stay zero. The
patterns below are the least fixed points of these two equations read as boolean
(``and`` for products, ``or`` for sums), started from ``Y_p(t_k) = [I | 0]`` and
``Y_pp(t_k) = 0``: a superset of the entries that can be nonzero at any time and any
point, independent of ``t`` (the closure covers every time of the interval) and of the
values. Only exact symbolic zeros count (an expression that merely evaluates to zero
somewhere is kept), so an entry outside the pattern is exactly zero.

A linear ``f`` with a running cost quadratic in ``u`` (the 2-D obstacle) has no
second-order rows of the state and four entries of the cost's: the second-order solve
carries 2 columns instead of ``(n + m)^2 = 36``.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..._core.derivatives.symbolic import SympyProvider, _exponents


@dataclass(frozen=True)
class RowPattern:
    """The structurally nonzero entries of a row's derivatives (booleans).

    ``g_w`` (n + 1, P) and ``g_ww`` (n + 1, P, P): of ``g = (f, R)`` in ``w = (z, u)``;
    ``Y_p`` (n + 1, P) and ``Y_pp`` (n + 1, P, P): of ``y = (z, c)`` in ``p = (s_k,
    u_k)`` over the whole interval (``P = n + m``)."""

    g_w: np.ndarray
    g_ww: np.ndarray
    Y_p: np.ndarray
    Y_pp: np.ndarray


def row_tensors(provider: SympyProvider, rename: dict | None = None
                ) -> tuple[np.ndarray, np.ndarray]:
    """``(g_w (n + 1, P), g_ww (n + 1, P, P))``: the sympy expressions of ``g = (f, R)``'s
    derivatives in ``w = (z, u)`` (object arrays, from `SympyProvider.expression`), their
    symbols replaced by ``rename``."""
    import sympy as sp

    n, m = provider.n_state, provider.n_theta
    P = n + m
    gw = np.empty((n + 1, P), dtype=object)
    gww = np.empty((n + 1, P, P), dtype=object)
    for which, rows, lead in (("f", slice(0, n), (n,)), ("R", slice(n, n + 1), ())):
        def get(dz, dth):     # the entries of `SympyProvider.expression` (memoised)
            shape = (n if lead else 1,) + (n,) * dz + (m,) * dth
            out = np.empty(shape, dtype=object)
            for idx in np.ndindex(shape):
                e = provider._diff(which, idx[0], _exponents(idx[1:1 + dz], n),
                                   _exponents(idx[1 + dz:], m))
                out[idx] = sp.sympify(e).xreplace(rename) if rename else sp.sympify(e)
            return out
        gw[rows, :n], gw[rows, n:] = get(1, 0), get(0, 1)
        zz, zu, uu = get(2, 0), get(1, 1), get(0, 2)
        gww[rows, :n, :n], gww[rows, :n, n:], gww[rows, n:, n:] = zz, zu, uu
        gww[rows, n:, :n] = np.swapaxes(zu, 1, 2)
    return gw, gww


def derivative_pattern(provider: Any) -> tuple[np.ndarray, np.ndarray] | None:
    """``(g_w, g_ww)`` patterns of a `SympyProvider` (`row_tensors` not the exact
    zero); None for any other provider (no symbolic zeros known: every entry counts)."""
    if not isinstance(provider, SympyProvider):
        return None
    gw, gww = row_tensors(provider)
    nonzero = np.vectorize(lambda e: e != 0, otypes=[bool])
    return nonzero(gw), nonzero(gww)


_PATTERNS: "weakref.WeakKeyDictionary[Any, RowPattern | None]" = weakref.WeakKeyDictionary()


def row_pattern(provider: Any) -> RowPattern | None:
    """The `RowPattern` of ``provider``'s shooting rows, found once per provider; None
    where `derivative_pattern` is None (every entry counts)."""
    try:
        return _PATTERNS[provider]
    except (KeyError, TypeError):
        pass
    pattern = _closure(provider)
    try:
        _PATTERNS[provider] = pattern
    except TypeError:   # not weakly referenceable: found again next time
        pass
    return pattern


def _closure(provider: Any) -> RowPattern | None:
    """`row_pattern`, found anew."""
    pat = derivative_pattern(provider)
    if pat is None:
        return None
    gw, gww = pat
    n = gw.shape[0] - 1
    P = gw.shape[1]
    Yp = np.zeros((n + 1, P), dtype=bool)
    Yp[np.arange(n), np.arange(n)] = True                   # Y_p(t_k) = [I | 0]
    while True:
        W = _W(Yp, n, P)
        grown = Yp | (gw.astype(int) @ W.astype(int) > 0)
        if np.array_equal(grown, Yp):
            break
        Yp = grown
    W = _W(Yp, n, P).astype(int)
    quad = np.einsum("ikl,kp,lq->ipq", gww.astype(int), W, W) > 0   # W^T g_ww W
    Ypp = quad.copy()
    gz = gw[:, :n].astype(int)
    while True:
        grown = Ypp | (np.einsum("ib,bpq->ipq", gz, Ypp[:n].astype(int)) > 0)
        if np.array_equal(grown, Ypp):
            return RowPattern(gw, gww, Yp, Ypp)
        Ypp = grown


def _W(Yp: np.ndarray, n: int, P: int) -> np.ndarray:
    """The pattern of ``W = [Y_p[:n]; 0 | I]``, (P, P)."""
    W = np.zeros((P, P), dtype=bool)
    W[:n] = Yp[:n]
    W[np.arange(n, P), np.arange(n, P)] = True
    return W
