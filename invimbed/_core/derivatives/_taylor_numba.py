"""The numba evaluator of Taylor-mode tapes (`invimbed._core.derivatives.taylor_mode`).

One compiled kernel, `run`, interprets any tape row by row: the tape is data, so nothing
is generated per problem and numba's on-disk cache (``cache=True``) serves every later
process. Per row it keeps one ``(D, C)`` block per node; a node of kind 0 fills only its
value, one of kind 1 only its polynomial (its dual parts stay zero), as the numpy
evaluator does. Products walk `invimbed._core.derivatives.multiindex.product_table`
(the jet closure's table) grouped by the left factor's coefficient, skipping zero
coefficients (the powers ``h^j`` of a composition have none below degree ``j``). Each
node touches only the leading coefficients its degree can fill (`lengths`: a linear
node of a 16-variable tape fills 17 of the 153 coefficients of degree 2), and nothing
is allocated at all: the node storage and the scratch are the caller's, so that `run_row`
and the functions it calls are numba-cuda device functions as written. The univariate
series are `invimbed._core.derivatives._univariate.series_into`, compiled.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from numba import njit

from ._tape import (ABS, ADD, AND, CMP, CONST, FUNC, INPUT, MAX, MIN, MUL, NOT, OR, POWI,
                    SELECT, STEP, TIME, Tape)
from ..runtime.compile_cost import compiled_here
from .multiindex import n_coefficients, product_table
from ._univariate import series_into as _series_into

#: A run-time zero: numba compiles a callee again for a literal argument (seconds for
#: `series_into`, which the kernels also call with a variable degree).
_ZERO = np.zeros(1, dtype=np.int64)

#: `invimbed._core.derivatives._univariate.series_into` (the numpy evaluator's), compiled.
series_into = njit(cache=True)(_series_into)

#: Functions that only compiled code calls: no CPython wrapper (as
#: `invimbed._backends._numba_calls._inner`).
_inner = njit(cache=True, no_cpython_wrapper=True)


@lru_cache(maxsize=None)
def plan(n: int, order: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The truncated product table of degree ``order`` as ``(ptr, ib, io)``: the pairs of
    left coefficient ``i`` are ``ptr[i]:ptr[i + 1]``."""
    ia, ib, io = product_table(n, order, order, order)
    ptr = np.searchsorted(ia, np.arange(n_coefficients(n, order) + 1)).astype(np.int64)
    return ptr, ib, io


@njit(cache=True)
def lengths(ops, kind, order, n):
    """How many leading coefficients (graded order) of each node can be nonzero:
    ``L[i, 0]`` of its polynomial, ``L[i, 1]`` of its dual parts (0: all zero), from the
    degrees the tape's operations produce (a sum: the larger; a product: the sum,
    truncated at ``order``; a composition: ``order``). A bound set by the tape alone:
    `run_row` touches no coefficient beyond it, whose value stays zero."""
    ends = np.zeros(order + 2, np.int64)      # ends[d + 1]: coefficients of degree <= d
    c = 1
    for d in range(order + 1):
        ends[d + 1] = c
        c = c * (n + d + 1) // (d + 1)
    m = ops.shape[0]
    dp = np.zeros(m, np.int64)
    dd = np.zeros(m, np.int64)
    L = np.zeros((m, 2), np.int64)
    for i in range(m):
        op, a, b, c = ops[i, 0], ops[i, 1], ops[i, 2], ops[i, 3]
        p, d = 0, -1
        if kind[i] == 0:
            pass
        elif op == INPUT:
            p = 1 if (b >= 0 and order >= 1) else 0
            d = 0 if c >= 0 else -1
        elif op == ADD or op == MAX or op == MIN:
            p, d = max(dp[a], dp[b]), max(dd[a], dd[b])
        elif op == SELECT:
            p, d = max(dp[b], dp[c]), max(dd[b], dd[c])
        elif op == ABS:
            p, d = dp[a], dd[a]
        elif op == MUL:
            if kind[a] == 0:
                p, d = dp[b], dd[b]
            elif kind[b] == 0:
                p, d = dp[a], dd[a]
            else:
                p = dp[a] + dp[b]
                if dd[b] >= 0:
                    d = dp[a] + dd[b]
                if dd[a] >= 0:
                    d = max(d, dd[a] + dp[b])
        elif op == POWI:
            p = dp[a] * b
            if dd[a] >= 0:
                d = dp[a] * (b - 1) + dd[a]
        elif op == FUNC:
            p = order if dp[a] >= 1 else 0
            if dd[a] >= 0:
                d = p + dd[a]
        dp[i] = min(p, order)
        dd[i] = min(d, order)
        L[i, 0] = ends[dp[i] + 1]
        L[i, 1] = ends[dd[i] + 1]
    return L


