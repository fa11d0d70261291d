"""Scalar pieces of the compiled adaptive kernels (`invimbed._backends._ensemble_kernels`,
`invimbed._backends._sweep_kernels`): numpy's pairwise summation and the RMS error norm
(so that the numpy and compiled ensembles take the same steps), finiteness, the next stop
and control piece of a row, the evaluation of a row's dense output, one explicit
Runge-Kutta step's arithmetic, and the step-size rules of
`invimbed._core.integrators.rules` (the one source the numpy ensemble applies too),
compiled. Compiled once per machine (``cache=True``).

Every function here is also a numba-cuda device function as written
(``numba.cuda.jit(device=True)(f.py_func)``): scalars and arrays passed in, nothing
allocated, no numpy function beyond ``np.minimum``/``np.maximum``, ``math`` for the rest
(tests/test_compiled_twins.py compiles each to PTX where numba-cuda's compiler is found).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from .._core.integrators import rules

_jit = njit(cache=True, error_model="numpy")

#: The step-size rules, written once (`invimbed._core.integrators.rules`) and compiled.
error_scale = _jit(rules.error_scale)
grow_factor = _jit(rules.grow_factor)
shrink_factor = _jit(rules.shrink_factor)
first_guess = _jit(rules.first_guess)
second_guess = _jit(rules.second_guess)
stiff_run = _jit(rules.stiff_run)
stiff_stops = _jit(rules.stiff_stops)


@_jit
def _block(a, lo, n):
    """numpy's pairwise summation of ``a[lo:lo + n]`` for ``n <= 128`` (one block)."""
    if n < 8:
        res = 0.0
        for i in range(lo, lo + n):
            res += a[i]
        return res
    r0 = a[lo]
    r1 = a[lo + 1]
    r2 = a[lo + 2]
    r3 = a[lo + 3]
    r4 = a[lo + 4]
    r5 = a[lo + 5]
    r6 = a[lo + 6]
    r7 = a[lo + 7]
    i = 8
    while i < n - (n % 8):
        r0 += a[lo + i]
        r1 += a[lo + i + 1]
        r2 += a[lo + i + 2]
        r3 += a[lo + i + 3]
        r4 += a[lo + i + 4]
        r5 += a[lo + i + 5]
        r6 += a[lo + i + 6]
        r7 += a[lo + i + 7]
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < n:
        res += a[lo + i]
        i += 1
    return res


@_jit
def _pairwise(a, lo, n):
    """``sum(a[lo:lo + n])`` added as numpy adds a contiguous row (pairwise summation:
    blocks of at most 128, halves split at a multiple of 8). numpy recurses; this walks
    the same tree leaf by leaf (numba cannot cache recursive functions, and a device
    function has no stack to spare): the sum of a finished left half is kept in its own
    first entry, which no later leaf reads (``a[lo:lo + n]`` is overwritten), and the
    tree is descended again from the root to find a node's parent."""
    if n <= 128:
        return _block(a, lo, n)
    pos = lo
    while True:
        fl = lo                       # the leaf that starts at pos
        fm = n
        while fm > 128:
            m2 = fm // 2
            m2 -= m2 % 8
            if pos < fl + m2:
                fm = m2
            else:
                fl += m2
                fm -= m2
        v = _block(a, fl, fm)
        while True:                   # up while the finished node is a right half
            if fl == lo and fm == n:
                return v
            pl = lo
            pm = n
            while True:               # its parent, from the root
                m2 = pm // 2
                m2 -= m2 % 8
                if (fl == pl and fm == m2) or (fl == pl + m2 and fm == pm - m2):
                    break
                if fl < pl + m2:
                    pm = m2
                else:
                    pl += m2
                    pm -= m2
            if fl == pl:              # a left half: kept until its right half is done
                a[fl] = v
                pos = fl + fm
                break
            v = a[pl] + v             # a right half: numpy's left + right
            fl = pl
            fm = pm


@_jit
def _sum_squares(a):
    """``add.reduce(a * a)`` as numpy computes it (``a`` is overwritten)."""
    n = a.shape[0]
    for i in range(n):
        a[i] = a[i] * a[i]
    return _pairwise(a, 0, n)


@_jit
def _rms(a):
    """``sqrt(mean(a * a))`` as numpy computes it (``a`` is overwritten)."""
    n = a.shape[0]
    if n == 0:
        return 0.0
    return math.sqrt(_sum_squares(a) / n)


@_jit
def _sign(x):
    """``np.sign`` of a float, written out (device code has no numpy ufuncs)."""
    if x > 0:
        return 1.0
    if x < 0:
        return -1.0
    return x            # zero or NaN, as np.sign


@_jit
def _fmin(a, b):
    """``np.minimum`` of two scalars (NaN propagates)."""
    return np.minimum(a, b)


@_jit
def _fmax(a, b):
    """``np.maximum`` of two scalars (NaN propagates)."""
    return np.maximum(a, b)


@_jit
def _finite(a):
    """Whether every entry of ``a`` is finite (a branch-free reduction, which vectorises:
    3-4x the early exit's speed on a finite state, the case that matters)."""
    ok = True
    for i in range(a.shape[0]):
        ok &= math.isfinite(a[i])
    return ok


