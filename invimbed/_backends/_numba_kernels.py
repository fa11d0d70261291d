"""Numba kernels of the accelerated sweeps (imported only when numba is installed).

Everything here is compiled once per machine (``cache=True``): user functions reach the
kernels as first-class function values of fixed signatures (``numba.types.FunctionType``),
so the kernels' types, and their cache entries, do not depend on which functions they
are given. Each kernel loops over the batch with ``prange`` and sweeps one sample at a
time through every step, writing into preallocated outputs; derivatives follow a
`invimbed._backends._plans.Plan`.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

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


@njit(cache=True)
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


@njit(cache=True)
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
            a = abs(u)
            h = hr * (a if a > 1.0 else 1.0)
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
        dd = 2.0 * hs[node]
        c1 = 2 * node + 1
        for i in range(S):
            vals[node, i] = (vals[c1, i] - vals[c1 + 1, i]) / dd


@njit(cache=True)
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


@njit(cache=True)
def _blew_up(a, fail_pos, fail_p, b, pos, p):
    """Whether ``a`` holds a non-finite value; if so, record for sample ``b`` where (the
    position code that `invimbed._backends._numba.finish` decodes) and at which depth."""
    if _all_finite(a):
        return False
    fail_pos[b] = pos
    fail_p[b] = p
    return True


@njit(cache=True)
def _plan_scratch(plan, N, M):
    """Per-sample scratch of `eval_request`: the nested-difference tree's points (z and
    theta), steps, and base-function values."""
    nodes = 1 << (plan[6].shape[1] + 1)
    smax = 1
    for i in range(plan[4].shape[0]):
        if plan[4][i] > smax:
            smax = plan[4][i]
    return np.empty((nodes, N)), np.empty((nodes, M)), np.empty(nodes), np.empty((nodes, smax))


@njit(cache=True)
def _all_finite(a):
    for i in range(a.shape[0]):
        if not np.isfinite(a[i]):
            return False
    return True


@njit(cache=True)
def _stage_input(y, Ks, A, s, h, ys):
    """``ys = y + h sum_{j<s} A[s, j] Ks[j]``, added in the order of the numpy sweep
    (`invimbed._core.ordered.combine`)."""
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
def _transport(y, uoff, rows, ucols, Phi, src, fac, ia, ib, io, out):
    """Coefficients of ``grad_x U . Phi`` for the rows of ``U`` (stored in ``y`` from
    ``uoff``, ``rows`` x ``ucols``) into ``out[:rows]``."""
    N = Phi.shape[0]
    for r in range(rows):
        base = uoff + r * ucols
        for c in range(ucols):
            out[r, c] = 0.0
        for n in range(ia.shape[0]):
            a = ia[n]
            b = ib[n]
            s = 0.0
            for i in range(N):
                s += (y[base + src[i, a]] * fac[i, a]) * Phi[i, b]
            out[r, io[n]] += s


@njit(cache=True)
def jet_rhs(N, nw, cZ, cV, tab, Phi, Rc, G, Rw, y, off, dy, tZ, tV, Lam, Sw, tW):
    """dy/dp of one jet (Z of degree K, V and W of degree K + 1) at one sample; the jet
    is stored from ``off``: Z (N, cZ), V (cV), W (nw, cV)."""
    (zsrc, zfac, zia, zib, zio, vsrc, vfac, via, vib, vio, sia, sib, sio) = tab
    oV = off + N * cZ
    oW = oV + cV
    _transport(y, off, N, cZ, Phi, zsrc, zfac, zia, zib, zio, tZ)
    for i in range(N):
        for c in range(cZ):
            dy[off + i * cZ + c] = -tZ[i, c]
    _transport(y, oV, _IDS[1], cV, Phi, vsrc, vfac, via, vib, vio, tV)
    for c in range(cV):
        dy[oV + c] = -(tV[0, c] + Rc[c])
    if nw:
        for i in range(N):              # Lam = grad V, of degree K
            for c in range(cZ):
                Lam[i, c] = y[oV + vsrc[i, c]] * vfac[i, c]
        for w in range(nw):
            for c in range(cV):
                Sw[w, c] = 0.0
            for n in range(sia.shape[0]):
                s = 0.0
                for i in range(N):
                    s += G[i, w, sia[n]] * Lam[i, sib[n]]
                Sw[w, sio[n]] += s
        _transport(y, oW, nw, cV, Phi, vsrc, vfac, via, vib, vio, tW)
        for w in range(nw):
            for c in range(cV):
                dy[oW + w * cV + c] = -(tW[w, c] + (Sw[w, c] + Rw[w, c]))


@njit(cache=True)
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


def jet_sweep(one, ev, fns, plan, x, N, M, nw, CF, CW, q, orders, cZs, cVs, offs, size, tab_lo, tab_hi,
              stage_p, step_h, thetas, jacs, A, Wts, record, rec0, disc, depth_p, depth_th,
              out_z, out_v, out_a, out_w, out_g, err_z, err_v, err_a, err_w,
              fail_pos, fail_p):
    """Jet sweep of every sample (see the module docstring and JetClosure)."""
    for b in prange(x.shape[0]):
        one(np.int64(b), ev, fns, plan, x, N, M, nw, CF, CW, q, orders, cZs, cVs, offs, size, tab_lo, tab_hi,
              stage_p, step_h, thetas, jacs, A, Wts, record, rec0, disc, depth_p, depth_th,
              out_z, out_v, out_a, out_w, out_g, err_z, err_v, err_a, err_w,
              fail_pos, fail_p)


@njit(cache=True)
def _jet_sweep_one(b, ev, fns, plan, x, N, M, nw, CF, CW, q, orders, cZs, cVs, offs, size, tab_lo, tab_hi,
              stage_p, step_h, thetas, jacs, A, Wts, record, rec0, disc, depth_p, depth_th,
              out_z, out_v, out_a, out_w, out_g, err_z, err_v, err_a, err_w,
              fail_pos, fail_p):
    """The jet sweep of sample ``b`` (see JetClosure): Z, V, W of each order in
    ``orders`` (1, and 2 with the error estimate), stepped by the tableau ``A``, ``Wts``
    or by the paper's layer recursion (``disc``)."""
    n_orders = orders.shape[0]
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
    tZ = np.empty((N, cmax))
    tV = np.empty((1, cmax))
    Lam = np.empty((N, cmax))
    Sw = np.empty((nw, cmax))
    tW = np.empty((nw, cmax))
    y = np.zeros(size)
    ys = np.empty(size)
    Ks = np.empty((S + 2, size))  # disc uses three rows
    f0 = np.empty(N)
    r0 = np.empty(1)
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
        _jet_record(ev, fns, plan, N, M, nw, cZs, cVs, offs, n_orders, y, xb, rec0, b,
                    depth_p, depth_th, pz, pt, hs, vals, f0, r0,
                    out_z, out_v, out_a, out_w, out_g, err_z, err_v, err_a, err_w)
    for k in range(n_steps):
        h = step_h[k]
        if disc:
            p = stage_p[k, 0]
            _jet_coefficients(ev, fns, plan, N, M, nw, CF, CW, p, xb, thetas[k, 0], jacs[k, 0],
                              pz, pt, hs, vals, fbuf, rbuf, gbuf, rwbuf, Phi, Rc, G, Rw)
            cZ = cZs[0]
            cV = cVs[0]
            off = offs[0]
            jet_rhs(N, nw, cZ, cV, tab_lo, Phi, Rc, G, Rw, y, off, Ks[0], tZ, tV, Lam, Sw, tW)
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
            jet_rhs(N, nw, cZ, cV, tab_lo, Phi, Rc, G, Rw, ys, off, Ks[2], tZ, tV, Lam, Sw, tW)
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
                _jet_coefficients(ev, fns, plan, N, M, nw, CF, CW, p, xb, thetas[k, s],
                                  jacs[k, s], pz, pt, hs, vals, fbuf, rbuf, gbuf, rwbuf,
                                  Phi, Rc, G, Rw)
                for o in range(n_orders):
                    tab = tab_lo if o == 0 else tab_hi
                    jet_rhs(N, nw, cZs[o], cVs[o], tab, Phi, Rc, G, Rw, ys, offs[o], Ks[s],
                            tZ, tV, Lam, Sw, tW)
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
            _jet_record(ev, fns, plan, N, M, nw, cZs, cVs, offs, n_orders, y, xb, record[k], b,
                        depth_p, depth_th, pz, pt, hs, vals, f0, r0,
                        out_z, out_v, out_a, out_w, out_g, err_z, err_v, err_a, err_w)


