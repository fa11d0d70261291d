"""Numba: calling the user's functions and following a derivative plan (imported only
when numba is installed). Shared by the jet sweep (`invimbed._backends._numba_kernels`)
and the ensemble adjoint (`invimbed._backends._ensemble_kernels`).

User functions reach the kernels as first-class function values of fixed signatures
(``numba.types.FunctionType``, a tuple in the order of `_plans.BASE_KEYS`), so that the
kernels' types, and their on-disk cache entries, do not depend on which functions they
are given. `eval_request` computes the Taylor coefficients a `_plans.Plan` asks for:
the user's derivative where given, else nested central differences by the one step rule
of `invimbed._core.derivatives.finite_difference` (`step_size`, `central_quotient`,
compiled here).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .._core.derivatives.finite_difference import central_quotient, step_size

#: The finite-difference rule of `invimbed.FiniteDifferences`, compiled (one source).
_step_size = njit(cache=True)(step_size)
_central_quotient = njit(cache=True)(central_quotient)

#: The decorator of functions that only compiled code calls: numba then generates no
#: CPython wrapper for them (the code that would convert Python arguments, which
#: LLVM optimises and compiles like the rest: seconds for a function of many
#: arguments, measured by numba's compile events).
_inner = njit(cache=True, no_cpython_wrapper=True)
#: The same for the kernels compiled with numpy's error model (a division by zero gives
#: inf or nan, as numpy's does: the ensemble and the adaptive sweep).
_inner_numpy = njit(cache=True, error_model="numpy", no_cpython_wrapper=True)

#: Small integers as run-time values: numba specialises a callee on literal arguments, and
#: each specialisation of these deep call trees costs seconds of compilation.
_IDS = np.arange(8, dtype=np.int64)

# -- calling the user's functions --------------------------------------------------------


@njit(cache=True)
def _copy(r, vals, row):
    """A user function's result ``r`` (any rank, C-contiguous) into ``vals[row]``, flat."""
    flat = r.reshape(r.size)      # a view: the signatures ask for C-contiguous results
    for i in range(flat.shape[0]):
        vals[row, i] = flat[i]


@_inner
def call_base(fns, bid, t, z, th, vals, row):
    """Evaluate ``BASE_KEYS[bid]`` at one point into ``vals[row]`` (flat, C order)."""
    if bid == 0:
        _copy(fns[0](t, z, th), vals, row)
    elif bid == 1:
        _copy(fns[1](t, z, th), vals, row)
    elif bid == 2:
        _copy(fns[2](t, z, th), vals, row)
    elif bid == 3:
        _copy(fns[3](t, z, th), vals, row)
    elif bid == 4:
        _copy(fns[4](t, z, th), vals, row)
    elif bid == 5:
        _copy(fns[5](t, z, th), vals, row)
    elif bid == 6:
        _copy(fns[6](t, z, th), vals, row)
    elif bid == 7:
        vals[row, 0] = fns[7](t, z, th)
    elif bid == 8:
        _copy(fns[8](t, z, th), vals, row)
    elif bid == 9:
        _copy(fns[9](t, z, th), vals, row)
    elif bid == 10:
        _copy(fns[10](t, z, th), vals, row)
    elif bid == 11:
        _copy(fns[11](t, z, th), vals, row)
    elif bid == 12:
        _copy(fns[12](t, z, th), vals, row)
    elif bid == 13:
        _copy(fns[13](t, z, th), vals, row)
    elif bid == 14:
        vals[row, 0] = fns[14](z)
    elif bid == 15:
        _copy(fns[15](z), vals, row)
    elif bid == 16:
        _copy(fns[16](z), vals, row)
    elif bid == 17:
        _copy(fns[17](z), vals, row)
    elif bid == 18:
        _copy(fns[18](t, z, th), vals, row)
    else:
        _copy(fns[19](t, z, th), vals, row)


