"""Taylor coefficients of the univariate functions that Taylor mode composes.

`series_into` is plain array code that numba also compiles: the numpy evaluator
(`invimbed._core.derivatives.taylor_mode`) applies it to the points of a batch at once
(``c`` of shape (B,), ``g`` (J + 1, B)), the numba kernel
(`invimbed._core.derivatives._taylor_numba`) to one point (``c`` a scalar, ``g`` (J + 1,)),
without allocating, so that a numba-cuda device function can run it too. One definition.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def series(code: int, c: np.ndarray, r: float, J: int) -> np.ndarray:
    """``g_j = g^(j)(c) / j!`` for ``j = 0..J`` of the univariate function ``code`` of
    `invimbed._core.derivatives._tape.UNIVARIATE` (``r``: the exponent of ``pow``), at the
    points ``c`` (B,); shape (J + 1, B) (`series_into`)."""
    g = np.zeros((J + 1, c.shape[0]))
    series_into(code, c, r, J, g)
    return g


def series_into(code: int, c: Any, r: float, J: int, g: Any) -> None:
    """`series` into ``g[:J + 1]``: at the points ``c`` (B,) into ``g`` (J + 1, B), or at
    one point ``c`` into ``g`` (J + 1,). Unary functions by their closed forms or by the
    recurrences of their differential equations (docs/derivatives.md, "`from_sympy` in
    detail": Taylor mode)."""
    if code == 0:                                   # exp
        e = np.exp(c)
        fact = 1.0
        for j in range(J + 1):
            g[j] = e / fact
            fact *= j + 1
    elif code == 1:                                 # log: (-1)^(j+1) / (j c^j)
        g[0] = np.log(c)
        p = 1.0
        for j in range(1, J + 1):
            p = p * c
            g[j] = (-1.0) ** (j + 1) / (j * p)
    elif code == 2:                                 # c^r: binom(r, j) c^(r - j)
        g[0] = c ** r
        for j in range(1, J + 1):
            g[j] = g[j - 1] * (r - j + 1) / (j * c)
    elif code <= 6:                                 # sin, cos, sinh, cosh: cycles
        if code <= 4:
            s, co = np.sin(c), np.cos(c)
            cyc = (s, co, -s, -co) if code == 3 else (co, -s, -co, s)
            period = 4
        else:
            s, co = np.sinh(c), np.cosh(c)
            cyc = (s, co, s, co) if code == 5 else (co, s, co, s)
            period = 2
        fact = 1.0
        for j in range(J + 1):
            g[j] = cyc[j % period] / fact
            fact *= j + 1
    elif code <= 8:                                 # tan: y' = 1 + y^2; tanh: 1 - y^2
        g[0] = np.tan(c) if code == 7 else np.tanh(c)
        sgn = 1.0 if code == 7 else -1.0
        for k in range(1, J + 1):
            acc = 0.0 if k > 1 else 1.0
            for i in range(k):
                acc = acc + sgn * g[i] * g[k - 1 - i]
            g[k] = acc / k
    else:                                           # y' = sgn (a0 + a1 s + s^2 a2)^r
        if code == 9:
            g[0], a, r2, sgn = np.arctan(c), (1.0 + c * c, 2.0 * c, 1.0), -1.0, 1.0
        elif code == 10 or code == 11:
            g[0] = np.arcsin(c) if code == 10 else np.arccos(c)
            a, r2, sgn = (1.0 - c * c, -2.0 * c, -1.0), -0.5, 1.0 if code == 10 else -1.0
        elif code == 12:
            g[0], a, r2, sgn = np.arcsinh(c), (1.0 + c * c, 2.0 * c, 1.0), -0.5, 1.0
        elif code == 13:
            g[0], a, r2, sgn = np.arccosh(c), (c * c - 1.0, 2.0 * c, 1.0), -0.5, 1.0
        else:
            g[0], a, r2, sgn = np.arctanh(c), (1.0 - c * c, -2.0 * c, -1.0), -1.0, 1.0
        a0, a1, a2 = a
        # v = a^r2 by the power recurrence, v_k from v_(k-1) and v_(k-2); g_(k+1) = sgn
        # v_k / (k + 1)
        v1 = a0 ** r2                               # v_(k-1)
        v2 = v1                                     # v_(k-2) (not read at k = 1)
        if J >= 1:
            g[1] = sgn * v1 / 1
        for k in range(1, J):
            acc = (r2 + 1.0 - k) * a1 * v1
            if k >= 2:
                acc = acc + ((r2 + 1.0) * 2 - k) * a2 * v2
            v2 = v1
            v1 = acc / (k * a0)
            g[k + 1] = sgn * v1 / (k + 1)