@njit(cache=True)
def _jet_record(ev, fns, plan, N, M, nw, cZs, cVs, offs, n_orders, y, xb, d, b, depth_p, depth_th,
                pz, pt, hs, vals, f0, r0, out_z, out_v, out_a, out_w, out_g,
                err_z, err_v, err_a, err_w):
    cZ = cZs[0]
    cV = cVs[0]
    off = offs[0]
    oV = off + N * cZ
    oW = oV + cV
    for i in range(N):
        out_z[d, b, i] = y[off + i * cZ]
        out_a[d, b, i] = y[oV + 1 + i]
    out_v[d, b] = y[oV]
    for w in range(nw):
        out_w[d, b, w] = y[oW + w * cV]
    ev(fns, plan, _IDS[5], depth_p[d], xb, depth_th[d], pz, pt, hs, vals, f0)
    ev(fns, plan, _IDS[6], depth_p[d], xb, depth_th[d], pz, pt, hs, vals, r0)
    s = 0.0
    for i in range(N):
        s += out_a[d, b, i] * f0[i]
    out_g[d, b] = -(s + r0[0])
    if n_orders > 1:
        hZ = cZs[1]
        hV = cVs[1]
        hoff = offs[1]
        hoV = hoff + N * hZ
        hoW = hoV + hV
        for i in range(N):
            err_z[d, b, i] = abs(y[hoff + i * hZ] - out_z[d, b, i])
            err_a[d, b, i] = abs(y[hoV + 1 + i] - out_a[d, b, i])
        err_v[d, b] = abs(y[hoV] - out_v[d, b])
        for w in range(nw):
            err_w[d, b, w] = abs(y[hoW + w * hV] - out_w[d, b, w])