@_inner
def _nested(fns, bid, L, hr, dvar, didx, d, t, z, th, S, pz, pt, hs, vals):
    """Nested central differences of the base function along direction ``d``; the
    result is ``vals[0, :S]``. Heap-ordered tree: node i has children 2i + 1 (+h) and
    2i + 2 (-h); the outermost difference is taken at the root, as in the numpy rule."""
    N = z.shape[0]
    M = th.shape[0]
    for i in range(N):
        pz[0, i] = z[i]
    for i in range(M):
        pt[0, i] = th[i]
    for lev in range(L):
        v = dvar[d, lev]
        j = didx[d, lev]
        for node in range((1 << lev) - 1, (1 << (lev + 1)) - 1):
            c1 = 2 * node + 1
            c2 = c1 + 1
            for i in range(N):
                pz[c1, i] = pz[node, i]
                pz[c2, i] = pz[node, i]
            for i in range(M):
                pt[c1, i] = pt[node, i]
                pt[c2, i] = pt[node, i]
            if v == 0:
                u = pz[node, j]
            else:
                u = pt[node, j]
            h = _step_size(hr, u)
            hs[node] = h
            if v == 0:
                pz[c1, j] = u + h
                pz[c2, j] = u - h
            else:
                pt[c1, j] = u + h
                pt[c2, j] = u - h
    for leaf in range((1 << L) - 1, (1 << (L + 1)) - 1):
        call_base(fns, bid, t, pz[leaf], pt[leaf], vals, leaf)
    for node in range((1 << L) - 2, -1, -1):
        h = hs[node]
        c1 = 2 * node + 1
        for i in range(S):
            vals[node, i] = _central_quotient(vals[c1, i], vals[c1 + 1, i], h)


@_inner
def eval_request(fns, plan, r, t, z, th, pz, pt, hs, vals, out):
    """Taylor coefficients of request ``r`` at one point into ``out`` (see _plans)."""
    (req_start, base, levels, h_rel, base_size, dir_start, dir_var, dir_idx,
     gather_start, dest, entry, fact) = plan
    for i in range(out.shape[0]):
        out[i] = 0.0
    for pc in range(req_start[r], req_start[r + 1]):
        bid = base[pc]
        if bid < 0:
            continue
        L = levels[pc]
        S = base_size[pc]
        for d in range(dir_start[pc], dir_start[pc + 1]):
            if L == 0:
                call_base(fns, bid, t, z, th, vals, _IDS[0])
            else:
                _nested(fns, bid, L, h_rel[pc], dir_var, dir_idx, d, t, z, th, S,
                        pz, pt, hs, vals)
            for g in range(gather_start[d], gather_start[d + 1]):
                out[dest[g]] = vals[0, entry[g]] / fact[g]


@_inner
def _plan_scratch(plan, N, M):
    """Per-sample scratch of `eval_request`: the nested-difference tree's points (z and
    theta), steps, and base-function values."""
    nodes = 1 << (plan[6].shape[1] + 1)
    smax = 1
    for i in range(plan[4].shape[0]):
        if plan[4][i] > smax:
            smax = plan[4][i]
    return np.empty((nodes, N)), np.empty((nodes, M)), np.empty(nodes), np.empty((nodes, smax))


# -- one request at many rows ---------------------------------------------------------


def request_rows(ev, fns, plan, r, ts, Z, TH, out, span):
    """Request ``r`` of the plan at every row ``(ts[i], Z[i], TH[i])`` of the chunk
    ``span = (lo, hi, c)`` (rows ``lo`` to ``hi - 1``; `invimbed._backends._chunks.run_rows`)
    into ``out[i]``: the values of ``f`` and ``R`` that
    `invimbed._core.sweep.assembly.depth_gradient` needs, without a Python call per row."""
    for i in range(span[0], span[1]):
        pz, pt, hs, vals = _plan_scratch(plan, Z.shape[1], TH.shape[1])
        ev(fns, plan, r, ts[i], Z[i], TH[i], pz, pt, hs, vals, out[i])


# -- stand-ins for functions a problem does not give (never called) ---------------------


@njit(cache=True)
def _absent_tz0(t, z, th):
    return 0.0


@njit(cache=True)
def _absent_tz1(t, z, th):
    return np.zeros(1)


@njit(cache=True)
def _absent_tz2(t, z, th):
    return np.zeros((1, 1))


@njit(cache=True)
def _absent_tz3(t, z, th):
    return np.zeros((1, 1, 1))


@njit(cache=True)
def _absent_tz4(t, z, th):
    return np.zeros((1, 1, 1, 1))


@njit(cache=True)
def _absent_tz5(t, z, th):
    return np.zeros((1, 1, 1, 1, 1))


@njit(cache=True)
def _absent_T0(z):
    return 0.0


@njit(cache=True)
def _absent_T1(z):
    return np.zeros(1)


@njit(cache=True)
def _absent_T2(z):
    return np.zeros((1, 1))


@njit(cache=True)
def _absent_T3(z):
    return np.zeros((1, 1, 1))


#: The stand-ins by name (`invimbed._backends._numba._dummy_name`).
ABSENT = {"tz0": _absent_tz0, "tz1": _absent_tz1, "tz2": _absent_tz2, "tz3": _absent_tz3,
          "tz4": _absent_tz4, "tz5": _absent_tz5, "T0": _absent_T0, "T1": _absent_T1,
          "T2": _absent_T2, "T3": _absent_T3}
