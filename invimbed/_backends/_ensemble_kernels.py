"""Numba kernel of the ensemble adjoint (``solve_adjoint(backend="numba")``).

One row (a depth ``p`` and an input ``x``) is integrated by `_row` from start to end:
the forward pass of ``y = [z, int R]`` from ``p`` to ``q`` with its dense output, the
terminal conditions and the backward pass of ``[lambda, mu]`` from ``q`` down to ``p`` on
that dense output (`invimbed._backends.ensemble_numba` adds the depth gradient with the
core's `depth_gradient`). `ensemble_rows` runs the rows of one chunk
(the chunks on threads: `invimbed._backends._chunks.run_rows`). `_integrate` is `invimbed._core.integrators.ensemble.integrate_rows` for one row: the
same decisions in the same order (scipy's first-step rule, step control, ``hit`` of a
stop and the re-evaluation there, non-finite stages as rejections, the underflow rule,
the step budget, Shampine's ``h |lambda|`` and the early stop of a stiff row), and
numpy's pairwise summation for the error norm, so that both agree to rounding (numpy's
matmul and einsum round a few of the sums differently: BLAS, fused multiply-adds).

Everything is compiled once per machine (``cache=True``). User functions and the
derivative evaluator (`invimbed._backends._numba_calls.eval_request`) arrive as
first-class function values, so the kernel's types do not depend on the problem. Row
codes are those of `invimbed._core.results.status.RowCode` and the constants of the step control
(safety, factors) are run-time arguments: a change in ``ensemble.py`` cannot leave a
stale cached kernel behind.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .._core.results.status import RowCode
from ._ensemble_parts import (_dense_z, _finite, _fmax, _fmin, _next_stop, _piece, _rms,
                              _sign, _sum_squares, dense_coefficient, grow_factor, initial_step,
                              initial_step_h0, scaled_error, shrink_factor, stage_state,
                              stiff_run, stiff_stops, weighted_step)
from ._numba_calls import _plan_scratch
from ._numba_calls import _inner_numpy as _inner   # only compiled code calls them

_jit = njit(cache=True, error_model="numpy")


#: Row codes of the kernel: `invimbed._core.results.status.RowCode`, as plain integers.
K_DONE, K_UNDERFLOW, K_NONFINITE, K_MAX_STEPS, K_RUNNING = (
    int(RowCode.DONE), int(RowCode.UNDERFLOW), int(RowCode.NONFINITE), int(RowCode.MAX_STEPS),
    int(RowCode.RUNNING))

#: The row code of a forward pass whose fixed dense buffer (the CUDA kernel's) filled up
#: (not a `RowCode`: the host runs such a row again with a larger buffer).
K_FULL = 100

#: Small integers as run-time values (numba would specialise callees on literals).
_IDS = np.arange(8, dtype=np.int64)

#: Requests of the plan (see `invimbed._backends.ensemble_numba`).
_F, _R, _FZ, _RZ, _FTH, _RTH, _T = 0, 1, 2, 3, 4, 5, 6
#: Where f, f_z, f_theta, R, R_z, R_theta sit in the function tuple (`_plans.BASE_KEYS`;
#: `ensemble_numba` checks `SLOTS` against it before it compiles the kernel).
_S_F, _S_FZ, _S_FTH, _S_R, _S_RZ, _S_RTH = 0, 1, 4, 7, 8, 11
SLOTS = {("f", 0, 0): _S_F, ("f", 1, 0): _S_FZ, ("f", 0, 1): _S_FTH, ("R", 0, 0): _S_R,
         ("R", 1, 0): _S_RZ, ("R", 0, 1): _S_RTH}


@_inner
def _differenced(req, t, z, th, fns, fd):
    """Request ``req`` of the plan by `eval_request` (the finite-difference rule of the
    numba sweep) into ``fd``'s buffer, in the plan's Taylor layout."""
    ev, plan, pz, pt, hs, vals, buf = fd
    ev(fns, plan, req, t, z, th, pz, pt, hs, vals, buf)
    return buf


@_inner
def _transposed_times(J, col, y, N, C, out):
    """``out[c] = sum_j J[j, col + c] y[j]`` for ``c < C`` (j in order): a Jacobian's
    transpose times the adjoint, ``f_z^T lam`` or ``f_theta^T lam``."""
    for c in range(C):
        acc = 0.0
        for j in range(N):
            acc += J[j, col + c] * y[j]
        out[c] = acc


@_inner
def _rhs(mode, t, y, piece, out, values, dense, nd, ptr, ctx):
    """The right-hand side of one row: forward (``mode == 0``) ``[f, R]``; backward
    ``[-(f_z^T lam + R_z), -((f_th^T lam + R_th) dtheta/dw)]`` at ``z(t)`` of the dense
    output; ``piece`` is the control's piece.

    ``how[k]`` says how derivative ``k`` (`_F` ... `_RTH`) is evaluated: >= 0, the
    function of the problem that is that derivative, called directly (``SLOTS``); -1,
    zero (a missing running loss); -2, by the plan (finite differences). Calling the
    function directly skips `eval_request`'s bookkeeping, which costs several times a
    small function's own time (measured 300 ns against 70 ns per call). ``ctx`` is
    ``(fns, how, N, M, nw, kq, fd, wk)`` (`_row`)."""
    fns, how, N, M, nw, kq, fd, wk = ctx
    th = values[piece]
    zbuf = wk[:N]
    if mode == 0:
        for i in range(N):
            zbuf[i] = y[i]
        if how[_F] >= 0:
            fv = fns[_S_F](t, zbuf, th)
            for i in range(N):
                out[i] = fv[i]
        else:
            buf = _differenced(_IDS[_F], t, zbuf, th, fns, fd)
            for i in range(N):
                out[i] = buf[i]
        h = how[_R]
        if h >= 0:
            out[N] = fns[_S_R](t, zbuf, th)
        elif h == -1:
            out[N] = 0.0
        else:
            out[N] = _differenced(_IDS[_R], t, zbuf, th, fns, fd)[0]
        return
    _dense_z(t, dense, nd, ptr, N, kq, zbuf)
    h = how[_FZ]             # f_z (N, N); the plan's layout is (N, 1 + N), column 0 unused
    if h >= 0:
        _transposed_times(fns[_S_FZ](t, zbuf, th), 0, y, N, N, out)
    else:
        buf = _differenced(_IDS[_FZ], t, zbuf, th, fns, fd)
        _transposed_times(buf[:N * (N + 1)].reshape((N, N + 1)), 1, y, N, N, out)
    h = how[_RZ]             # R_z (N,); the plan's layout is (1 + N,)
    if h >= 0:
        rz = fns[_S_RZ](t, zbuf, th)
        for i in range(N):
            out[i] = -(out[i] + rz[i])
    elif h == -1:
        for i in range(N):
            out[i] = -(out[i] + 0.0)
    else:
        buf = _differenced(_IDS[_RZ], t, zbuf, th, fns, fd)
        for i in range(N):
            out[i] = -(out[i] + buf[1 + i])
    if nw == 0:
        return
    gacc = wk[N:N + M]
    h = how[_FTH]            # f_theta (N, M), the same in the plan's layout
    if h >= 0:
        _transposed_times(fns[_S_FTH](t, zbuf, th), 0, y, N, M, gacc)
    else:
        buf = _differenced(_IDS[_FTH], t, zbuf, th, fns, fd)
        _transposed_times(buf[:N * M].reshape((N, M)), 0, y, N, M, gacc)
    for w in range(nw):
        out[N + w] = 0.0
    h = how[_RTH]            # R_theta (M,); dtheta/dw selects the piece's block of w
    if h >= 0:
        rw = fns[_S_RTH](t, zbuf, th)
        for m in range(M):
            out[N + piece * M + m] = -(gacc[m] + rw[m])
    elif h == -1:
        for m in range(M):
            out[N + piece * M + m] = -(gacc[m] + 0.0)
    else:
        buf = _differenced(_IDS[_RTH], t, zbuf, th, fns, fd)
        for m in range(M):
            out[N + piece * M + m] = -(gacc[m] + buf[m])


@_jit
def _grow(dense, nd):
    """``dense`` with twice the rows, the first ``nd`` copied."""
    new = np.empty((2 * dense.shape[0], dense.shape[1]))
    for k in range(nd):       # a loop: numba compiles slice assignments slowly
        for c in range(dense.shape[1]):
            new[k, c] = dense[k, c]
    return new


@_inner
def _integrate(mode, t0, t1, y, step, rk, dense, nd, ptr, ctx):
    """`integrate_rows` for one row, from ``t0`` to ``t1``, ``y`` updated in place, with
    the tableau, control and step control of ``step`` (the fields of
    `invimbed._backends._bundles.RowSteps`, in its order), the stage buffers ``rk =
    (K, f, y_new, ys, y_stiff, a)`` and ``_rhs(..., ctx)`` the right-hand side.

    One source for two targets: the numba CPU kernel (`_row`) and, compiled by
    `invimbed._backends._cuda_device.device` with `_rhs` and `_grow` replaced, the CUDA
    kernel (`invimbed._backends._cuda_ensemble_kernel`), whose dense buffer has a fixed
    capacity (its `_grow` returns it as it is: the row ends with `K_FULL` and the host runs
    it again with more).

    ``mode`` 0 (forward) records the dense output of every accepted step in ``dense``
    (grown by doubling); ``mode`` 1 (backward) reads it (``ptr``: `_dense_z`'s cursor).
    Returns ``(status, t, nsteps, nfev, h_lambda, dense, nd)``."""
    (A, Bw, C, E, P, knots, values, stops, rtol, atol, first_step, max_step, safety,
     min_factor, max_factor, max_steps, order, stiff, stiff_limit, stiff_window) = step
    K, f, y_new, ys, y_stiff, a = rk
    S = y.shape[0]
    ns = Bw.shape[0]
    kq = P.shape[1]
    exponent = -1.0 / (order + 1)
    ptr[0] = nd - 1 if nd > 0 else 0
    direction = _sign(t1 - t0)
    t = t0
    nsteps = 0
    nfev = 0
    h_lambda = 0.0
    run = 0           # accepted steps in a row at the stability limit (`stiff_run`)
    if direction == 0:
        return K_DONE, t, nsteps, nfev, h_lambda, dense, nd
    stop = _next_stop(t, t1, direction, stops)
    piece = _piece(knots, t, stop)
    _rhs(mode, t, y, piece, f, values, dense, nd, ptr, ctx)
    nfev += 1
    if not _finite(f):
        return K_NONFINITE, t, nsteps, nfev, h_lambda, dense, nd
    span = abs(stop - t)
    if first_step > 0:
        h = _fmin(first_step, span)
    else:   # scipy's select_initial_step, as `_initial_step`
        d1, h0 = initial_step_h0(y, f, rtol, atol, span, a)
        for i in range(S):
            ys[i] = y[i] + (h0 * direction) * f[i]
        _rhs(mode, t + h0 * direction, ys, piece, K[1], values, dense, nd, ptr, ctx)
        nfev += 1
        h = initial_step(y, f, K[1], rtol, atol, d1, h0, order, span, a)
    rejected = False
    last_bad = False
    while True:
        stop = _next_stop(t, t1, direction, stops)
        piece = _piece(knots, t, stop)
        min_step = 10.0 * abs(np.nextafter(t, direction * np.inf) - t)
        if rejected and h < min_step:
            status = K_NONFINITE if last_bad else K_UNDERFLOW
            return status, t, nsteps, nfev, h_lambda, dense, nd
        h_try = _fmin(_fmax(h, min_step), max_step)
        dist = abs(stop - t)
        hit = h_try >= dist
        ha = dist if hit else h_try
        t_new = stop if hit else t + direction * ha
        hstep = t_new - t
        for i in range(S):
            K[0, i] = f[i]
        for s in range(1, ns):
            stage_state(y, K, A, s, hstep, S, ys)
            _rhs(mode, t + C[s] * hstep, ys, piece, K[s], values, dense, nd, ptr, ctx)
            nfev += 1
            if s == stiff:
                for i in range(S):
                    y_stiff[i] = ys[i]
        weighted_step(y, K, Bw, ns, hstep, S, y_new)
        _rhs(mode, t_new, y_new, piece, K[ns], values, dense, nd, ptr, ctx)
        nfev += 1
        scaled_error(y, y_new, K, E, ns + 1, hstep, rtol, atol, S, a)
        norm = _rms(a)
        finite = np.isfinite(norm) and _finite(K[ns]) and _finite(y_new)
        accept = finite and norm < 1.0
        nsteps += 1
        if accept:
            factor = grow_factor(norm, rejected, safety, max_factor, exponent)
        elif finite:
            factor = shrink_factor(norm, safety, min_factor, exponent)
        else:
            factor = min_factor
        h = ha * factor
        rejected = not accept
        last_bad = not finite
        if accept:
            if mode == 0:     # dense output: t_old, h, y_old, Q = K^T P
                if nd == dense.shape[0]:
                    dense = _grow(dense, nd)
                    if nd == dense.shape[0]:    # a fixed buffer (the GPU's) is full
                        return K_FULL, t, nsteps, nfev, h_lambda, dense, nd
                dense[nd, 0] = t
                dense[nd, 1] = hstep
                for i in range(S):
                    dense[nd, 2 + i] = y[i]
                    for c in range(kq):
                        dense[nd, 2 + S + i * kq + c] = dense_coefficient(K, P, ns + 1, i, c)
                nd += 1
            if stiff >= 0:   # Shampine: |h| |K_last - K_stiff| / |y_new - y_stiff|
                for i in range(S):
                    a[i] = K[ns, i] - K[stiff, i]
                    ys[i] = y_new[i] - y_stiff[i]
                num_ = np.sqrt(_sum_squares(a))
                den_ = np.sqrt(_sum_squares(ys))
                h_lambda = abs(hstep) * num_ / den_ if den_ > 0 else 0.0
                run = stiff_run(run, h_lambda, stiff_limit)
            t = t_new
            for i in range(S):
                y[i] = y_new[i]
                f[i] = K[ns, i]
            if t_new == t1:
                return K_DONE, t, nsteps, nfev, h_lambda, dense, nd
            if hit:   # a stop: the next step starts from the next piece's derivative
                nxt = _next_stop(t, t1, direction, stops)
                _rhs(mode, t, y, _piece(knots, t, nxt), f, values, dense, nd, ptr, ctx)
                nfev += 1
                if not _finite(f):
                    return K_NONFINITE, t, nsteps, nfev, h_lambda, dense, nd
            if stiff >= 0 and stiff_stops(run, stiff_window, nsteps, abs(t1 - t), h, hstep,
                                          max_steps):
                return K_MAX_STEPS, t, nsteps, nfev, h_lambda, dense, nd
        if nsteps >= max_steps:
            return K_MAX_STEPS, t, nsteps, nfev, h_lambda, dense, nd


@_inner
def pass_out(r, k, st, nst, nfe, t_end, hl, out_status, out_steps, out_nfev, out_t,
             out_hl):
    """Row ``r``'s record of its pass ``k`` (0 forward, 1 backward; the backward adds its
    steps and evaluations to the forward's), in both kernels (`_row`, and the CUDA
    kernel through `invimbed._backends._cuda_device.device`)."""
    out_status[r, k] = st
    if k == 0:
        out_steps[r] = nst
        out_nfev[r] = nfe
    else:
        out_steps[r] += nst
        out_nfev[r] += nfe
    out_t[r] = t_end
    out_hl[r] = hl


@_inner
def row_out(r, zq, yb, value, N, nw, out_z, out_a, out_w, out_v):
    """Row ``r``'s fields once both passes are done: ``z(q)``, ``lambda(p)``, ``mu(p)``
    (``yb = [lambda, mu]``) and ``J``."""
    for i in range(N):
        out_z[r, i] = zq[i]
        out_a[r, i] = yb[i]
    for w in range(nw):
        out_w[r, w] = yb[N + w]
    out_v[r] = value


def ensemble_rows(one, ev, fns, plan, how, perm, rows, step, res, span):
    """The rows ``perm[lo]`` to ``perm[hi - 1]`` of the chunk ``span = (lo, hi, c)``
    (``perm``: the order that spreads long and short rows over the chunks); compiled by
    `invimbed._backends.ensemble_numba`, run by `invimbed._backends._chunks.run_rows`."""
    for j in range(span[0], span[1]):
        one(perm[j], ev, fns, plan, how, rows, step, res)


@_inner
def _row(r, ev, fns, plan, how, rows, step, res):
    """Row ``r = i B + b`` (depth ``depths[i]``, input ``X[b]``; ``rows``, a
    `invimbed._backends._bundles.Rows`): forward pass with dense output, terminal
    conditions, backward pass, stepped as ``step`` (`RowSteps`) says, into ``res``
    (`RowsOut`). Failed rows keep their NaN fields; ``out_status[r]`` holds the status
    of both passes.

    Memory: the dense output starts with room for 32 steps and doubles when full,
    ``2 + S + S kq`` floats per step (``S = N + 1``); it is freed when the row ends."""
    X, depths, q, N, M, nw = rows
    out_z, out_v, out_a, out_w, out_steps, out_nfev, out_status, out_t, out_hl = res
    B = X.shape[0]
    p = depths[r // B]
    x = X[r % B]
    values = step.values
    P = step.P
    ns = step.B.shape[0]
    kq = P.shape[1]
    pz, pt, hs, vals = _plan_scratch(plan, N, M)
    fd = (ev, plan, pz, pt, hs, vals, np.empty(N * (N + 1) + N * M + M + 1))
    wk = np.empty(N + M)
    S = N + 1
    Sb = N + nw
    dense = np.empty((32, 2 + S + S * kq))
    # forward: y = [z, int R] from p to q
    y = np.zeros(S)
    for i in range(N):
        y[i] = x[i]
    rk = (np.empty((ns + 1, S)), np.empty(S), np.empty(S), np.empty(S), np.empty(S),
          np.empty(S))
    ptr = np.zeros(1, dtype=np.int64)
    ctx = (fns, how, N, M, nw, kq, fd, wk)
    st, t_end, nst, nfe, hl, dense, nd = _integrate(
        _IDS[0], p, q, y, step, rk, dense, _IDS[0], ptr, ctx)
    pass_out(r, _IDS[0], st, nst, nfe, t_end, hl, out_status, out_steps, out_nfev, out_t,
             out_hl)
    if st != K_DONE:
        return
    zq = np.empty(N)
    for i in range(N):
        zq[i] = y[i]
    tz = np.empty(N + 1)
    ev(fns, plan, _IDS[_T], q, zq, values[0], pz, pt, hs, vals, tz)   # [T, T_z] at z(q)
    value = y[N] + tz[0]
    # backward: [lambda, mu] from q down to p
    yb = np.zeros(Sb)
    for i in range(N):
        yb[i] = tz[1 + i]
    rk = (np.empty((ns + 1, Sb)), np.empty(Sb), np.empty(Sb), np.empty(Sb), np.empty(Sb),
          np.empty(Sb))
    st, t_end, nst, nfe, hl, dense, nd = _integrate(
        _IDS[1], q, p, yb, step, rk, dense, nd, ptr, ctx)
    pass_out(r, _IDS[1], st, nst, nfe, t_end, hl, out_status, out_steps, out_nfev, out_t,
             out_hl)
    if st != K_DONE:
        return
    # the depth gradient: by the core, from the adjoint
    row_out(r, zq, yb, value, N, nw, out_z, out_a, out_w, out_v)
