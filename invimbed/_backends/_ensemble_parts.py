"""Scalar pieces of the numba ensemble adjoint (`invimbed._backends._ensemble_kernels`):
numpy's pairwise summation and the RMS error norm (so that both ensembles take the same
steps), finiteness, the next stop and control piece of a row, and the evaluation of a
row's dense output. Compiled once per machine (``cache=True``).
"""

from __future__ import annotations

import numpy as np
from numba import njit

_jit = njit(cache=True, error_model="numpy")


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
    the same tree with an explicit stack (numba cannot cache recursive functions)."""
    if n <= 128:
        return _block(a, lo, n)
    los = np.empty(64, dtype=np.int64)
    ns = np.empty(64, dtype=np.int64)
    stage = np.zeros(64, dtype=np.int64)
    left = np.empty(64)
    top = 0
    los[0] = lo
    ns[0] = n
    ret = 0.0
    while top >= 0:
        m = ns[top]
        if m <= 128:
            ret = _block(a, los[top], m)
            top -= 1
            continue
        m2 = m // 2
        m2 -= m2 % 8
        if stage[top] == 0:          # the left half first
            stage[top] = 1
            los[top + 1] = los[top]
            ns[top + 1] = m2
            stage[top + 1] = 0
            top += 1
        elif stage[top] == 1:        # then the right half
            left[top] = ret
            stage[top] = 2
            los[top + 1] = los[top] + m2
            ns[top + 1] = m - m2
            stage[top + 1] = 0
            top += 1
        else:
            ret = left[top] + ret
            top -= 1
    return ret


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
    return np.sqrt(_sum_squares(a) / n)


@_jit
def _fmin(a, b):
    """``np.minimum`` (NaN propagates)."""
    if a != a or b != b:
        return np.nan
    return a if a <= b else b


@_jit
def _fmax(a, b):
    """``np.maximum`` (NaN propagates)."""
    if a != a or b != b:
        return np.nan
    return a if a >= b else b


@_jit
def _finite(a):
    """Whether every entry of ``a`` is finite (a branch-free reduction, which vectorises:
    3-4x the early exit's speed on a finite state, the case that matters)."""
    ok = True
    for i in range(a.shape[0]):
        ok &= np.isfinite(a[i])
    return ok


@_jit
def _next_stop(t, t1, direction, stops):
    """The first stop strictly beyond ``t`` in the row's direction, else ``t1``."""
    n = stops.shape[0]
    if n == 0:
        return t1
    if direction > 0:
        up = np.searchsorted(stops, t, side="right")
        valid = up < n
        nxt = stops[up if up < n - 1 else n - 1]
    else:
        down = np.searchsorted(stops, t, side="left") - 1
        valid = down >= 0
        nxt = stops[down if down > 0 else 0]
    if valid and direction * (t1 - nxt) > 0:
        return nxt
    return t1


@_jit
def _piece(knots, lo, hi):
    """`PiecewiseConstant.pieces`: the piece holding the midpoint of ``(lo, hi)``."""
    k = np.searchsorted(knots, 0.5 * (lo + hi), side="right") - 1
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


# -- the step-size rules of both compiled adaptive kernels (`_ensemble_kernels._integrate`,
# `_sweep_kernels.sweep_one`), as `invimbed._core.integrators.ensemble` applies them -------


@_jit
def initial_step_h0(y, f, rtol, atol, span, a):
    """The first half of scipy's ``select_initial_step`` (`ensemble._initial_step`):
    ``(d1, h0)``, ``h0`` not beyond ``span``; ``a`` is scratch of ``y``'s size."""
    S = y.shape[0]
    for i in range(S):
        a[i] = y[i] / (atol + abs(y[i]) * rtol)
    d0 = _rms(a)
    for i in range(S):
        a[i] = f[i] / (atol + abs(y[i]) * rtol)
    d1 = _rms(a)
    if d0 < 1e-5 or d1 < 1e-5:
        h0 = 1e-6
    else:
        h0 = 0.01 * d0 / d1
    return d1, _fmin(h0, span)


@_jit
def initial_step(y, f, f1, rtol, atol, d1, h0, order, span, a):
    """The second half of scipy's ``select_initial_step``, from ``f1``, the derivative at
    ``y + h0 f``: the first step, not beyond ``span`` (``h0`` where the rule gives a
    non-finite one)."""
    for i in range(y.shape[0]):
        a[i] = (f1[i] - f[i]) / (atol + abs(y[i]) * rtol)
    d2 = _rms(a) / h0
    if d1 <= 1e-15 and d2 <= 1e-15:
        h1 = _fmax(1e-6, h0 * 1e-3)
    else:
        h1 = (0.01 / _fmax(d1, d2)) ** (1.0 / (order + 1))
    if not np.isfinite(h1):
        h1 = h0
    return _fmin(_fmin(100 * h0, h1), span)


@_jit
def grow_factor(norm, rejected, safety, max_factor, exponent):
    """The step's factor after an accepted step (scipy's ``RungeKutta._step_impl``):
    ``min(max_factor, safety norm^exponent)``, not above 1 right after a rejection."""
    if norm == 0:
        factor = max_factor
    else:
        factor = _fmin(max_factor, safety * norm ** exponent)
    if rejected:
        factor = _fmin(1.0, factor)
    return factor


@_jit
def shrink_factor(norm, safety, min_factor, exponent):
    """The step's factor after a rejected step: ``max(min_factor, safety norm^exponent)``."""
    return _fmax(min_factor, safety * norm ** exponent)


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
        out[i] = (out[i] * h) / (atol + _fmax(abs(y[i]), abs(y_new[i])) * rtol)


@_jit
def dense_coefficient(K, P, m, i, c):
    """Entry ``(i, c)`` of the step's continuous extension ``Q = K^T P`` (scipy's
    ``RkDenseOutput``), over the first ``m`` stages."""
    acc = K[0, i] * P[0, c]
    for j in range(1, m):
        acc += K[j, i] * P[j, c]
    return acc