@_jit
def _search(a, v, right):
    """``np.searchsorted(a, v, side="right" if right else "left")`` for one value (a
    bisection: ``a`` sorted, ``v`` not NaN)."""
    lo = 0
    hi = a.shape[0]
    while lo < hi:
        mid = (lo + hi) // 2
        if a[mid] < v or (right and a[mid] == v):
            lo = mid + 1
        else:
            hi = mid
    return lo


@_jit
def _next_stop(t, t1, direction, stops):
    """The first stop strictly beyond ``t`` in the row's direction, else ``t1``."""
    n = stops.shape[0]
    if n == 0:
        return t1
    if direction > 0:
        up = _search(stops, t, True)
        valid = up < n
        nxt = stops[up if up < n - 1 else n - 1]
    else:
        down = _search(stops, t, False) - 1
        valid = down >= 0
        nxt = stops[down if down > 0 else 0]
    if valid and direction * (t1 - nxt) > 0:
        return nxt
    return t1


@_jit
def _piece(knots, lo, hi):
    """`PiecewiseConstant.pieces`: the piece holding the midpoint of ``(lo, hi)``."""
    k = _search(knots, 0.5 * (lo + hi), True) - 1
    last = knots.shape[0] - 2
    if k > last:
        k = last
    if k < 0:
        k = 0
    return k


@_jit
def _dense_z(t, dense, nd, ptr, N, kq, zbuf):
    """``z(t)`` from the forward pass's dense output (`DenseRows.__call__` for one row;
    ``dense[k] = [t_old, h, y_old (S), Q (S, kq)]`` of step ``k``): the last step whose
    ``t_old <= t`` (the first step if none), found by walking from the step of the
    previous call (``ptr[0]``), which gives the step of numpy's bisection."""
    S = N + 1
    a = ptr[0]
    while a < nd - 1 and t - dense[a + 1, 0] >= 0:
        a += 1
    while a > 0 and not (t - dense[a, 0] >= 0):
        a -= 1
    ptr[0] = a
    h = dense[a, 1]
    x = (t - dense[a, 0]) / h
    for s in range(N):
        acc = 0.0
        pw = 1.0
        for j in range(kq):
            pw = x if j == 0 else pw * x
            acc += dense[a, 2 + S + s * kq + j] * pw
        zbuf[s] = dense[a, 2 + s] + h * acc


@_jit
def initial_step_h0(y, f, rtol, atol, span, a):
    """The first half of scipy's ``select_initial_step`` (`rules.first_guess`):
    ``(d1, h0)``, ``h0`` not beyond ``span``; ``a`` is scratch of ``y``'s size."""
    S = y.shape[0]
    for i in range(S):
        a[i] = y[i] / error_scale(y[i], y[i], rtol, atol)
    d0 = _rms(a)
    for i in range(S):
        a[i] = f[i] / error_scale(y[i], y[i], rtol, atol)
    d1 = _rms(a)
    return d1, first_guess(d0, d1, span)


@_jit
def initial_step(y, f, f1, rtol, atol, d1, h0, order, span, a):
    """The second half of scipy's ``select_initial_step`` (`rules.second_guess`), from
    ``f1``, the derivative at ``y + h0 f``: the first step, not beyond ``span`` (``h0``
    where the rule gives a non-finite one)."""
    for i in range(y.shape[0]):
        a[i] = (f1[i] - f[i]) / error_scale(y[i], y[i], rtol, atol)
    return second_guess(d1, _rms(a) / h0, h0, order, span)


# -- one explicit Runge-Kutta step's arithmetic, shared by both adaptive kernels ------------
@_jit
def _weighted_rows(K, w, m, n, out):
    """``out[:n] = sum_{j < m} w[j] K[j]``, summed in ``j``'s order one row of ``K`` at a
    time: the same operations in the same order as a sum per entry, so the same bits,
    but each pass vectorises (the state of a jet sweep has thousands of entries)."""
    w0 = w[0]
    for i in range(n):
        out[i] = K[0, i] * w0
    for j in range(1, m):
        wj = w[j]
        for i in range(n):
            out[i] += K[j, i] * wj


@_jit
def stage_state(y, K, A, s, h, n, out):
    """``out[:n] = y + h sum_{j < s} A[s, j] K[j]``: the state at which stage ``s`` of an
    explicit Runge-Kutta step evaluates (the numpy twin: `invimbed._core.integrators`)."""
    _weighted_rows(K, A[s], s, n, out)
    for i in range(n):
        out[i] = y[i] + out[i] * h


@_jit
def weighted_step(y, K, w, m, h, n, out):
    """``out[:n] = y + h sum_{j < m} w[j] K[j]``: the step's new state (``w = b``)."""
    _weighted_rows(K, w, m, n, out)
    for i in range(n):
        out[i] = y[i] + h * out[i]


@_jit
def scaled_error(y, y_new, K, E, m, h, rtol, atol, n, out):
    """``out[:n]``: the embedded error ``h sum_{j < m} E[j] K[j]`` over scipy's scale
    ``atol + max(|y|, |y_new|) rtol``, whose RMS decides the step."""
    _weighted_rows(K, E, m, n, out)
    for i in range(n):
        out[i] = (out[i] * h) / error_scale(y[i], y_new[i], rtol, atol)


@_jit
def dense_coefficient(K, P, m, i, c):
    """Entry ``(i, c)`` of the step's continuous extension ``Q = K^T P`` (scipy's
    ``RkDenseOutput``), over the first ``m`` stages."""
    acc = K[0, i] * P[0, c]
    for j in range(1, m):
        acc += K[j, i] * P[j, c]
    return acc
