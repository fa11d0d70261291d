"""The numba evaluator of Taylor-mode tapes (`invimbed._core.derivatives.taylor_mode`).

One compiled kernel, `run`, interprets any tape row by row: the tape is data, so nothing
is generated per problem and numba's on-disk cache (``cache=True``) serves every later
process. Per row it keeps one ``(D, C)`` block per node; a node of kind 0 fills only its
value, one of kind 1 only its polynomial (its dual parts stay zero), as the numpy
evaluator does. Products walk `invimbed._core.derivatives.multiindex.product_table`
(the jet closure's table) grouped by the left factor's coefficient, skipping zero
coefficients (the powers ``h^j`` of a composition have none below degree ``j``). The
univariate series are `invimbed._core.derivatives._univariate.series`, compiled.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from numba import njit

from ._tape import (ABS, ADD, AND, CMP, CONST, FUNC, INPUT, MAX, MIN, MUL, NOT, OR, POWI,
                    SELECT, STEP, TIME, Tape)
from .multiindex import n_coefficients, product_table
from ._univariate import series as _series

series = njit(cache=True)(_series)


@lru_cache(maxsize=None)
def plan(n: int, order: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The truncated product table of degree ``order`` as ``(ptr, ib, io)``: the pairs of
    left coefficient ``i`` are ``ptr[i]:ptr[i + 1]``."""
    ia, ib, io = product_table(n, order, order, order)
    ptr = np.searchsorted(ia, np.arange(n_coefficients(n, order) + 1)).astype(np.int64)
    return ptr, ib, io


@njit(cache=True)
def _mul_acc(x, y, out, ptr, ib, io):
    """``out += x * y`` (truncated)."""
    for i in range(ptr.shape[0] - 1):
        xi = x[i]
        if xi != 0.0:
            for p in range(ptr[i], ptr[i + 1]):
                out[io[p]] += xi * y[ib[p]]


@njit(cache=True)
def _jmul(x, y, kx, ky, out, D, ptr, ib, io):
    """Jet product into ``out`` (D, C): ``out_0 = x_0 y_0``, ``out_d = x_0 y_d + x_d y_0``."""
    out[:, :] = 0.0
    _mul_acc(x[0], y[0], out[0], ptr, ib, io)
    for d in range(1, D):
        if ky == 2:
            _mul_acc(x[0], y[d], out[d], ptr, ib, io)
        if kx == 2:
            _mul_acc(x[d], y[0], out[d], ptr, ib, io)


@njit(cache=True)
def _compose(code, r, x, kx, out, order, D, ptr, ib, io):
    C = x.shape[1]
    c0 = np.empty(1)
    c0[0] = x[0, 0]
    duals = kx == 2
    g = series(code, c0, r, order + (1 if duals else 0))
    h = x[0].copy()
    h[0] = 0.0
    power = h.copy()
    nxt = np.zeros(C)
    val = np.zeros(C)
    dg = np.zeros(C)
    val[0] = g[0, 0]
    if duals:
        dg[0] = g[1, 0]
    for j in range(1, order + 1):
        if j > 1:
            nxt[:] = 0.0
            _mul_acc(power, h, nxt, ptr, ib, io)
            power[:] = nxt
        val += g[j, 0] * power
        if duals:
            dg += (j + 1) * g[j + 1, 0] * power
    out[:, :] = 0.0
    out[0] = val
    if duals:
        for d in range(1, D):
            _mul_acc(dg, x[d], out[d], ptr, ib, io)


@njit(cache=True)
def run(ops, par, kind, outputs, t, xin, order, D, C, ptr, ib, io, out):
    """Evaluate the tape for every row of ``xin`` into ``out`` (B, n_out, D, C)."""
    W = np.zeros((ops.shape[0], D, C))
    tmp = np.zeros((D, C))
    for row in range(xin.shape[0]):
        run_row(ops, par, kind, outputs, t[row], xin[row], order, D, ptr, ib, io, W, tmp,
                out[row])


@njit(cache=True)
def run_row(ops, par, kind, outputs, t, x, order, D, ptr, ib, io, W, tmp, out):
    """One row of `run`: the tape at time ``t`` and inputs ``x`` into ``out`` (n_out, D,
    C), with the node storage ``W`` (n_nodes, D, C) and ``tmp`` (D, C) of the caller (the
    compiled imbedding sweep keeps them for a whole sweep)."""
    n_nodes, C = ops.shape[0], W.shape[2]
    for i in range(n_nodes):
        op, a, b, c = ops[i, 0], ops[i, 1], ops[i, 2], ops[i, 3]
        k = kind[i]
        Dk = D if k == 2 else 1
        Ck = 1 if k == 0 else C
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
            w[:Dk, :Ck] = W[a, :Dk, :Ck] + W[b, :Dk, :Ck]
        elif op == MUL:
            if kind[a] == 0:
                w[:Dk, :Ck] = W[a, 0, 0] * W[b, :Dk, :Ck]
            elif kind[b] == 0:
                w[:Dk, :Ck] = W[b, 0, 0] * W[a, :Dk, :Ck]
            else:
                _jmul(W[a], W[b], kind[a], kind[b], w, Dk, ptr, ib, io)
        elif op == POWI:
            if k == 0:
                w[0, 0] = W[a, 0, 0] ** b
            else:
                w[:, :] = W[a]
                for _ in range(b - 1):
                    _jmul(w, W[a], k, k, tmp, Dk, ptr, ib, io)
                    w[:, :] = tmp
        elif op == FUNC:
            if k == 0:
                c0 = np.empty(1)
                c0[0] = W[a, 0, 0]
                w[0, 0] = series(b, c0, par[i], 0)[0, 0]
            else:
                _compose(b, par[i], W[a], kind[a], w, order, D, ptr, ib, io)
        elif op == ABS:
            w[:Dk, :Ck] = np.sign(W[a, 0, 0]) * W[a, :Dk, :Ck]
        elif op == MAX or op == MIN:
            pa, pb = W[a, 0, 0], W[b, 0, 0]
            src = a if (pa >= pb if op == MAX else pa <= pb) else b
            w[:Dk, :Ck] = W[src, :Dk, :Ck]
        elif op == STEP:
            p = W[a, 0, 0]
            if b == 1:
                w[0, 0] = np.sign(p)
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
        elif op == SELECT:
            src = b if W[a, 0, 0] != 0 else c
            w[:Dk, :Ck] = W[src, :Dk, :Ck]
    for j in range(outputs.shape[0]):
        out[j] = W[outputs[j]]


def evaluate(tape: Tape, t: np.ndarray, xin: np.ndarray, order: int) -> np.ndarray:
    """The numpy evaluator (`invimbed._core.derivatives.taylor_mode`), compiled."""
    n, D = tape.n_seeds, 1 + tape.n_duals
    C = n_coefficients(n, order)
    ptr, ib, io = plan(n, order)
    out = np.zeros((xin.shape[0], len(tape.outputs), D, C))
    run(tape.ops, tape.par, tape.kind, tape.outputs, np.ascontiguousarray(t, dtype=float),
        np.ascontiguousarray(xin, dtype=float), order, D, C, ptr, ib, io, out)
    return out