@_inner
def uses_time(ops, outputs):
    """Whether an output of the tape depends on the time ``t``."""
    dep = np.zeros(ops.shape[0], np.bool_)
    for i in range(ops.shape[0]):
        op, a, b, c = ops[i, 0], ops[i, 1], ops[i, 2], ops[i, 3]
        if op == TIME:
            dep[i] = True
        elif op == CONST or op == INPUT:
            dep[i] = False
        elif op == SELECT:
            dep[i] = dep[a] or dep[b] or dep[c]
        elif op == CMP:
            dep[i] = dep[a] or dep[c]
        elif op == ADD or op == MUL or op == MAX or op == MIN or op == AND or op == OR:
            dep[i] = dep[a] or dep[b]
        else:           # POWI, FUNC, ABS, STEP, NOT: one argument
            dep[i] = dep[a]
    for j in range(outputs.shape[0]):
        if dep[outputs[j]]:
            return True
    return False


@_inner
def _mul_acc(x, y, out, ptr, ib, io, lx, ly):
    """``out += x * y`` (truncated), ``x`` and ``y`` zero from ``lx`` and ``ly`` on."""
    for i in range(min(lx, ptr.shape[0] - 1)):
        xi = x[i]
        if xi != 0.0:
            for p in range(ptr[i], ptr[i + 1]):
                j = ib[p]
                if j >= ly:         # ib ascends within a left coefficient's pairs
                    break
                out[io[p]] += xi * y[j]


@njit(cache=True)
def _fill(a, n, v):
    """``a[:n] = v`` (a loop: a slice assignment needs numba's runtime on a GPU)."""
    for j in range(n):
        a[j] = v


@njit(cache=True)
def _copy(dst, src, n):
    """``dst[:n] = src[:n]`` (a loop, as `_fill`)."""
    for j in range(n):
        dst[j] = src[j]


@njit(cache=True)
def _zero(w, D, lp, ld):
    _fill(w[0], lp, 0.0)
    for d in range(1, D):
        _fill(w[d], ld, 0.0)


@_inner
def _jmul(x, y, kx, ky, out, D, ptr, ib, io, Lx, Ly, lp, ld):
    """Jet product into ``out`` (D, C): ``out_0 = x_0 y_0``, ``out_d = x_0 y_d + x_d y_0``
    (``Lx``, ``Ly``, ``lp``, ``ld``: the bounds of `lengths`)."""
    _zero(out, D, lp, ld)
    _mul_acc(x[0], y[0], out[0], ptr, ib, io, Lx[0], Ly[0])
    for d in range(1, D):
        if ky == 2:
            _mul_acc(x[0], y[d], out[d], ptr, ib, io, Lx[0], Ly[1])
        if kx == 2:
            _mul_acc(x[d], y[0], out[d], ptr, ib, io, Lx[1], Ly[0])


@njit(cache=True)
def _sign(p):
    """``np.sign`` of a scalar (0 for both zeros, NaN for NaN)."""
    if p > 0:
        return 1.0
    if p < 0:
        return -1.0
    return p if p != p else 0.0


