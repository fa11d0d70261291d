"""Numba kernel of ``backend="numba"`` (imported only when numba is installed): the
fixed-step sweep of the jet of order 1.

The jet's right-hand side (`jet_rhs`) is `invimbed._core.closures.JetClosure`'s, one
sample at a time, on the same index tables (`invimbed._core.derivatives.multiindex`);
the fields and the depth gradient of each recorded depth are assembled by the core
(`invimbed._core.sweep.assembly.collect_results`) from what `_jet_record` writes. Derivatives
come from `invimbed._backends._numba_calls.eval_request` (passed in as a function value);
a problem with exact expressions passes its generated jet right-hand side instead
(`invimbed._core.derivatives._jet_code`, a function value too), which replaces both.

Everything here is compiled once per machine (``cache=True``): user functions reach the
kernels as first-class function values of fixed signatures (``numba.types.FunctionType``),
so the kernels' types, and their cache entries, do not depend on which functions they
are given. The loop `jet_sweep` runs one chunk of the batch (the chunks on threads:
`invimbed._backends._chunks.run_rows`) and sweeps one sample at a time through every step, writing into preallocated outputs; derivatives follow a
`invimbed._backends._plans.Plan`.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ._numba_calls import _IDS, _inner, _plan_scratch
from ._packed import order_tables


@_inner
def _blew_up(a, fail_pos, fail_p, b, pos, p):
    """Whether ``a`` holds a non-finite value; if so, record for sample ``b`` where (the
    position code that `invimbed._backends._result.finish` decodes) and at which depth."""
    if _all_finite(a):
        return False
    fail_pos[b] = pos
    fail_p[b] = p
    return True


@_inner
def _all_finite(a):
    for i in range(a.shape[0]):
        if not np.isfinite(a[i]):
            return False
    return True


@njit(cache=True)
def _stage_input(y, Ks, A, s, h, ys):
    """``ys = y + h sum_{j<s} A[s, j] Ks[j]``, added in the order of the numpy sweep
    (`invimbed._core.runtime.ordered.combine`)."""
    for i in range(y.shape[0]):
        acc = 0.0
        for j in range(s):
            acc += A[s, j] * Ks[j, i]
        ys[i] = y[i] + h * acc if s else y[i]


@njit(cache=True)
def _step(y, Ks, Wts, h):
    """``y += h sum_j Wts[j] Ks[j]`` in place, in the order of the numpy sweep."""
    for i in range(y.shape[0]):
        acc = 0.0
        for j in range(Wts.shape[0]):
            acc += Wts[j] * Ks[j, i]
        y[i] = y[i] + h * acc


# -- the jet closure ---------------------------------------------------------------------


@njit(cache=True)
def operator_size(N, tab):
    """How many products `_operator` can list for the tables ``tab`` of one order (both
    transports: the pairs of ``zptr`` and ``vptr``, for each of the N variables)."""
    return N * (tab[13][-1] + tab[14][-1])


@njit(cache=True)
def jet_scratch(N, nw, cmax, sizes):
    """The scratch of `jet_rhs` beyond the coefficients, for jets of as many orders as
    ``sizes`` (each order's `operator_size`): the products of each order's transports
    (`_operator`: ``isrc``, ``iout``, ``val``, the orders' lists one after the other; per
    order ``meta`` = the first and last product of Z's and of V's list and whether they
    are built), the rows that are not zero (``rl``, ``pos``, ``tops``, ``cnt``), their
    coefficients (``Ut``) and products (``Ob``), and the dense products' ``Mt``."""
    rows = max(N, nw + 1)
    n_orders = sizes.shape[0]
    meta = np.zeros((n_orders, 5), np.int64)
    for o in range(1, n_orders):
        meta[o, 0] = meta[o - 1, 0] + sizes[o - 1]
    cap = meta[n_orders - 1, 0] + sizes[n_orders - 1]
    return (np.empty(cap, np.int64), np.empty(cap, np.int64), np.empty(cap),
            meta, np.empty(rows, np.int64),
            np.empty(rows, np.int64), np.empty(rows, np.int64), np.empty(cmax, np.int64),
            np.empty(cmax * rows), np.empty(cmax * rows), np.empty(N * N))


@_inner
def _operator(Phi, lphi, src, fac, ptr, ib, io, isrc, iout, val, k):
    """The products of ``grad_x U . Phi`` as a list from entry ``k`` on: coefficient
    ``isrc`` of a row of ``U``, times ``val``, adds to its coefficient ``iout`` (the
    product table's pairs with a nonzero ``Phi[i, b]``; ``Phi[i]`` is zero from
    ``lphi[i]`` on, and the pairs of each left coefficient, ``ptr``, ascend in ``ib``).
    Returns the end of the list. The list depends on ``Phi`` only: it is built once for
    as long as ``Phi`` stays (a control piece of an autonomous problem)."""
    N = Phi.shape[0]
    nd = ptr.shape[0] - 1
    for i in range(N):
        lb = lphi[i]
        for a in range(nd):
            sa = src[i, a]
            f = fac[i, a]
            for p in range(ptr[a], ptr[a + 1]):
                b = ib[p]
                if b >= lb:
                    break
                ph = Phi[i, b]
                if ph != 0.0:
                    isrc[k] = sa
                    iout[k] = io[p]
                    val[k] = f * ph
                    k += 1
    return k


@_inner
def _transport(y, uoff, rows, ucols, Phi, lphi, src, fac, D, beg, end, ops):
    """Coefficients of ``grad_x U . Phi`` for the rows of ``U`` (stored in ``y`` from
    ``uoff``, ``rows`` x ``ucols``) into ``ops``' ``Ob`` (coefficient ``c`` of the
    ``k``-th row listed at ``c * na + k``; returns ``na``). The rows that are not all
    zero are listed (``rl``; ``pos[r]``: row ``r``'s place there, -1 if left out: the
    parameter rows of control pieces not reached) by their last nonzero coefficient,
    descending (``tops``), so that each product of `_operator`'s list ``beg:end`` is
    taken at once for the rows where its coefficient can be nonzero (``cnt[c]`` of
    them: the degrees of ``W`` that an affine ``Phi`` keeps zero are skipped). The
    products of two coefficients of degree 1 (the table ``D``, none where it is (0, 0))
    are one dense N x N product per row with such coefficients (for ``V``:
    ``A^T P + P A``). The sums differ from the numpy closure's only in their order."""
    isrc, iout, val, meta, rl, pos, tops, cnt, Ut, Ob, Mt = ops
    na = 0
    for r in range(rows):
        pos[r] = -1
        t = ucols
        while t > 0 and y[uoff + r * ucols + t - 1] == 0.0:
            t -= 1
        if t == 0:
            continue
        k = na
        while k > 0 and tops[k - 1] < t:
            rl[k] = rl[k - 1]
            tops[k] = tops[k - 1]
            k -= 1
        rl[k] = r
        tops[k] = t
        na += 1
    k = na
    for c in range(ucols):
        while k > 0 and tops[k - 1] <= c:
            k -= 1
        cnt[c] = k
    for k in range(na):
        pos[rl[k]] = k
        base = uoff + rl[k] * ucols
        for c in range(tops[k]):        # the rest is never read (cnt)
            Ut[c * na + k] = y[base + c]
    for m in range(ucols * na):
        Ob[m] = 0.0
    una = np.uint64(na)             # unsigned indices: no wraparound, the loop vectorises
    for t in range(beg, end):
        s = isrc[t]
        n = cnt[s]
        if n == 0:
            continue
        su = np.uint64(s) * una
        o = np.uint64(iout[t]) * una
        v = val[t]
        for k in range(np.uint64(n)):
            Ob[o + k] += v * Ut[su + k]
    n1 = D.shape[0]
    N = Phi.shape[0]
    for k in range(na if n1 else 0):
        if tops[k] <= 1 + n1:       # no coefficient of degree 2 or more: none of degree
            continue                # 1 in grad_x U (the coefficients are graded)
        base = uoff + rl[k] * ucols
        for m in range(n1 * n1):
            Mt[m] = 0.0
        for i in range(N):
            nb = np.uint64(max(0, min(n1, lphi[i] - 1)))
            ph = Phi[i]
            for j in range(n1):
                g = y[base + src[i, 1 + j]] * fac[i, 1 + j]
                mj = np.uint64(j * n1)
                for m in range(nb):
                    Mt[mj + m] += g * ph[m + np.uint64(1)]
        for j in range(n1):
            for m in range(n1):
                Ob[D[j, m] * na + k] += Mt[j * n1 + m]
    return na


@njit(cache=True)
def jet_rhs(N, nw, cZ, cV, tab, Phi, Rc, G, Rw, y, off, dy, ops, o, Lam, Sw, act, lens, u):
    """dy/dp of one jet (Z of degree K, V and W of degree K + 1) at one sample; the jet
    is stored from ``off``: Z (N, cZ), V (cV), W (nw, cV). ``Phi[i]`` is zero from
    coefficient ``lens[0, i]`` on, ``G[i, w]`` from ``lens[1, i]`` on (the caller's
    bounds: a tape's `lengths`, or the full length). ``ops`` is `jet_scratch`, ``o`` this
    order's row of its ``meta``: the products of the transports of Z and of V with W
    (`_operator`) are listed there unless that row says they are built (the caller
    clears it where ``Phi`` changes). Scratch: ``Lam`` (N, cmax), ``Sw`` (nw, cmax),
    ``act`` (integers, max(N, nw + 1)) and ``u`` (max(N, nw + 1),). The rows of ``Z``,
    and ``V`` with the parameter rows ``W``, are transported together (`_transport`);
    the parameter source skips the parameters whose gradient coefficient is zero."""
    (zsrc, zfac, zia, zib, zio, vsrc, vfac, via, vib, vio, sia, sib, sio,
     zptr, vptr, sptr, zD, vD) = tab
    isrc, iout, val, meta, rl, pos, tops, cnt, Ut, Ob, Mt = ops
    mo = meta[o]
    lphi = lens[0]
    if mo[4] == 0:
        mo[1] = _operator(Phi, lphi, zsrc, zfac, zptr, zib, zio, isrc, iout, val, mo[0])
        mo[2] = mo[1]
        mo[3] = _operator(Phi, lphi, vsrc, vfac, vptr, vib, vio, isrc, iout, val, mo[2])
        mo[4] = 1
    oV = off + N * cZ
    oW = oV + cV
    na = _transport(y, off, N, cZ, Phi, lphi, zsrc, zfac, zD, mo[0], mo[1], ops)
    for i in range(N):
        k = pos[i]
        for c in range(cZ):
            dy[off + i * cZ + c] = -Ob[c * na + k] if k >= 0 else 0.0
    R1 = 1 + nw
    na = _transport(y, oV, R1, cV, Phi, lphi, vsrc, vfac, vD, mo[2], mo[3], ops)
    k = pos[0]
    for c in range(cV):
        dy[oV + c] = -((Ob[c * na + k] if k >= 0 else 0.0) + Rc[c])
    if nw:
        for i in range(N):              # Lam = grad V, of degree K
            for c in range(cZ):
                Lam[i, c] = y[oV + vsrc[i, c]] * vfac[i, c]
        sw = Sw.reshape(Sw.size)        # flat: coefficient c of row w at c * nw + w
        for m in range(cV * nw):
            sw[m] = 0.0
        for i in range(N):
            for a in range(min(cV, lens[1, i])):
                nn = 0                  # the parameters where this coefficient is nonzero
                for w in range(nw):
                    g = G[i, w, a]
                    if g != 0.0:
                        u[nn] = g
                        act[nn] = w
                        nn += 1
                if nn == 0:
                    continue
                for p in range(sptr[a], sptr[a + 1]):
                    lam = Lam[i, sib[p]]
                    base = sio[p] * nw
                    for m in range(nn):
                        sw[base + act[m]] += u[m] * lam
        for w in range(nw):
            k = pos[1 + w]
            for c in range(cV):
                tr = Ob[c * na + k] if k >= 0 else 0.0
                dy[oW + w * cV + c] = -(tr + (sw[c * nw + w] + Rw[w, c]))


@_inner
def _jet_coefficients(ev, fns, plan, N, M, nw, CF, CW, t, x, th, J, pz, pt, hs, vals,
                      fbuf, rbuf, gbuf, rwbuf, Phi, Rc, G, Rw):
    ev(fns, plan, _IDS[0], t, x, th, pz, pt, hs, vals, fbuf)
    ev(fns, plan, _IDS[1], t, x, th, pz, pt, hs, vals, rbuf)
    for i in range(N):
        for c in range(CF):
            Phi[i, c] = fbuf[i * CF + c]
    for c in range(CF):
        Rc[c] = rbuf[c]
    if nw:
        ev(fns, plan, _IDS[2], t, x, th, pz, pt, hs, vals, gbuf)
        ev(fns, plan, _IDS[3], t, x, th, pz, pt, hs, vals, rwbuf)
        for i in range(N):
            for w in range(nw):
                for c in range(CW):
                    s = 0.0
                    for m in range(M):
                        s += gbuf[(i * M + m) * CW + c] * J[m, w]
                    G[i, w, c] = s
        for w in range(nw):
            for c in range(CW):
                s = 0.0
                for m in range(M):
                    s += rwbuf[m * CW + c] * J[m, w]
                Rw[w, c] = s


def jet_sweep(one, ev, fns, plan, jet, ti, tf, tm, fixed, res, code, coded, jr, span):
    """Jet sweep of the samples ``lo`` to ``hi - 1`` of the chunk ``span = (lo, hi, c)``
    (see the module docstring and JetClosure; `invimbed._backends._chunks.run_rows`)."""
    for b in range(span[0], span[1]):
        one(np.int64(b), ev, fns, plan, jet, ti, tf, tm, fixed, res, code, coded, jr)


@njit(cache=True)
def no_code(t, x, th, J, y, dy, offs, n):
    """The stand-in for a problem without generated jet code (never called)."""


@_inner
def _jet_sweep_one(b, ev, fns, plan, jet, ti, tf, tm, fixed, res, code, coded, jr):
    """The jet sweep of sample ``b`` (see JetClosure): Z, V, W of each carried order (1,
    and 2 with the error estimate: ``jet``, a `invimbed._backends._bundles.Jet`; the
    tables of the first and the last packed in ``ti``, ``tf``, ``tm``, `order_tables`),
    stepped by the tableau of the schedule ``fixed`` (`Fixed`) or by the paper's layer
    recursion (its ``disc``), into ``res`` (`FixedOut`). Each right-hand side is the
    problem's generated jet code (``code``, `invimbed._core.derivatives._jet_code`) where
    it has one (``coded``), else its Taylor coefficients (`_jet_coefficients`)
    contracted by `jet_rhs`, called as the function value ``jr`` (numba then does not
    link and optimise its code into this function again)."""
    x, q, N, M, nw, CF, CW, cZs, cVs, offs, size = jet
    tab_lo = order_tables(ti, tf, tm, _IDS[0])
    tab_hi = order_tables(ti, tf, tm, _IDS[1])
    stage_p, step_h, thetas, jacs, A, Wts, record, rec0, disc = fixed
    out_z, out_v, out_a, out_w, err_z, err_v, err_a, err_w, fail_pos, fail_p = res
    n_orders = cZs.shape[0]
    S = A.shape[0]
    n_steps = step_h.shape[0]
    xb = x[b]
    pz, pt, hs, vals = _plan_scratch(plan, N, M)
    fbuf = np.empty(N * CF)
    rbuf = np.empty(CF)
    gbuf = np.empty(N * M * CW)
    rwbuf = np.empty(M * CW)
    Phi = np.empty((N, CF))
    Rc = np.empty(CF)
    G = np.empty((N, nw, CW))
    Rw = np.empty((nw, CW))
    cmax = cVs[n_orders - 1]
    sizes = np.full(n_orders, operator_size(N, tab_hi))
    sizes[0] = operator_size(N, tab_lo)
    ops = jet_scratch(N, nw, cmax, sizes)
    meta = ops[3]
    Lam = np.empty((N, cmax))
    Sw = np.empty((nw, cmax))
    act = np.empty(max(N, nw + 1), np.int64)
    lens = np.empty((2, N), np.int64)
    lens[0, :] = CF
    lens[1, :] = CW
    ubuf = np.empty(max(N, nw + 1))
    y = np.zeros(size)
    ys = np.empty(size)
    Ks = np.empty((S + 2, size))  # disc uses three rows
    tbuf = np.empty(CF)
    zero_th = np.zeros(M)
    # initial state: Z = x + delta, V = Taylor coefficients of T, W = 0
    ev(fns, plan, _IDS[4], q, xb, zero_th, pz, pt, hs, vals, tbuf)
    for o in range(n_orders):
        cZ = cZs[o]
        cV = cVs[o]
        off = offs[o]
        for i in range(N):
            y[off + i * cZ] = xb[i]
            y[off + i * cZ + 1 + i] = 1.0
        for c in range(cV):
            y[off + N * cZ + c] = tbuf[c]
    failed = False
    if rec0 >= 0:
        _jet_record(N, nw, cZs, cVs, offs, n_orders, y, rec0, b,
                    out_z, out_v, out_a, out_w, err_z, err_v, err_a, err_w)
    for k in range(n_steps):
        h = step_h[k]
        if disc:
            p = stage_p[k, 0]
            cZ = cZs[0]
            cV = cVs[0]
            off = offs[0]
            if coded:
                code(p, xb, thetas[k, 0], jacs[k, 0], y, Ks[0], offs, _IDS[1])
            else:
                _jet_coefficients(ev, fns, plan, N, M, nw, CF, CW, p, xb, thetas[k, 0],
                                  jacs[k, 0], pz, pt, hs, vals, fbuf, rbuf, gbuf, rwbuf, Phi,
                                  Rc, G, Rw)
                meta[:, 4] = 0                          # Phi is new
                jr(N, nw, cZ, cV, tab_lo, Phi, Rc, G, Rw, y, off, Ks[0], ops, _IDS[0], Lam,
                   Sw, act, lens, ubuf)
            for i in range(size):
                Ks[1, i] = y[i] + h * Ks[0, i]          # upd
                ys[i] = y[i]                            # mixed
            oV = off + N * cZ
            oW = oV + cV
            for c in range(1 + N, cV):                  # degree 2 of V from upd
                if c < 1 + N + N * (N + 1) // 2:
                    ys[oV + c] = Ks[1, oV + c]
            for w in range(nw):                          # degree 1 of W from upd
                for c in range(1, 1 + N):
                    ys[oW + w * cV + c] = Ks[1, oW + w * cV + c]
            if coded:                                   # the same coefficients again
                code(p, xb, thetas[k, 0], jacs[k, 0], ys, Ks[2], offs, _IDS[1])
            else:
                jr(N, nw, cZ, cV, tab_lo, Phi, Rc, G, Rw, ys, off, Ks[2], ops, _IDS[0], Lam,
                   Sw, act, lens, ubuf)
            for c in range(1, 1 + N):
                Ks[1, oV + c] = y[oV + c] + h * Ks[2, oV + c]
            for w in range(nw):
                Ks[1, oW + w * cV] = y[oW + w * cV] + h * Ks[2, oW + w * cV]
            for i in range(size):
                y[i] = Ks[1, i]
            if _blew_up(y, fail_pos, fail_p, b, 2 * (k * (S + 1) + S), p):
                failed = True
                break
        else:
            p0 = stage_p[k, 0]
            for s in range(S):
                p = stage_p[k, s]
                _stage_input(y, Ks, A, s, h, ys)
                if _blew_up(ys, fail_pos, fail_p, b, 2 * (k * (S + 1) + s), p):
                    failed = True
                    break
                if coded:
                    code(p, xb, thetas[k, s], jacs[k, s], ys, Ks[s], offs, n_orders)
                else:
                    _jet_coefficients(ev, fns, plan, N, M, nw, CF, CW, p, xb, thetas[k, s],
                                      jacs[k, s], pz, pt, hs, vals, fbuf, rbuf, gbuf, rwbuf,
                                      Phi, Rc, G, Rw)
                    meta[:, 4] = 0                      # Phi is new
                    for o in range(n_orders):
                        tab = tab_lo if o == 0 else tab_hi
                        jr(N, nw, cZs[o], cVs[o], tab, Phi, Rc, G, Rw, ys, offs[o], Ks[s],
                           ops, o, Lam, Sw, act, lens, ubuf)
                if _blew_up(Ks[s], fail_pos, fail_p, b, 2 * (k * (S + 1) + s) + 1, p):
                    failed = True
                    break
            if failed:
                break
            _step(y, Ks, Wts, h)
            if _blew_up(y, fail_pos, fail_p, b, 2 * (k * (S + 1) + S), p0 + h):
                failed = True
                break
        if record[k] >= 0:
            _jet_record(N, nw, cZs, cVs, offs, n_orders, y, record[k], b,
                        out_z, out_v, out_a, out_w, err_z, err_v, err_a, err_w)


@_inner
def _jet_record(N, nw, cZs, cVs, offs, n_orders, y, d, b, out_z, out_v, out_a, out_w,
                err_z, err_v, err_a, err_w):
    """The fields of the jet at depth ``d`` (sample ``b``): z, V, Lam and W are the
    constant and linear Taylor coefficients (the core adds the depth gradient); with the
    estimate, their distance from the next order's."""
    out_v[d, b] = _jet_fields(N, nw, cZs[0], cVs[0], offs[0], y, out_z[d, b], out_a[d, b],
                              out_w[d, b])
    if n_orders > 1:            # the next order's fields, then their distance
        v = _jet_fields(N, nw, cZs[1], cVs[1], offs[1], y, err_z[d, b], err_a[d, b],
                        err_w[d, b])
        for i in range(N):
            err_z[d, b, i] = abs(err_z[d, b, i] - out_z[d, b, i])
            err_a[d, b, i] = abs(err_a[d, b, i] - out_a[d, b, i])
        err_v[d, b] = abs(v - out_v[d, b])
        for w in range(nw):
            err_w[d, b, w] = abs(err_w[d, b, w] - out_w[d, b, w])


@_inner
def _jet_fields(N, nw, cZ, cV, off, y, z, a, w):
    """One order's z, Lam and W (the jet ``y`` laid out from ``off`` with ``cZ``, ``cV``
    coefficients per component) into ``z``, ``a``, ``w``; returns V."""
    oV = off + N * cZ
    for i in range(N):
        z[i] = y[off + i * cZ]
        a[i] = y[oV + 1 + i]
    for k in range(nw):
        w[k] = y[oV + cV + k * cV]
    return y[oV]
