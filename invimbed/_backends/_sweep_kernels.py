"""Numba kernel of the adaptive imbedding sweep (``backend="numba"``, ``method="RK45"`` or
``"RK23"``): one input's sweep from ``q`` down to the deepest depth, stepped as
`invimbed._core.integrators.scipy_ivp.integrate_scipy` steps scipy's ``RK45``/``RK23``.

The decisions are scipy's, in scipy's order: one solver per interval between the
control's breakpoints (a fresh first evaluation and ``select_initial_step`` at each), the
step-size rule of ``RungeKutta._step_impl`` with the constants of the ensemble
(`invimbed._core.integrators.ensemble`: ``SAFETY``, ``MIN_FACTOR``, ``MAX_FACTOR``, passed
in at run time; `_ensemble_parts.initial_step` and the step factors shared with the
ensemble kernel), the tableaux of `tableau.TABLEAUX`, the states at requested depths
from the step's continuous extension (scipy's ``RkDenseOutput``: ``y_old + h Q p(x)``,
``Q = K^T P``), a non-finite state or derivative ending the sweep where it appears (as
`invimbed._core.integrators.common.CountingRHS` ends it), the step budget and
``min_step``. The error norm is numpy's pairwise RMS (`_ensemble_parts._rms`), where
scipy calls BLAS's ``nrm2``: the two agree to rounding.

The jet's right-hand side is `invimbed._backends._numba_kernels.jet_rhs` (the numba
backend's, on the tables of `invimbed._core.derivatives.multiindex` that the numpy
closure uses), of every carried order (``K - 1`` for the ratio test, ``K``, ``K + 1``
for the estimate, ``K + 2`` for the look-ahead: `JetClosure.carried_orders`, blocks in
that order). Taylor coefficients of ``f``, ``R``, ``T`` come from the problem's
Taylor-mode tapes (`invimbed._core.derivatives._taylor_numba.run_row`, a ``from_sympy``
problem: any order, nothing compiled per problem) or, for per-sample user functions,
from a derivative plan (`invimbed._backends._numba_kernels._jet_coefficients`). Where
neither tape reads the time ``t`` (an autonomous problem), the coefficients at ``x``
depend on the depth only through the control, and are computed once per control piece,
and so is the list of the transports' products that `jet_rhs` takes from them
(`invimbed._backends._numba_kernels._operator`): within a piece the jet's equation is
linear with constant coefficients.
The fields at the requested depths are interpolated from the recorded entries of the
state only.

With ``cap > 0`` the first ``cap`` accepted steps of each input are kept for a dense
output: ``t_old``, ``h``, the state at the step's start and ``Q`` (see
`invimbed._backends.sweep_adaptive.SweepSteps`). Compiled once per machine
(``cache=True``).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .._core.derivatives._taylor_numba import lengths, uses_time
from .._core.results.status import RowCode
from ._ensemble_parts import (_finite, _fmin, _rms, dense_coefficient, grow_factor,
                              initial_step, initial_step_h0, scaled_error, shrink_factor,
                              stage_state, weighted_step)
from ._numba_calls import _IDS, _plan_scratch
from ._numba_calls import _inner_numpy as _inner   # only compiled code calls them
from ._numba_kernels import _jet_coefficients, jet_scratch, operator_size
from ._packed import order_tables, tape_arrays, tape_plan

_jit = njit(cache=True, error_model="numpy")


#: Codes of an input's sweep (`invimbed._backends.sweep_adaptive` words them): those of
#: `invimbed._core.results.status.RowCode`, as plain integers.
S_DONE, S_NONFINITE, S_FIRST, S_UNDERFLOW, S_MAX_STEPS, S_MIN_STEP = (
    int(RowCode.DONE), int(RowCode.NONFINITE), int(RowCode.FIRST), int(RowCode.UNDERFLOW),
    int(RowCode.MAX_STEPS), int(RowCode.MIN_STEP))


@_inner
def _tape_coefficients(cf, tape, N, M, nw, CF, t, xin, J, W, Phi, Rc, G, Rw):
    """Taylor coefficients of ``f`` and ``R`` (with the ``w``-gradients ``G``, ``Rw``) by
    the tapes of ``tape`` (`Tapes`, run by ``cf[0]``: `run_row`), at ``xin = [x, theta]``;
    the layout of
    `JetClosure.coefficients_at`. Returns whether they were computed (False: the control
    piece's, kept)."""
    Wf, Tf, fo, Wr, Tr, ro, Lf, Lr, memo = W
    if memo[0] and memo[1]:
        return False    # an autonomous problem: this control piece's coefficients are in
    memo[1] = 1
    ptr, ib, io = tape_plan(tape)
    F, Df = tape.F, tape.Df
    rr = cf[0]
    ft = tape_arrays(tape, _IDS[0])
    rt = tape_arrays(tape, _IDS[1])
    rr(ft[0], ft[1], ft[2], ft[3], t, xin, F, Df, ptr, ib, io, Wf, Tf, fo, Lf)
    rr(rt[0], rt[1], rt[2], rt[3], t, xin, F, Df, ptr, ib, io, Wr, Tr, ro, Lr)
    fout = ft[3]
    rout = rt[3][0]
    for i in range(N):          # zero from the tape's bounds (`lengths`) on
        for c in range(Lf[fout[i], 0]):
            Phi[i, c] = fo[i, 0, c]
    for c in range(Lr[rout, 0]):
        Rc[c] = ro[0, 0, c]
    for i in range(N):
        for w in range(nw):
            for c in range(Lf[fout[i], 1]):
                s = 0.0
                for m in range(M):
                    s += fo[i, 1 + m, c] * J[m, w]
                G[i, w, c] = s
    for w in range(nw):
        for c in range(Lr[rout, 1]):
            s = 0.0
            for m in range(M):
                s += ro[0, 1 + m, c] * J[m, w]
            Rw[w, c] = s
    return True


@_inner
def _rhs(t, y, dy, ev, fns, plan, cf, tape, N, M, nw, CF, CW, xin, J, cZs, cVs, offs, ti, tf,
         tm, sc, W):
    """``dy/dp`` of every carried jet at depth ``t``; False where ``y`` or ``dy`` is not
    finite (where `CountingRHS` raises). ``cf`` holds `run_row` and `jet_rhs` as function
    values (`invimbed._backends._function_values._calls`)."""
    if not _finite(y):
        return False
    jr = cf[1]
    (pz, pt, hs, vals, fbuf, rbuf, gbuf, rwbuf, Phi, Rc, G, Rw, ops, Lam, Sw, act, lens,
     u) = sc
    new = True
    if tape.use:
        new = _tape_coefficients(cf, tape, N, M, nw, CF, t, xin, J, W, Phi, Rc, G, Rw)
    else:
        _jet_coefficients(ev, fns, plan, N, M, nw, CF, CW, t, xin[:N], xin[N:], J, pz, pt,
                          hs, vals, fbuf, rbuf, gbuf, rwbuf, Phi, Rc, G, Rw)
    if new:             # the transports' products are listed afresh (`jet_rhs`)
        ops[3][:, 4] = 0
    for o in range(cZs.shape[0]):
        jr(N, nw, cZs[o], cVs[o], order_tables(ti, tf, tm, o), Phi, Rc, G, Rw, y, offs[o], dy,
           ops, o, Lam, Sw, act, lens, u)
    return _finite(dy)


@_inner
def _recorded(N, nw, cZs, cVs, offs):
    """Where in the state each recorded field is: ``idx[o * width + k]`` is entry ``k``
    of ``[z (N), value, adjoint (N), param_grad (nw)]`` of carried order ``o``."""
    width = 2 * N + 1 + nw
    idx = np.empty(cZs.shape[0] * width, np.int64)
    for o in range(cZs.shape[0]):
        oV = offs[o] + N * cZs[o]
        oW = oV + cVs[o]
        base = o * width
        for i in range(N):
            idx[base + i] = offs[o] + i * cZs[o]
            idx[base + N + 1 + i] = oV + 1 + i
        idx[base + N] = oV
        for w in range(nw):
            idx[base + 2 * N + 1 + w] = oW + w * cVs[o]
    return idx


@_inner
def _record(y, idx, out, d, b):
    """The fields of every carried order at depth row ``d`` of input ``b``:
    ``out[d, b, o] = [z (N), value, adjoint (N), param_grad (nw)]``."""
    width = out.shape[3]
    for k in range(idx.shape[0]):
        out[d, b, k // width, k % width] = y[idx[k]]


@_inner
def _record_f_r(fr_out, d, b, N, Phi, Rc):
    """``fr_out[d, b] = [f (N), R]`` at the input: the constant Taylor coefficients
    ``Phi[:, 0]``, ``Rc[0]`` (the core takes the depth gradient from them:
    `invimbed._core.sweep.assembly.depth_gradient_of`)."""
    for i in range(N):
        fr_out[d, b, i] = Phi[i, 0]
    fr_out[d, b, N] = Rc[0]


@_inner
def _record_dense(Qr, y_old, idx, t_old, h, p, out, d, b):
    """`_record` of scipy's ``RkDenseOutput`` at ``p``: ``y_old + h Q [x, x^2, ...]``,
    ``x = (p - t_old) / h``, for the recorded entries only (``Qr``: their rows of
    ``Q``)."""
    width = out.shape[3]
    x = (p - t_old) / h
    for k in range(idx.shape[0]):
        acc = 0.0
        pw = 1.0
        for j in range(Qr.shape[1]):
            pw = pw * x
            acc += Qr[k, j] * pw
        out[d, b, k // width, k % width] = h * acc + y_old[idx[k]]


def sweep_rows(one, ev, fns, plan, cf, tape, jet, ti, tf, tm, grid, step, res, ws, span):
    """The sweeps of the inputs ``lo`` to ``hi - 1`` of the chunk ``span = (lo, hi, c)``
    (compiled by `invimbed._backends.sweep_adaptive`, run by
    `invimbed._backends._chunks.run_rows`); the chunk's inputs share its slice ``c`` of the
    tapes' node storage ``ws = (ws_f, ws_r, ws_t)``."""
    for b in range(span[0], span[1]):
        one(np.int64(b), np.int64(span[2]), ev, fns, plan, cf, tape, jet, ti, tf, tm, grid,
            step, res, ws)


@_inner
def sweep_one(b, tid, ev, fns, plan, cf, tape, jet, ti, tf, tm, grid, step, res, ws):
    """The sweep of input ``b`` in the chunk ``tid`` (see the module docstring), with the
    bundles of `invimbed._backends._bundles`: ``tape`` (`Tapes`: the tapes of ``f``,
    ``R``, ``T``), ``jet`` (`Jet`), ``grid`` (`Grid`), ``step`` (`Stepper`), ``res``
    (`SweepOut`); ``ti``, ``tf``, ``tm`` hold the tables of the carried orders
    (`invimbed._backends._numba.packed_tables`: four, the last repeated; unpacked by
    `invimbed._backends._packed.order_tables`); ``ws[k][tid]`` is the
    node storage of tape ``k`` (zero where the tapes' `lengths` bound it, as `run_row`
    leaves it for the same tapes); ``cf`` holds `run_row`, `jet_rhs` and `_rhs` as
    function values (`_rhs`'s: `invimbed._backends._function_values.rhs_signature`;
    called directly at its four call sites, numba would link and optimise its code again
    into this function and pass its 23 arguments, the scratch ``sc`` and ``W`` of 40
    arrays among them, as some 300 scalars at each)."""
    rh = cf[2]
    c2 = (cf[0], cf[1])
    use_tape = tape.use
    tapes = (tape_arrays(tape, _IDS[0]), tape_arrays(tape, _IDS[1]), tape_arrays(tape, _IDS[2]))
    tplan = tape_plan(tape)
    F, Df = tape.F, tape.Df
    x, q, N, M, nw, CF, CW, cZs, cVs, offs, size = jet
    seg, seg_th, seg_J, depths, dep_seg = grid
    A, Bw, C, E, P = step.A, step.B, step.C, step.E, step.P
    rtol, atol, first_step, max_step = step.rtol, step.atol, step.first_step, step.max_step
    min_step, safety, min_factor, max_factor = (step.min_step, step.safety, step.min_factor,
                                                step.max_factor)
    max_steps, err_order, cap, q_same = step.max_steps, step.order, step.cap, step.q_same
    out, fr_out, info, where_out, d_t, d_h, d_y, d_Q = res
    ws_f, ws_r, ws_t = ws
    ns = Bw.shape[0]
    kq = P.shape[1]
    exponent = -1.0 / (err_order + 1)
    n = depths.shape[0]
    # scratch
    pz, pt, hs, vals = _plan_scratch(plan, N, M)
    n_o = cVs.shape[0]
    cmax = cVs[n_o - 1]
    sizes = np.empty(n_o, np.int64)
    for o in range(n_o):
        sizes[o] = operator_size(N, order_tables(ti, tf, tm, o))
    ops = jet_scratch(N, nw, cmax, sizes)
    sc = (pz, pt, hs, vals, np.empty(N * CF), np.empty(CF), np.empty(N * M * CW),
          np.empty(M * CW), np.zeros((N, CF)), np.zeros(CF), np.zeros((N, nw, CF)),
          np.zeros((nw, CF)), ops, np.empty((N, cmax)), np.empty((nw, cmax)),
          np.empty(max(N, nw + 1), np.int64), np.empty((2, N), np.int64),
          np.empty(max(N, nw + 1)))
    W = (ws_f[tid], np.zeros((Df + 5, CF + 2)), np.zeros((N, Df, CF)),
         ws_r[tid], np.zeros((Df + 5, CF + 2)), np.zeros((1, Df, CF)),
         lengths(tapes[0][0], tapes[0][2], F, N), lengths(tapes[1][0], tapes[1][2], F, N),
         np.zeros(2, np.int64))
    # Phi and G are zero beyond the tapes' bounds, or full (a derivative plan)
    lens = sc[16]
    for i in range(N):
        lens[0, i] = W[6][tapes[0][3][i], 0] if use_tape else CF
        lens[1, i] = W[6][tapes[0][3][i], 1] if use_tape else CW
    # f and R do not depend on t: their coefficients at x are those of the control piece
    # (computed at its first evaluation, kept until the next piece)
    if use_tape and not (uses_time(tapes[0][0], tapes[0][3])
                         or uses_time(tapes[1][0], tapes[1][3])):
        W[8][0] = 1
    # ... and f and R at x at a depth are then the piece's Phi[:, 0] and Rc[0], recorded
    # for the depth gradient (at q where theta(q) is the first piece's); the others are
    # left NaN, for the core to evaluate
    autonomous = W[8][0] == 1
    xin = np.zeros(N + M)
    for i in range(N):
        xin[i] = x[b, i]
    y = np.zeros(size)
    y_new = np.empty(size)
    ys = np.empty(size)
    f = np.empty(size)
    err = np.empty(size)
    K = np.empty((ns + 1, size))
    Q = np.empty((size, kq))
    # initial state: Z = x + delta, V = Taylor coefficients of T, W = 0
    tbuf = np.zeros(CF)
    if use_tape:
        tt = tapes[2]
        Wt = ws_t[tid]
        to = np.zeros((1, 1, CF))
        cf[0](tt[0], tt[1], tt[2], tt[3], q, xin, F, 1, tplan[0], tplan[1], tplan[2], Wt,
                np.zeros((6, CF + 2)), to, lengths(tt[0], tt[2], F, N))
        for c in range(CF):
            tbuf[c] = to[0, 0, c]
    else:
        ev(fns, plan, _IDS[4], q, xin[:N], xin[N:], pz, pt, hs, vals, tbuf)
    for o in range(cZs.shape[0]):
        cZ = cZs[o]
        off = offs[o]
        for i in range(N):
            y[off + i * cZ] = x[b, i]
            if cZ > 1:
                y[off + i * cZ + 1 + i] = 1.0
        for c in range(cVs[o]):
            y[off + N * cZ + c] = tbuf[c]
    nxt = _IDS[0]        # not a literal 0: `_record` is compiled for a variable row
    idx = _recorded(N, nw, cZs, cVs, offs)
    Qr = np.empty((idx.shape[0], kq))
    while nxt < n and dep_seg[nxt] < 0:      # depths at q
        _record(y, idx, out, nxt, b)
        nxt += 1
    evals = 0
    steps = 0
    h_abs = 0.0
    code = S_DONE
    where = q
    for s in range(seg.shape[0]):
        a = seg[s, 0]
        bnd = seg[s, 1]
        for m in range(M):
            xin[N + m] = seg_th[s, m]
        J = seg_J[s]
        W[8][1] = 0         # new piece: its coefficients are computed afresh
        t = a
        evals += 1
        if not rh(t, y, f, ev, fns, plan, c2, tape, N, M, nw, CF, CW, xin, J, cZs, cVs, offs,
                  ti, tf, tm, sc, W):
            code = S_FIRST if (a == q and evals <= 1) else S_NONFINITE
            where = t
            break
        if s == 0 and autonomous and q_same:
            for d in range(n):
                if dep_seg[d] >= 0:
                    break
                _record_f_r(fr_out, d, b, N, sc[8], sc[9])
        span = a - bnd
        if first_step > 0:
            h_abs = _fmin(first_step, span)
        else:       # scipy's select_initial_step
            d1, h0 = initial_step_h0(y, f, rtol, atol, span, err)
            for i in range(size):
                ys[i] = y[i] + (h0 * -1.0) * f[i]
            evals += 1
            if not rh(t - h0, ys, K[1], ev, fns, plan, c2, tape, N, M, nw, CF, CW, xin, J,
                      cZs, cVs, offs, ti, tf, tm, sc, W):
                code = S_NONFINITE
                where = t - h0
                break
            h_abs = min(initial_step(y, f, K[1], rtol, atol, d1, h0, err_order, span, err),
                        max_step)
        while code == S_DONE:
            if steps >= max_steps:
                code = S_MAX_STEPS
                where = t
                break
            spacing = 10.0 * abs(np.nextafter(t, -np.inf) - t)
            if h_abs > max_step:
                h_abs = max_step
            elif h_abs < spacing:
                h_abs = spacing
            accepted = False
            rejected = False
            while not accepted:
                if h_abs < spacing:
                    code = S_UNDERFLOW
                    where = t
                    break
                t_new = t - h_abs
                if t_new < bnd:
                    t_new = bnd
                h = t_new - t
                h_abs = abs(h)
                for i in range(size):
                    K[0, i] = f[i]
                for st in range(1, ns):
                    stage_state(y, K, A, st, h, size, ys)
                    evals += 1
                    if not rh(t + C[st] * h, ys, K[st], ev, fns, plan, c2, tape, N, M, nw, CF,
                              CW, xin, J, cZs, cVs, offs, ti, tf, tm, sc, W):
                        code = S_NONFINITE
                        where = t + C[st] * h
                        break
                if code != S_DONE:
                    break
                weighted_step(y, K, Bw, ns, h, size, y_new)
                evals += 1
                if not rh(t + h, y_new, K[ns], ev, fns, plan, c2, tape, N, M, nw, CF, CW, xin,
                          J, cZs, cVs, offs, ti, tf, tm, sc, W):
                    code = S_NONFINITE
                    where = t + h
                    break
                scaled_error(y, y_new, K, E, ns + 1, h, rtol, atol, size, err)
                norm = _rms(err)
                if norm < 1:
                    h_abs *= grow_factor(norm, rejected, safety, max_factor, exponent)
                    accepted = True
                else:
                    h_abs *= shrink_factor(norm, safety, min_factor, exponent)
                    rejected = True
            if code != S_DONE:
                break
            steps += 1
            t_old = t
            want = nxt < n and dep_seg[nxt] == s and depths[nxt] >= t_new
            keep = steps <= cap
            if keep:
                for i in range(size):
                    for c in range(kq):
                        Q[i, c] = dense_coefficient(K, P, ns + 1, i, c)
            if want:        # Q of the recorded entries only
                for k in range(idx.shape[0]):
                    i = idx[k]
                    for c in range(kq):
                        Qr[k, c] = dense_coefficient(K, P, ns + 1, i, c)
            if keep:
                d_t[b, steps - 1] = t_old
                d_h[b, steps - 1] = h
                for i in range(size):
                    d_y[b, steps - 1, i] = y[i]
                    for c in range(kq):
                        d_Q[b, steps - 1, i, c] = Q[i, c]
            while nxt < n and dep_seg[nxt] == s and depths[nxt] >= t_new:
                if depths[nxt] == t_new:
                    _record(y_new, idx, out, nxt, b)
                else:
                    _record_dense(Qr, y, idx, t_old, h, depths[nxt], out, nxt, b)
                if autonomous:
                    _record_f_r(fr_out, nxt, b, N, sc[8], sc[9])
                nxt += 1
            t = t_new
            for i in range(size):
                y[i] = y_new[i]
                f[i] = K[ns, i]
            if t == bnd:
                break
            if min_step > 0 and h_abs < min_step:
                code = S_MIN_STEP
                where = t
                break
        if code != S_DONE:
            break
    info[b, 0] = code
    info[b, 1] = evals
    info[b, 2] = steps
    where_out[b, 0] = where
    where_out[b, 1] = h_abs if code == S_MIN_STEP else np.nan
