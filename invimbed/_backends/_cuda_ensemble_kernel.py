"""The CUDA kernel of the ensemble adjoint (``solve_adjoint(backend="cuda")``): one thread
per row, generated per problem and method.

`build_kernel` returns a ``numba.cuda.jit`` kernel whose thread ``j`` runs row
``rows[j]`` (a depth ``p`` and an input ``x``) from start to end, as
`invimbed._backends._ensemble_kernels._row` does on the CPU: the forward pass of
``y = [z, int R]`` from ``p`` to ``q`` with its dense output, ``J = y_N + T(z(q))``,
``lambda(q) = T_z``, and the backward pass of ``[lambda, mu]`` from ``q`` down to ``p``
on that dense output (docs/theory.md, "The classical adjoint method"; the paper's eq. (11)).

What it is made of
------------------
* The step arithmetic is `invimbed._backends._ensemble_parts`, the numba CPU kernels'
  own functions, compiled for the device by `invimbed._backends._cuda_device.device`
  (scipy's first-step rule, the step-size factors, the stage and step sums, the scaled
  error and numpy's pairwise RMS, the stops and pieces of the control, the dense output).
  The per-row loop is `_ensemble_kernels._integrate` itself, compiled for the device
  with two names of its globals replaced: `_rhs` by the generated `_rhs` below, and
  `_grow` by `_fixed` (the dense output has a fixed capacity: a row that fills it ends
  with `K_FULL`, and `invimbed._backends.ensemble_cuda` runs it again with more).
* The derivatives are the symbolic provider's generated code, the ``point`` function of
  each request (`invimbed._core.derivatives._codegen`) that ``backend="numba"`` calls
  through ``sample``: here it writes into a thread-local buffer, and the tensor's entries
  are read through the request's ``GATHER`` map, in the order the CPU kernel multiplies
  them (`_ensemble_kernels._transposed_times`). So both backends do the same arithmetic.
* Sizes (``N``, ``M``, ``n_w``), the tableau and the step-control constants are
  compile-time constants of the kernel (its local arrays need them).

numba-cuda is imported with this module: import it through
`invimbed._backends._cuda_device.import_cuda` first, which names the extra if it is
missing.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numba import cuda, float64, int64

from .._core.integrators.ensemble import (MAX_FACTOR, MIN_FACTOR, SAFETY, STIFF_H_LAMBDA,
                                          STIFF_WINDOW, TABLEAUX)
from . import _ensemble_parts as parts
from ._cuda_device import device, simulated
from . import _ensemble_kernels as kern
from ._ensemble_kernels import K_DONE, K_FULL

__all__ = ["K_FULL", "build_kernel"]

#: The derivatives the kernel evaluates, as ``(which, dz, dth)``.
KEYS = (("f", 0, 0), ("R", 0, 0), ("f", 1, 0), ("R", 1, 0), ("f", 0, 1), ("R", 0, 1),
        ("T", 0, 0), ("T", 1, 0))


def _nothing(t, z, th, out):  # pragma: no cover - compiled
    """The ``point`` of a request whose entries are all zero."""
    return


def generated(provider: Any, key: tuple[str, int, int]) -> tuple[Any, np.ndarray, int]:
    """``(point, gather, size)`` of the generated code of derivative ``key``: the device
    function writing the request's distinct values, the map from the tensor's entries
    (C order) to them, and the buffer size (one slot beyond them stays zero)."""
    fn = provider.sample_function(*key)
    glb = fn.py_func.__globals__
    gather = np.ascontiguousarray(glb["GATHER"], dtype=np.int64)
    point = glb.get("point")
    size = int(gather.max()) + 2 if gather.size else 1
    if point is None:
        return device_noop(), gather, size
    if simulated():
        return _compiled_on_cpu(fn, gather, key[0] == "T"), gather, size
    return device(point), gather, size


def _compiled_on_cpu(fn: Any, gather: np.ndarray, terminal: bool) -> Any:
    """In the simulator: ``point`` by the request's per-sample function ``fn`` (``sample``,
    ``sample_T(z)``) as numba compiled it for the CPU, its tensor written into ``point``'s
    buffer through ``gather`` (entry ``k`` into slot ``gather[k]``: the same values, the
    zero slot zero). The simulator runs device functions as Python, whose ``x ** 4`` is
    libm's ``pow`` where compiled code (a GPU's too) multiplies; the compiled twin keeps
    the arithmetic of both. ``fn`` rather than the module's ``point``: the same printed
    expressions, and the function ``backend="numba"`` calls, so one compilation serves
    both (a simulated solve beside a numba one compiles nothing more)."""
    slots = [int(g) for g in gather]

    def call(t, z, th, out):
        value = fn(z) if terminal else fn(t, z, getattr(th, "_ary", th))  # the simulator's
        flat = np.ravel(value)                                            # array: its numpy
        for k, g in enumerate(slots):
            out[g] = flat[k]
    return cuda.jit(device=True)(call)


def device_noop() -> Any:
    return cuda.jit(device=True)(_nothing)


def build_kernel(provider: Any, N: int, M: int, nw: int, method: str) -> Any:
    """The kernel of the module docstring for ``provider``'s generated code, and the
    floats per step of its dense output."""
    tab = TABLEAUX[method]
    A, Bw, C, E, P = (np.ascontiguousarray(a, dtype=float) for a in
                      (tab.A, tab.B, tab.C, tab.E, tab.P))
    NS, KQ, ORDER = int(Bw.shape[0]), int(P.shape[1]), int(tab.error_order)
    NS1 = NS + 1          # a constant: local arrays' shapes must be
    STIFF = -1 if tab.stiff_stage is None else int(tab.stiff_stage)
    S, SB = N + 1, N + nw
    SMAX = max(S, SB)
    MW = max(M, 1)
    pts, gat, off = [], [], [0]
    for key in KEYS:
        pt, g, size = generated(provider, key)
        pts.append(pt)
        gat.append(g)
        off.append(off[-1] + size)
    f_pt, r_pt, fz_pt, rz_pt, fth_pt, rth_pt, t_pt, tz_pt = pts
    GF, GR, GFZ, GRZ, GFTH, GRTH, GT, GTZ = gat
    OF, OR, OFZ, ORZ, OFTH, ORTH, OT, OTZ, TOTAL = off
    WIDTH = 2 + S + S * KQ
    dense_z, piece_of = device(parts._dense_z), device(parts._piece)
    pass_out, row_out = device(kern.pass_out), device(kern.row_out)

    @cuda.jit(device=True)
    def _rhs(mode, t, y, piece, out, values, dense, nd, ptr, ctx):
        """`_ensemble_kernels._rhs` on the generated code: forward (``mode == 0``)
        ``[f, R]``; backward ``[-(f_z^T lam + R_z), -((f_th^T lam + R_th) dtheta/dw)]``
        at ``z(t)`` of the dense output; ``ctx`` is ``(zb, gacc, vals)``."""
        zb, gacc, vals = ctx
        th = values[piece]
        if mode == 0:
            for i in range(N):
                zb[i] = y[i]
            f_pt(t, zb, th, vals[OF:OR])
            for i in range(N):
                out[i] = vals[OF + GF[i]]
            r_pt(t, zb, th, vals[OR:OFZ])
            out[N] = vals[OR + GR[0]]
            return
        dense_z(t, dense, nd, ptr, N, KQ, zb)
        fz_pt(t, zb, th, vals[OFZ:ORZ])
        for c in range(N):          # f_z^T lam, j in order
            acc = 0.0
            for j in range(N):
                acc += vals[OFZ + GFZ[j * N + c]] * y[j]
            out[c] = acc
        rz_pt(t, zb, th, vals[ORZ:OFTH])
        for i in range(N):
            out[i] = -(out[i] + vals[ORZ + GRZ[i]])
        if nw == 0:
            return
        fth_pt(t, zb, th, vals[OFTH:ORTH])
        for c in range(M):          # f_theta^T lam
            acc = 0.0
            for j in range(N):
                acc += vals[OFTH + GFTH[j * M + c]] * y[j]
            gacc[c] = acc
        for w in range(nw):
            out[N + w] = 0.0
        rth_pt(t, zb, th, vals[ORTH:OT])
        for m in range(M):
            out[N + piece * M + m] = -(gacc[m] + vals[ORTH + GRTH[m]])

    @cuda.jit(device=True)
    def _fixed(dense, nd):
        """The dense buffer cannot grow: `_integrate` ends the row with `K_FULL`."""
        return dense

    integrate = device(kern._integrate, _rhs=_rhs, _grow=_fixed)

    @cuda.jit
    def kernel(rows, X, depths, q, knots, values, stops, num, max_steps, dense, out_z, out_v,
               out_a, out_w, out_g, out_steps, out_nfev, out_status, out_t, out_hl):
        """Thread ``j``: row ``r = rows[j] = i B + b`` (depth ``depths[i]``, input
        ``X[b]``) into the outputs' entry ``r`` (written whole: NaN fields where the row
        fails), with ``dense[:, :, j]`` as its dense output."""
        j = cuda.grid(1)
        if j >= rows.shape[0]:
            return
        r = rows[j]
        B = X.shape[0]
        p = depths[r // B]
        for i in range(N):
            out_z[r, i] = math.nan
            out_a[r, i] = math.nan
        for w in range(nw):
            out_w[r, w] = math.nan
        out_v[r] = math.nan
        out_g[r] = math.nan
        out_status[r, 1] = K_DONE
        rtol, atol, first_step, max_step = num[0], num[1], num[2], num[3]
        dn = dense[:, :, j]
        ptr = cuda.local.array(1, int64)
        zb = cuda.local.array(N, float64)
        gacc = cuda.local.array(MW, float64)
        vals = cuda.local.array(TOTAL, float64)
        for i in range(TOTAL):
            vals[i] = 0.0
        K = cuda.local.array((NS1, SMAX), float64)
        f = cuda.local.array(SMAX, float64)
        y_new = cuda.local.array(SMAX, float64)
        ys = cuda.local.array(SMAX, float64)
        y_stiff = cuda.local.array(SMAX, float64)
        a = cuda.local.array(SMAX, float64)
        y = cuda.local.array(SMAX, float64)
        for i in range(N):            # forward: y = [z, int R] from p to q
            y[i] = X[r % B, i]
        y[N] = 0.0
        step = (A, Bw, C, E, P, knots, values, stops, rtol, atol, first_step, max_step,
                SAFETY, MIN_FACTOR, MAX_FACTOR, max_steps, ORDER, STIFF, STIFF_H_LAMBDA,
                STIFF_WINDOW)
        ctx = (zb, gacc, vals)
        st, t_end, nst, nfe, hl, dn, nd = integrate(
            0, p, q, y[:S], step, (K[:, :S], f[:S], y_new[:S], ys[:S], y_stiff[:S], a[:S]),
            dn, 0, ptr, ctx)
        pass_out(r, 0, st, nst, nfe, t_end, hl, out_status, out_steps, out_nfev, out_t,
                 out_hl)
        if st != K_DONE:
            return
        zq = cuda.local.array(N, float64)
        for i in range(N):
            zq[i] = y[i]
        th0 = values[0]
        t_pt(0.0, zq, th0, vals[OT:OTZ])
        value = y[N] + vals[OT + GT[0]]
        tz_pt(0.0, zq, th0, vals[OTZ:TOTAL])
        for i in range(SB):           # backward: [lambda, mu] from q down to p
            y[i] = 0.0
        for i in range(N):
            y[i] = vals[OTZ + GTZ[i]]
        st, t_end, nst, nfe, hl, dn, nd = integrate(
            1, q, p, y[:SB], step, (K[:, :SB], f[:SB], y_new[:SB], ys[:SB], y_stiff[:SB],
                                     a[:SB]), dn, nd, ptr, ctx)
        pass_out(r, 1, st, nst, nfe, t_end, hl, out_status, out_steps, out_nfev, out_t,
                 out_hl)
        if st != K_DONE:
            return
        row_out(r, zq, y, value, N, nw, out_z, out_a, out_w, out_v)
        # dJ/dp = -(lambda . f + R) at (p, x), theta(p) from above (`depth_gradient`),
        # summed in `sum_products`' order
        th = values[piece_of(knots, p, p)]
        for i in range(N):
            zq[i] = X[r % B, i]
        f_pt(p, zq, th, vals[OF:OR])
        r_pt(p, zq, th, vals[OR:OFZ])
        acc = y[0] * vals[OF + GF[0]]
        for i in range(1, N):
            acc = acc + y[i] * vals[OF + GF[i]]
        out_g[r] = -(acc + vals[OR + GR[0]])

    return kernel, WIDTH