@_inner
def _compose(code, r, x, kx, out, order, D, ptr, ib, io, Lx, lp, ld, S):
    """``g(x)`` for the univariate function ``code``; ``S`` (5, C + 2) scratch (its last
    row: the series of ``g``)."""
    duals = kx == 2
    g = S[4]
    series_into(code, x[0, 0], r, order + (1 if duals else 0), g)
    h, power, val, dg = S[0], S[1], S[2], S[3]
    _copy(h, x[0], lp)
    h[0] = 0.0
    _copy(power, h, lp)
    _fill(val, lp, 0.0)
    _fill(dg, lp, 0.0)
    val[0] = g[0]
    if duals:
        dg[0] = g[1]
    for j in range(1, order + 1):
        if j > 1:
            _fill(out[0], lp, 0.0)
            _mul_acc(power, h, out[0], ptr, ib, io, lp, Lx[0])
            _copy(power, out[0], lp)
        for c in range(lp):
            val[c] += g[j] * power[c]
        if duals:
            for c in range(lp):
                dg[c] += (j + 1) * g[j + 1] * power[c]
    _zero(out, D, lp, ld)
    _copy(out[0], val, lp)
    if duals:
        for d in range(1, D):
            _mul_acc(dg, x[d], out[d], ptr, ib, io, lp, Lx[1])


@njit(cache=True)
def run(ops, par, kind, outputs, t, xin, order, D, C, ptr, ib, io, out, n):
    """Evaluate the tape (``n`` seeded variables) for every row of ``xin`` into ``out``
    (B, n_out, D, C)."""
    W = np.zeros((ops.shape[0], D, C))
    tmp = np.zeros((D + 5, C + 2))
    L = lengths(ops, kind, order, n)
    for row in range(xin.shape[0]):
        run_row(ops, par, kind, outputs, t[row], xin[row], order, D, ptr, ib, io, W, tmp,
                out[row], L)