# -- the stencil closure -----------------------------------------------------------------


def stencil_sweep(one, ev, fns, plan, points, delta, central, N, M, nw, q,
                  stage_p, step_h, thetas, jacs, A, Wts, record, rec0, depth_p, depth_th,
                  out_z, out_v, out_a, out_w, out_g, fail_pos, fail_p):
    """Stencil sweep of every sample (see StencilClosure)."""
    for b in prange(points.shape[0]):
        one(np.int64(b), ev, fns, plan, points, delta, central, N, M, nw, q,
                  stage_p, step_h, thetas, jacs, A, Wts, record, rec0, depth_p, depth_th,
                  out_z, out_v, out_a, out_w, out_g, fail_pos, fail_p)


@njit(cache=True)
def _stencil_sweep_one(b, ev, fns, plan, points, delta, central, N, M, nw, q,
                  stage_p, step_h, thetas, jacs, A, Wts, record, rec0, depth_p, depth_th,
                  out_z, out_v, out_a, out_w, out_g, fail_pos, fail_p):
    """The stencil sweep of sample ``b`` (see StencilClosure): Z, Lam, W at the P stencil
    points and V at x, with difference quotients over the stencil."""
    P = points.shape[1]
    S = A.shape[0]
    n_steps = step_h.shape[0]
    size = 2 * P * N + 1 + P * nw
    oL = P * N
    oV = 2 * P * N
    oW = oV + 1
    xb = points[b, 0]
    pz, pt, hs, vals = _plan_scratch(plan, N, M)
    fb = np.empty(N * (N + 1))
    rb = np.empty(N + 1)
    gb = np.empty(N * M)
    rwb = np.empty(M)
    Phi = np.empty((P, N))
    Aj = np.empty((P, N, N))
    rz = np.empty((P, N))
    G = np.empty((P, N, nw))
    rw = np.empty((P, nw))
    JZ = np.empty((N, N))
    JL = np.empty((N, N))
    JW = np.empty((nw, N))
    d = np.empty(N)
    for j in range(N):
        d[j] = 2.0 * delta[b, j] if central else delta[b, j]
    y = np.zeros(size)
    ys = np.empty(size)
    Ks = np.empty((S, size))
    f0 = np.empty(N)
    r0 = np.empty(1)
    zero_th = np.zeros(M)
    for pp in range(P):
        ev(fns, plan, _IDS[4], q, points[b, pp], zero_th, pz, pt, hs, vals, rb)
        for i in range(N):
            y[pp * N + i] = points[b, pp, i]
            y[oL + pp * N + i] = rb[1 + i]
        if pp == 0:
            y[oV] = rb[0]
    failed = False
    if rec0 >= 0:
        _stencil_record(ev, fns, plan, N, nw, P, y, xb, rec0, b, depth_p, depth_th, pz, pt, hs,
                        vals, f0, r0, out_z, out_v, out_a, out_w, out_g)
    for k in range(n_steps):
        h = step_h[k]
        for s in range(S):
            p = stage_p[k, s]
            _stage_input(y, Ks, A, s, h, ys)
            if _blew_up(ys, fail_pos, fail_p, b, 2 * (k * (S + 1) + s), p):
                failed = True
                break
            th = thetas[k, s]
            J = jacs[k, s]
            for pp in range(P):
                pnt = points[b, pp]
                ev(fns, plan, _IDS[0], p, pnt, th, pz, pt, hs, vals, fb)
                ev(fns, plan, _IDS[1], p, pnt, th, pz, pt, hs, vals, rb)
                for i in range(N):
                    Phi[pp, i] = fb[i * (N + 1)]
                    rz[pp, i] = rb[1 + i]
                    for j in range(N):
                        Aj[pp, i, j] = fb[i * (N + 1) + 1 + j]
                if pp == 0:
                    r0[0] = rb[0]
                if nw:
                    ev(fns, plan, _IDS[2], p, pnt, th, pz, pt, hs, vals, gb)
                    ev(fns, plan, _IDS[3], p, pnt, th, pz, pt, hs, vals, rwb)
                    for w in range(nw):
                        for i in range(N):
                            acc = 0.0
                            for m in range(M):
                                acc += gb[i * M + m] * J[m, w]
                            G[pp, i, w] = acc
                        acc = 0.0
                        for m in range(M):
                            acc += rwb[m] * J[m, w]
                        rw[pp, w] = acc
            # difference quotients, shared by every point
            for j in range(N):
                for i in range(N):
                    if central:
                        JZ[i, j] = (ys[(1 + j) * N + i] - ys[(1 + N + j) * N + i]) / d[j]
                        JL[i, j] = (ys[oL + (1 + j) * N + i] - ys[oL + (1 + N + j) * N + i]) / d[j]
                    else:
                        JZ[i, j] = (ys[(1 + j) * N + i] - ys[i]) / d[j]
                        JL[i, j] = (ys[oL + (1 + j) * N + i] - ys[oL + i]) / d[j]
                for w in range(nw):
                    if central:
                        JW[w, j] = (ys[oW + (1 + j) * nw + w] - ys[oW + (1 + N + j) * nw + w]) / d[j]
                    else:
                        JW[w, j] = (ys[oW + (1 + j) * nw + w] - ys[oW + w]) / d[j]
            K = Ks[s]
            for pp in range(P):
                for i in range(N):
                    a1 = 0.0
                    a2 = 0.0
                    a3 = 0.0
                    for j in range(N):
                        a1 += JZ[i, j] * Phi[pp, j]
                        a2 += JL[i, j] * Phi[pp, j]
                        a3 += Aj[pp, j, i] * ys[oL + pp * N + j]
                    K[pp * N + i] = -a1
                    K[oL + pp * N + i] = -((a2 + a3) + rz[pp, i])
                for w in range(nw):
                    a1 = 0.0
                    a2 = 0.0
                    for j in range(N):
                        a1 += JW[w, j] * Phi[pp, j]
                        a2 += G[pp, j, w] * ys[oL + pp * N + j]
                    K[oW + pp * nw + w] = -((a1 + a2) + rw[pp, w])
            acc = 0.0
            for i in range(N):
                acc += ys[oL + i] * Phi[0, i]
            K[oV] = -(acc + r0[0])
            if _blew_up(K, fail_pos, fail_p, b, 2 * (k * (S + 1) + s) + 1, p):
                failed = True
                break
        if failed:
            break
        _step(y, Ks, Wts, h)
        if _blew_up(y, fail_pos, fail_p, b, 2 * (k * (S + 1) + S), stage_p[k, 0] + h):
            break
        if record[k] >= 0:
            _stencil_record(ev, fns, plan, N, nw, P, y, xb, record[k], b, depth_p, depth_th, pz,
                            pt, hs, vals, f0, r0, out_z, out_v, out_a, out_w, out_g)


@njit(cache=True)
def _stencil_record(ev, fns, plan, N, nw, P, y, xb, d, b, depth_p, depth_th, pz, pt, hs, vals, f0,
                    r0, out_z, out_v, out_a, out_w, out_g):
    oL = P * N
    oV = 2 * P * N
    oW = oV + 1
    for i in range(N):
        out_z[d, b, i] = y[i]
        out_a[d, b, i] = y[oL + i]
    out_v[d, b] = y[oV]
    for w in range(nw):
        out_w[d, b, w] = y[oW + w]
    ev(fns, plan, _IDS[5], depth_p[d], xb, depth_th[d], pz, pt, hs, vals, f0)
    ev(fns, plan, _IDS[6], depth_p[d], xb, depth_th[d], pz, pt, hs, vals, r0)
    s = 0.0
    for i in range(N):
        s += out_a[d, b, i] * f0[i]
    out_g[d, b] = -(s + r0[0])


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
