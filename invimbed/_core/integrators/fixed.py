"""Fixed-step sweeps: explicit Runge--Kutta tableaux, and the paper's layer recursion.

Runge--Kutta methods are data (``C``, ``A``, ``B``), stepped by one function, as in
scipy's ``rk_step``. Every requested depth and every control breakpoint is a grid
node; between two nodes the step is the largest one not exceeding ``step`` that
divides the interval evenly.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from ..failures import sweep_stopped
from ..ordered import combine
from .common import CountingRHS, NonFiniteError, Outcome

TABLEAUX = {
    "euler": (np.array([0.0]), np.zeros((1, 1)), np.array([1.0])),
    "midpoint": (np.array([0.0, 0.5]), np.array([[0.0, 0.0], [0.5, 0.0]]), np.array([0.0, 1.0])),
    "rk4": (np.array([0.0, 0.5, 0.5, 1.0]),
            np.array([[0.0, 0.0, 0.0, 0.0], [0.5, 0.0, 0.0, 0.0], [0.0, 0.5, 0.0, 0.0],
                      [0.0, 0.0, 1.0, 0.0]]),
            np.array([1 / 6, 1 / 3, 1 / 3, 1 / 6])),
}
FIXED_METHODS = tuple(TABLEAUX) + ("disc",)


def rk_step(fun: Callable, p: float, y: np.ndarray, h: float, C: np.ndarray, A: np.ndarray,
            B: np.ndarray, K: np.ndarray) -> np.ndarray:
    """One explicit Runge--Kutta step; ``K`` (stages, size) is preallocated scratch."""
    for s in range(C.size):
        ys = y + h * combine(A[s, :s], K[:s]) if s else y
        K[s] = fun(p + C[s] * h, ys)
    return y + h * combine(B, K)


def _nodes(q: float, depths_desc: np.ndarray, breakpoints: np.ndarray) -> list[float]:
    p_min = float(depths_desc[-1])
    pts = {q} | {float(p) for p in depths_desc} | {float(b) for b in breakpoints if p_min < b < q}
    return sorted(pts, reverse=True)


def integrate_fixed(rhs: Callable, y0: np.ndarray, q: float, depths_desc: np.ndarray,
                    breakpoints: np.ndarray, piece_of: Callable[[float, float], Any],
                    method: str = "rk4", step: float | None = None,
                    disc_step: Callable | None = None) -> Outcome:
    """Fixed-step sweep from ``q`` to ``depths_desc[-1]`` (see the module docstring).

    ``method="disc"`` applies ``disc_step(p_i, p_{i+1}, y, piece)`` once per layer
    between consecutive requested depths (and ``q``): the paper's discrete
    architecture, eqs. (14) and (15), with layers at the given depths.
    """
    counting = CountingRHS(rhs)
    n = depths_desc.size
    ys = np.full((n, y0.size), np.nan)
    out = Outcome(ys=ys)
    index = {float(p): i for i, p in enumerate(depths_desc)}
    y = y0.copy()
    if q in index:
        ys[index[q]] = y
    if method == "disc":
        nodes = sorted({q} | set(index), reverse=True)
    else:
        nodes = _nodes(q, depths_desc, breakpoints)
        C, A, B = TABLEAUX[method]
        K = np.empty((C.size, y0.size))
    try:
        for a, b in zip(nodes[:-1], nodes[1:]):
            piece = piece_of(a, b)
            if method == "disc":
                counting.nfev += 1
                y = disc_step(b, a, y, piece)
                if not np.all(np.isfinite(y)):
                    raise NonFiniteError(b, "imbedded fields")
            else:
                n_sub = max(1, math.ceil((a - b) / step - 1e-9))
                h = (b - a) / n_sub
                fun = lambda p, yy, _piece=piece: counting(p, yy, _piece)  # noqa: E731
                for k in range(n_sub):
                    y = rk_step(fun, a + k * h, y, h, C, A, B, K)
                if not np.all(np.isfinite(y)):
                    raise NonFiniteError(b, "imbedded fields")
            if b in index:
                ys[index[b]] = y
    except NonFiniteError as exc:
        out.success = False
        out.failed_at = exc.p
        out.message = sweep_stopped(exc, fixed_step=True)
    out.nfev = counting.nfev
    return out