@_inner
def run_row(ops, par, kind, outputs, t, x, order, D, ptr, ib, io, W, tmp, out, L):
    """One row of `run`: the tape at time ``t`` and inputs ``x`` into ``out`` (n_out, D,
    C), with the node storage ``W`` (n_nodes, D, C, zero where `lengths` ``L`` bounds
    it), ``tmp`` (D + 5, C + 2) of the caller (the compiled imbedding sweep keeps them
    for a whole sweep). Nothing is allocated."""
    n_nodes = ops.shape[0]
    for i in range(n_nodes):
        op, a, b, c = ops[i, 0], ops[i, 1], ops[i, 2], ops[i, 3]
        k = kind[i]
        Dk = D if k == 2 else 1
        lp, ld = L[i, 0], L[i, 1]
        w = W[i]
        if op == CONST:
            w[0, 0] = par[i]
        elif op == TIME:
            w[0, 0] = t
        elif op == INPUT:
            w[0, 0] = x[a]
            if b >= 0 and order >= 1:
                w[0, 1 + b] = 1.0
            if c >= 0:
                w[1 + c, 0] = 1.0
        elif op == ADD:
            wa, wb = W[a], W[b]
            for j in range(lp):
                w[0, j] = wa[0, j] + wb[0, j]
            for d in range(1, Dk):
                for j in range(ld):
                    w[d, j] = wa[d, j] + wb[d, j]
        elif op == MUL:
            if kind[a] == 0 or kind[b] == 0:
                s = W[a, 0, 0] if kind[a] == 0 else W[b, 0, 0]
                wv = W[b] if kind[a] == 0 else W[a]
                for j in range(lp):
                    w[0, j] = s * wv[0, j]
                for d in range(1, Dk):
                    for j in range(ld):
                        w[d, j] = s * wv[d, j]
            else:
                _jmul(W[a], W[b], kind[a], kind[b], w, Dk, ptr, ib, io, L[a], L[b], lp, ld)
        elif op == POWI:
            if k == 0:
                w[0, 0] = W[a, 0, 0] ** b
            else:
                for d in range(w.shape[0]):
                    _copy(w[d], W[a, d], w.shape[1])
                for _ in range(b - 1):
                    _jmul(w, W[a], k, k, tmp, Dk, ptr, ib, io, L[i], L[a], lp, ld)
                    _copy(w[0], tmp[0], lp)
                    for d in range(1, Dk):
                        _copy(w[d], tmp[d], ld)
        elif op == FUNC:
            if k == 0:
                series_into(b, W[a, 0, 0], par[i], _ZERO[0], tmp[D + 4])
                w[0, 0] = tmp[D + 4, 0]
            else:
                _compose(b, par[i], W[a], kind[a], w, order, D, ptr, ib, io, L[a], lp, ld,
                         tmp[D:])
        elif op == ABS:
            s = _sign(W[a, 0, 0])
            for j in range(lp):
                w[0, j] = s * W[a, 0, j]
            for d in range(1, Dk):
                for j in range(ld):
                    w[d, j] = s * W[a, d, j]
        elif op == MAX or op == MIN or op == SELECT:
            if op == SELECT:
                src = b if W[a, 0, 0] != 0 else c
            else:
                pa, pb = W[a, 0, 0], W[b, 0, 0]
                src = a if (pa >= pb if op == MAX else pa <= pb) else b
            if k == 0:
                w[0, 0] = W[src, 0, 0]
            else:
                for d in range(Dk):
                    _copy(w[d], W[src, d], w.shape[1])
        elif op == STEP:
            p = W[a, 0, 0]
            if b == 1:
                w[0, 0] = _sign(p)
            else:
                w[0, 0] = 1.0 if p > 0 else (0.0 if p < 0 else par[i])
        elif op == CMP:
            p, q = W[a, 0, 0], W[c, 0, 0]
            res = ((p < q) if b == 0 else (p <= q) if b == 1 else (p > q) if b == 2
                   else (p >= q) if b == 3 else (p == q) if b == 4 else (p != q))
            w[0, 0] = 1.0 if res else 0.0
        elif op == AND:
            w[0, 0] = 1.0 if (W[a, 0, 0] != 0 and W[b, 0, 0] != 0) else 0.0
        elif op == OR:
            w[0, 0] = 1.0 if (W[a, 0, 0] != 0 or W[b, 0, 0] != 0) else 0.0
        elif op == NOT:
            w[0, 0] = 1.0 if W[a, 0, 0] == 0 else 0.0
    for j in range(outputs.shape[0]):
        for d in range(out.shape[1]):
            _copy(out[j, d], W[outputs[j], d], out.shape[2])


def evaluate(tape: Tape, t: np.ndarray, xin: np.ndarray, order: int) -> np.ndarray:
    """The numpy evaluator (`invimbed._core.derivatives.taylor_mode`), compiled."""
    n, D = tape.n_seeds, 1 + tape.n_duals
    C = n_coefficients(n, order)
    ptr, ib, io = plan(n, order)
    out = np.zeros((xin.shape[0], len(tape.outputs), D, C))
    # writeable C arrays, as the warm-up's (`python -m invimbed compile`): numba types a
    # read-only array (a broadcast time of one row) apart, and compiles the kernel again
    # for it (seconds)
    args = (tape.ops, tape.par, tape.kind, tape.outputs, np.require(t, float, ["C", "W"]),
            np.require(xin, float, ["C", "W"]), order, D, C, ptr, ib, io, out, n)
    if compiled_here(run):   # compiled in this process: no announcement to consider
        run(*args)
        return out
    from numba import typeof

    from ..runtime.compile_cost import compiling

    with compiling("taylor", [(run, tuple(typeof(a) for a in args))]):
        run(*args)
    return out
